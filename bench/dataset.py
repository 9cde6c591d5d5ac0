"""A large project loaded through the real ingest path, in-process (for queries and memory).

Posting 10 million events over HTTP would take most of an hour on a 2-core machine, so the
queries and memory benchmarks load their data by calling what the HTTP handler calls, minus
the HTTP layer: `trainledger.events.decoding.decode_events` on a msgpack body, then
`trainledger.ingest.service.Ingestor.ingest` with `Stores` on an embedded Valkey, in
batches. Pricing, deduplication state, totals, the log: all of it is written
by the service's own code and Lua script, exactly as a `POST /v1/events` would. Batches are
of 5,000 events, the HTTP benchmark's size, so the log entries are those HTTP makes. A batch
whose script outlives the Redis client's 5-second socket timeout (it happens while Valkey
rewrites its append-only file on a busy machine) is posted again, as a client would: what
was applied comes back as duplicates and `timeouts` counts it.

The cells follow `bench.common.Workload`: 100 experiments x 20 SKUs x 6 stages (8
pre-encoded 5,000-event bodies with different random cells, cycled), spread over 90 days in
time order: the loader only splices each batch's number into the ids (20 characters,
`00000123.step-004567`) and its time stamp into the body, so nearly all of its CPU goes to
the service's own decode and ingest. The dedup window is set to the span plus two
days so that 90-day-old events are accepted (the default window, 35 days, would reject them).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from trainledger.auth.model import Principal, mint
from trainledger.events.decoding import MSGPACK, decode_events
from trainledger.ingest.service import Ingestor
from trainledger.ledger.folding import Folder, settle
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.stores import Stores

from bench.common import BENCH_CARD, EventFactory, Workload

LOAD_BATCH = 5_000  # the HTTP batch: same log entries, same script sizes
MAX_TRIES = 5
_ADMIN = Principal("bench-loader", "admin", None, "bench")


@dataclass
class Dataset:
    workload: Workload
    events: int
    data_dir: Path
    url: str
    valkey: EmbeddedValkey
    load_seconds: float = 0.0
    rejected: int = 0
    duplicates: int = 0
    accepted: int = 0
    timeouts: int = 0  # ingest calls that timed out on Redis and were posted again
    used_memory_before: int = 0
    admin_token: str = ""
    # Bytes of the event ids handed to Redis, for the memory benchmark's floor.
    id_bytes: int = 0
    # Memory of the structures at a few points of the load (see `structure_bytes`).
    checkpoints: list[dict[str, int]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def load_rate(self) -> float:
        return self.events / self.load_seconds if self.load_seconds else 0.0

    def close(self) -> None:
        self.valkey.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


_cache: dict[tuple[int, Workload], Dataset] = {}


def get_dataset(
    events: int,
    workload: Workload,
    progress: Callable[[int, int], None] | None = None,
) -> Dataset:
    """The loaded dataset for (events, workload), loading it on first use (cached per run)."""
    key = (events, workload)
    ds = _cache.get(key)
    if ds is None:
        ds = load(events, workload, progress)
        _cache[key] = ds
    return ds


def close_all() -> None:
    while _cache:
        _, ds = _cache.popitem()
        ds.close()


def structure_bytes(url: str, project: str) -> dict[str, int]:
    """Bytes Valkey holds per kind of key of `project` (MEMORY USAGE ... SAMPLES 0: every
    element counted), plus the server's `used_memory`."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        out: dict[str, int] = {}
        prefix = f"tl:{{p:{project}}}:"
        for key in client.scan_iter(match=prefix + "*", count=1000):  # braces: not glob
            kind = key.decode()[len(prefix) :].split(":", 1)[0]
            out[kind] = out.get(kind, 0) + int(client.memory_usage(key, samples=0) or 0)
        out["used_memory"] = int(client.info("memory")["used_memory"])
        out["keys"] = int(client.dbsize())
        return out
    finally:
        client.close()


CHECKPOINTS = (0.25, 0.5, 0.75)

MARKER = b"@@@@@@@@"  # 8 bytes, replaced by the batch number
TIME_MARKER = b"TTTTTTTTTTTTTTTTTTTT"  # 20 bytes, replaced by "YYYY-MM-DDTHH:MM:SSZ"
ID_LENGTH = len("00000000.step-000000")  # 20 characters, like a scheduler's step id


def _templates(w: Workload, size: int, count: int = 8) -> list[bytes]:
    """`count` msgpack batch bodies with different cells (seeds), ids and time to splice in.

    All events of one batch share its time stamp (a batch spans 90 days / batches, about an
    hour at 10M events); cycling through 8 different cell draws fills nearly all of a day's
    12,000 cells, as random events would, at no per-event cost to the loader.
    """
    out = []
    for k in range(count):
        events = EventFactory(Workload(**{**msgspec.structs.asdict(w), "seed": w.seed + k})).batch(
            0, size
        )
        for i, e in enumerate(events):
            e["id"] = f"{MARKER.decode()}.step-{i:06d}"
            e["time"] = TIME_MARKER.decode()
        out.append(msgspec.msgpack.encode(events))
    return out


