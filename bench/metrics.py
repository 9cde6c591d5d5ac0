"""`/metrics` with a token as projects grow (issue 26): `python -m bench.metrics [--sizes
10,100,1000,10000] [--reps 5]`.

One embedded Valkey; projects are added through the real ingest path in-process
(`Ingestor.ingest`, then `settle`: the fold, which also moves the spend ranking) until each
size is reached: per project one batch of 24 events this month (4 stages x 3 experiments x 2
owners, GPU, storage and network SKUs of `BENCH_CARD`, quantities varying by project so that
the ranking is not flat) and one monthly budget. At each size a scrape's whole work is timed
in-process: `exposition` (the process metrics, the spend read, the page written) with the TTL
at 0 so every call reads, `--reps` times, median in ms, and the growth per 10x of projects
beside each row:

* "every project" is the read before the cap (`TRAINLEDGER_METRICS_SPEND_PROJECTS` at its
  maximum, 10,000: every project's totals read and written, as the service did before);
* "cap 500 (default)" is the service as it is now;
* "token of 10 projects" is a scoped token with the default cap.

Beside the times: the Redis commands and round trips of one scrape after a warm-up one (the
first scrape past the cap seeds the ranking once from every project; counted at the client,
as tests/integration/spend_metrics/test_cap.py does) and the page's size. Times are this
machine's, under whatever else runs on it; the ratios and the counts are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from trainledger.auth.model import Principal
from trainledger.budgets.model import BudgetIn
from trainledger.budgets.service import create_project_budget
from trainledger.events.decoding import JSON, decode_events
from trainledger.ingest.service import Ingestor
from trainledger.ledger.folding import settle
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.spend_metrics.service import SpendGauges, exposition
from trainledger.spend_metrics.settings import PROJECTS_RANGE, SpendConfig
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.stores import Stores

from bench.common import BENCH_CARD
from bench.reviews import _growth

_ADMIN = Principal("bench", "admin", None, "bench")
_STAGES = ("pretrain", "midtrain", "eval", "data_prep")
_SKUS = ("gpu.h100.hour", "gpu.h200.hour", "storage.warm.gb_day", "network.cross_region.gb")


def _events(project: str, index: int) -> bytes:
    when = max(
        datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0),
        datetime.now(UTC) - timedelta(hours=2),
    ).isoformat()
    events = [
        {
            "id": f"{project}-{i}",
            "time": when,
            "project": project,
            "sku": _SKUS[i % len(_SKUS)],
            "quantity": str(1 + (index * 7 + i) % 97),
            "stage": _STAGES[i % 4],
            "experiment": f"exp-{i % 3}",
            "owner": f"owner-{i % 2}",
        }
        for i in range(24)
    ]
    return msgspec.json.encode(events)


async def _add_projects(store: Stores, cards: RateCards, start: int, stop: int) -> None:
    ingestor = Ingestor(store, cards)

    async def one(i: int) -> None:
        project = f"proj-{i:05d}"
        items, _ = decode_events(_events(project, i), JSON)
        await ingestor.ingest(items, _ADMIN)
        await settle(store, project)
        budget = {"project": project, "name": "monthly", "amount": "1000", "period": "monthly"}
        await create_project_budget(store, cards, msgspec.convert(budget, BudgetIn))

    for at in range(start, stop, 16):
        await asyncio.gather(*[one(i) for i in range(at, min(stop, at + 16))])


@contextmanager
def _counted(store: Stores) -> Iterator[list[int]]:
    """[commands, round trips] the store's client sends meanwhile (pipelines by their size)."""
    client: Any = store.connection.client
    work = [0, 0]
    single, make_pipeline = client.execute_command, client.pipeline

    async def execute_command(*args: Any, **options: Any) -> Any:
        work[0] += 1
        work[1] += 1
        return await single(*args, **options)

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = make_pipeline(*args, **kwargs)
        run = pipe.execute

        async def execute(*a: Any, **k: Any) -> Any:
            work[0] += len(pipe.command_stack)
            work[1] += 1
            return await run(*a, **k)

        pipe.execute = execute
        return pipe

    client.execute_command, client.pipeline = execute_command, pipeline
    try:
        yield work
    finally:
        client.execute_command, client.pipeline = single, make_pipeline


async def _scrape(
    store: Stores, cards: RateCards, cap: int, principal: Principal, reps: int
) -> tuple[float, int, int, int]:
    """Median ms of a scrape, its commands and round trips, and the page's bytes."""
    gauges = SpendGauges(SpendConfig(ttl_seconds=0, deadline_seconds=600, projects=cap))
    await exposition(gauges, store, cards, principal)  # warm-up (and the ranking's seed)
    with _counted(store) as work:
        page = await exposition(gauges, store, cards, principal)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await exposition(gauges, store, cards, principal)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), work[0], work[1], len(page)


async def _run(url: str, sizes: list[int], reps: int) -> dict[str, list[Any]]:
    store = Stores.from_url(url)
    cards = RateCards(store)
    table: dict[str, list[Any]] = {}
    scoped = Principal("bench-10", "read", frozenset(f"proj-{i:05d}" for i in range(10)), "b")
    rows = (
        ("every project (before)", PROJECTS_RANGE[1], _ADMIN),
        ("cap 500 (default, after)", SpendConfig.projects, _ADMIN),
        ("token of 10 projects, cap 500", SpendConfig.projects, scoped),
    )
    try:
        await cards.put("default", msgspec.convert(BENCH_CARD, RateCardIn, strict=False))
        have = 0
        for n in sizes:
            t0 = time.perf_counter()
            await _add_projects(store, cards, have, n)
            have = n
            print(f"# {n:,} projects loaded ({time.perf_counter() - t0:.1f} s)", flush=True)
            for name, cap, principal in rows:
                ms, commands, trips, size = await _scrape(store, cards, cap, principal, reps)
                table.setdefault(f"{name}, ms", []).append(ms)
                table.setdefault(f"{name}, Redis commands", []).append(commands)
                table.setdefault(f"{name}, round trips", []).append(trips)
                table.setdefault(f"{name}, page KiB", []).append(size / 1024)
    finally:
        await store.close()
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    data_dir = Path(tempfile.mkdtemp(prefix="tl-bench-metrics-"))
    valkey = EmbeddedValkey(data_dir, appendfsync="no")
    try:
        table = asyncio.run(_run(valkey.start(), sizes, args.reps))
    finally:
        valkey.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    print()
    print(
        "| /metrics with a token | " + " | ".join(f"{n:,}" for n in sizes) + " | growth per 10x |"
    )
    print("|---|" + "---:|" * len(sizes) + "---|")
    for name, values in table.items():
        cells = " | ".join(f"{v:,.1f}" if isinstance(v, float) else f"{v:,}" for v in values)
        print(f"| {name} | {cells} | {_growth(sizes, [float(v) for v in values])} |")


if __name__ == "__main__":
    main()
