"""The ingest path in-process, phase by phase: a quick, low-noise check of the worker's CPU.

    .venv/bin/python -m bench.inproc                     # 40 batches of 5,000 JSON events
    .venv/bin/python -m bench.inproc --format msgpack --batches 20 --profile

It starts an embedded Valkey, puts the benchmark rate card, and posts fresh 5,000-event
batches (the HTTP benchmark's bodies) through `decode_events` and `Ingestor.ingest`, one at a
time, as one HTTP request would. It prints the worker's CPU per event (decode, ingest) and
Valkey's CPU per event (its process time) with `INFO commandstats` per command, so a
change can be judged without the HTTP layer and with far less noise than the load tests.
`--profile` adds a cProfile of the ingest calls (top functions by own time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from trainledger.auth.model import Principal
from trainledger.events.decoding import decode_events
from trainledger.ingest.service import Ingestor
from trainledger.ledger.folding import settle
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.stores import Stores

from bench.common import BENCH_CARD, CONTENT_TYPE, EventFactory, Workload, encode
from bench.server import process_cpu_seconds

_ADMIN = Principal("bench-inproc", "admin", None, "bench")


async def _run(args: argparse.Namespace, url: str) -> None:
    store = Stores.from_url(url)
    rate_cards = RateCards(store)
    await rate_cards.put("default", msgspec.convert(BENCH_CARD, RateCardIn, strict=False))
    ingestor = Ingestor(store, rate_cards)
    factory = EventFactory(Workload())
    bodies = [encode(factory.batch(b, args.size), args.format) for b in range(args.batches + 1)]
    media = CONTENT_TYPE[args.format]
    # Warm-up (catalog build, script load) outside the figures.
    items, _ = decode_events(bodies[0], media)
    await ingestor.ingest(items, _ADMIN)
    await store.connection.client.config_resetstat()
    valkey_pid = int((await store.connection.client.info("server"))["process_id"])
    valkey_cpu = process_cpu_seconds([valkey_pid])
    profiler = cProfile.Profile() if args.profile else None
    t_decode = t_ingest = t_fold = 0.0
    folds = 0
    accepted = 0
    increments = 0
    apply_batch = store.ingest.apply_batch

    async def counting(plan: Any) -> Any:
        nonlocal increments
        increments += len(plan.increments) + len(plan.tier_increments)
        return await apply_batch(plan)

    store.ingest.apply_batch = counting  # type: ignore[method-assign]
    for b, body in enumerate(bodies[1:], 1):
        t0 = time.process_time()
        items, _ = decode_events(body, media)
        t1 = time.process_time()
        if profiler:
            profiler.enable()
        report = await ingestor.ingest(items, _ADMIN)
        if profiler:
            profiler.disable()
        t2 = time.process_time()
        t_decode += t1 - t0
        t_ingest += t2 - t1
        accepted += report.accepted
        assert not report.rejected, report.rejected[:3]
        if b % args.fold_every == 0 or b == args.batches:
            # What a worker's background fold does every second: the queued batches' totals.
            if profiler:
                profiler.enable()
            folds += await settle(store, Workload().project)
            if profiler:
                profiler.disable()
            t_fold += time.process_time() - t2
    valkey_cpu = process_cpu_seconds([valkey_pid]) - valkey_cpu
    stats = await store.connection.client.info("commandstats")
    await store.close()
    n = args.batches * args.size
    print(f"{args.batches} batches of {args.size} {args.format} events, {accepted} accepted")
    print(f"immediate increments per batch (tier counters): {increments / args.batches:,.0f}")
    print(f"batches folded: {folds}, one fold per {args.fold_every} batches")
    print(
        f"worker CPU per event: decode {1e6 * t_decode / n:6.2f} µs, "
        f"ingest {1e6 * t_ingest / n:6.2f} µs (incl. redis-py), fold {1e6 * t_fold / n:6.2f} µs"
    )
    print(
        f"valkey CPU per event: {1e6 * valkey_cpu / n:6.2f} µs (process time; the figures "
        "below are commandstats, wall time inside Valkey, inflated when the machine is busy)"
    )
    for name, row in sorted(stats.items()):
        calls = int(row["calls"])
        usec = float(row["usec"])
        print(
            f"  valkey {name:24s} calls {calls:7d}  {usec / n:7.2f} µs/event "
            f"({usec / max(calls, 1):9.1f} µs/call)"
        )
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--format", choices=("json", "msgpack"), default="json")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--size", type=int, default=5_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--fold-every",
        type=int,
        default=16,
        help="fold the queued totals after every N batches (the server folds every second)",
    )
    parser.add_argument(
        "--no-rollups",
        action="store_true",
        help="leave the query roll-ups out (to tell their cost apart; the totals stay exact)",
    )
    args = parser.parse_args()
    if args.no_rollups:
        import trainledger.ledger.folding as folding_module

        folding_module.rollup_increments = lambda *a, **k: []  # type: ignore[assignment]
    data_dir = Path(tempfile.mkdtemp(prefix="tl-bench-inproc-"))
    valkey = EmbeddedValkey(data_dir, appendfsync="no")
    try:
        asyncio.run(_run(args, valkey.start()))
    finally:
        valkey.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