def load(
    events: int,
    workload: Workload,
    progress: Callable[[int, int], None] | None = None,
) -> Dataset:
    data_dir = Path(tempfile.mkdtemp(prefix="tl-bench-ds-"))
    # appendfsync "no": the loader is not measuring durability; the AOF is still written.
    valkey = EmbeddedValkey(data_dir, appendfsync="no")
    url = valkey.start()
    ds = Dataset(workload, events, data_dir, url, valkey)
    try:
        try:
            import uvloop

            uvloop.run(_load(ds, progress))  # as the server runs (no global policy change)
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            asyncio.run(_load(ds, progress))
    except BaseException:
        ds.close()
        raise
    return ds


async def _load(ds: Dataset, progress: Callable[[int, int], None] | None) -> None:
    store = Stores.from_url(ds.url)
    try:
        info = await store.connection.client.info("memory")
        ds.used_memory_before = int(info["used_memory"])
        rate_cards = RateCards(store)
        card = msgspec.convert(BENCH_CARD, RateCardIn, strict=False)
        await rate_cards.put("default", card)
        token, digest, record = mint("admin", None, "bench")
        await store.tokens.put_token(digest, record["id"], record)
        ds.admin_token = token
        w = ds.workload
        # The server's background fold runs beside the load, as in `trainledger serve`.
        folder = Folder(store)
        ingestor = Ingestor(store, rate_cards, dedup_window_days=w.days + 2, folder=folder)
        n_batches = -(-ds.events // LOAD_BATCH)
        span = timedelta(days=w.days)
        start = datetime.now(UTC) - timedelta(hours=1) - span
        templates = _templates(w, min(LOAD_BATCH, ds.events))
        # Two batches in flight: while Valkey runs one batch's script, Python prepares the
        # next (batches touching tier counters still apply one at a time, per project).
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=2)
        done = 0

        async def producer() -> None:
            for b in range(n_batches):
                size = min(LOAD_BATCH, ds.events - b * LOAD_BATCH)
                template = templates[b % len(templates)]
                if size != LOAD_BATCH and size != ds.events:
                    template = _templates(w, size, count=1)[0]
                when = start + span * ((b + 0.5) / n_batches)
                body = template.replace(MARKER, f"{b:08d}".encode()).replace(
                    TIME_MARKER, when.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
                )
                ds.id_bytes += size * ID_LENGTH
                await queue.put(body)
                await asyncio.sleep(0)
            for _ in range(2):
                await queue.put(None)

        async def consumer() -> None:
            nonlocal done
            while True:
                body = await queue.get()
                if body is None:
                    return
                items, _ = decode_events(body, MSGPACK)
                for attempt in range(MAX_TRIES):
                    try:
                        report = await ingestor.ingest(items, _ADMIN)
                        break
                    except (RedisTimeoutError, RedisConnectionError):
                        # The script may have run to the end after the client gave up (its
                        # socket timeout is 5 s): posting the batch again is what a client
                        # does, and what was applied comes back as duplicates.
                        ds.timeouts += 1
                        if attempt == MAX_TRIES - 1:
                            raise
                        await asyncio.sleep(1.0)
                ds.rejected += len(report.rejected)
                ds.duplicates += report.duplicates
                if report.rejected:
                    raise RuntimeError(f"loader: events rejected: {report.rejected[:3]}")
                before = done
                done += len(items)
                ds.accepted += report.accepted
                for frac in CHECKPOINTS:
                    mark = int(frac * ds.events)
                    if before < mark <= done:
                        # Blocks the loop for a moment; the load's clock is paused meanwhile.
                        t_pause = time.perf_counter()
                        point = structure_bytes(ds.url, w.project)
                        point["events"] = done
                        ds.checkpoints.append(point)
                        paused[0] += time.perf_counter() - t_pause
                if progress is not None:
                    progress(done, ds.events)

        paused = [0.0]
        t0 = time.perf_counter()
        folding = asyncio.create_task(folder.run())
        try:
            await asyncio.gather(producer(), consumer(), consumer())
            await settle(store, w.project)  # what is still queued: part of the load
        finally:
            folding.cancel()
            await asyncio.wait([folding], timeout=10)
        ds.load_seconds = time.perf_counter() - t0 - paused[0]
        point = structure_bytes(ds.url, w.project)
        point["events"] = done
        ds.checkpoints.append(point)
    finally:
        await store.close()
