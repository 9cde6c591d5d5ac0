"""Folding: accepted batches' cell sums, queued by the ingest script, summed into the totals.

The ingest script applies at once what must be exact at once: the deduplication ids, the log,
the graduated-tier and budget counters (alerts fire from those) and `accepted`. The batch's
totals (one sum per cell: day x stage x experiment x category x SKU x owner x tags, plus the
hourly cells) are not incremented there, field by field, but queued as one blob on the
project's pending list. A fold takes the blobs from the head of that list, sums them (batches
touching the same cells merge, so a cell is written once per fold rather than once per batch),
derives the daily index and the roll-ups from the sums, and applies it all in one script that
also drops the blobs it applied, after checking that no other fold took them first.

Answers stay exact and current: every read of the totals folds first (`settle`), and each
worker folds the projects it ingested into every second in the background (`Folder`), so the
list stays short. Nothing is lost if a worker stops between the two steps:
the blobs stay queued until some fold applies them, and the head's sequence number makes a
fold that lost the race write nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import msgspec
from redis.exceptions import RedisError

from service.domain.rollups import rollup_increments
from service.storage.redis_store import Keys, Store

log = logging.getLogger("trainledger")

# A fold's cost grows with the cells its batches touch, not with their events, so folding
# less often costs less per event; reads fold first, so this does not delay any answer.
FOLD_INTERVAL_SECONDS = 1.0
# What one fold reads and writes. A fold must merge many batches to be cheaper than applying
# them one by one (its cost is per distinct cell), yet Valkey runs its script alone: a fold
# writes at most 32,768 cells (~0.1 s of Valkey at most; a day of the benchmark's project has
# 12,000), and reads blobs up to 32 MB (a 5,000-event batch's blob is ~0.4 MB) or 4,096 of
# them (a second of one-event posts at 1,000/s is one fold, not several).
FOLD_MAX_BATCHES = 4096
FOLD_MAX_BYTES = 32 << 20
FOLD_MAX_CELLS = 32768
# A fold's summed increments must fit Valkey's signed 64-bit HINCRBY; beyond this a fold takes
# fewer blobs (a single batch's sums are already bounded by the kernel's overflow checks).
_INT64_MAX = 2**63 - 1
_PAUSE_PER_FOLD_SECOND = 4.0

_blob_decoder = msgspec.msgpack.Decoder()


class CellSums:
    """Cost (nano), quantity (micro) and events per totals cell, and cost per hourly cell.

    `cells` maps (yyyymmdd, dims) to [cost, quantity, events]: dims as the totals fields spell
    them (see `Keys.totals`); `hourly` maps (yyyymmdd, ``c|HH|...`` field) to cost.
    """

    __slots__ = ("cells", "events", "hourly")

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], list[int]] = {}
        self.hourly: dict[tuple[str, str], int] = {}
        self.events = 0

    def __bool__(self) -> bool:
        return self.events > 0

    def encode(self) -> bytes:
        """One msgpack blob: [events, flat (day, dims, cost, quantity, events)..., flat
        (day, field, cost)...]."""
        cells: list[str | int] = []
        for (day, dims), (cost, quantity, count) in self.cells.items():
            cells += (day, dims, cost, quantity, count)
        hourly: list[str | int] = []
        for (day, field), cost in self.hourly.items():
            hourly += (day, field, cost)
        return msgspec.msgpack.encode([self.events, cells, hourly])

    def add(self, other: CellSums) -> None:
        """Add another batch's sums."""
        self.events += other.events
        into = self.cells
        for key, (cost, quantity, count) in other.cells.items():
            have = into.get(key)
            if have is None:
                into[key] = [cost, quantity, count]
            else:
                have[0] += cost
                have[1] += quantity
                have[2] += count
        hours = self.hourly
        for key, cost in other.hourly.items():
            hours[key] = hours.get(key, 0) + cost

    def add_blob(self, blob: bytes) -> None:
        """Add the sums of an encoded `CellSums`."""
        events, cells, hourly = _blob_decoder.decode(blob)
        self.events += events
        into = self.cells
        for i in range(0, len(cells), 5):
            key = (cells[i], cells[i + 1])
            have = into.get(key)
            if have is None:
                into[key] = [cells[i + 2], cells[i + 3], cells[i + 4]]
            else:
                have[0] += cells[i + 2]
                have[1] += cells[i + 3]
                have[2] += cells[i + 4]
        hours = self.hourly
        for i in range(0, len(hourly), 3):
            key = (hourly[i], hourly[i + 1])
            hours[key] = hours.get(key, 0) + hourly[i + 2]

    def largest(self) -> int:
        """The largest sum (for the int64 bound of one fold; sums are never negative)."""
        top = max((max(sums) for sums in self.cells.values()), default=0)
        return max(top, max(self.hourly.values(), default=0))

    def increments(self, project: str) -> list[tuple[str, str, int]]:
        """Every totals increment these sums make: finest cells (``c|``, ``q|``, ``n|``), the
        daily index, the hourly cells and the roll-ups (with their event count)."""
        out: list[tuple[str, str, int]] = []
        daily: dict[str, int] = {}
        totals_key: dict[str, str] = {}
        cell_keys: list[tuple[str, str]] = []
        costs: list[int] = []
        quantities: list[int] = []
        counts: list[int] = []
        for cell, (cost, quantity, count) in self.cells.items():
            day, dims = cell
            key = totals_key.get(day)
            if key is None:
                key = totals_key[day] = Keys.totals(project, day)
            out.append((key, "c|" + dims, cost))
            out.append((key, "q|" + dims, quantity))
            out.append((key, "n|" + dims, count))
            daily[day] = daily.get(day, 0) + cost
            cell_keys.append(cell)
            costs.append(cost)
            quantities.append(quantity)
            counts.append(count)
        daily_key = Keys.daily(project)
        out += [(daily_key, day, cost) for day, cost in daily.items()]
        hourly_key: dict[str, str] = {}
        for (day, field), cost in self.hourly.items():
            if cost == 0:
                continue
            key = hourly_key.get(day)
            if key is None:
                key = hourly_key[day] = Keys.hourly(project, day)
            out.append((key, field, cost))
        out += rollup_increments(project, cell_keys, costs, quantities, counts)
        return out


def _sums_of(blobs: Sequence[bytes]) -> tuple[CellSums, int]:
    """The sums of the first blobs, as many as keep the cells within `FOLD_MAX_CELLS` (at
    least one), or of the first blob alone should their sums leave int64 (one batch's sums
    never do: the kernel refuses events that would); and how many blobs were summed."""
    sums = CellSums()
    count = 0
    for blob in blobs:
        sums.add_blob(blob)
        count += 1
        if len(sums.cells) >= FOLD_MAX_CELLS:
            break
    if count > 1 and sums.largest() > _INT64_MAX:
        sums = CellSums()
        sums.add_blob(blobs[0])
        return sums, 1
    return sums, count


# Summing blobs is CPU work in Python: beyond this many bytes of blobs (a few dozen one-event
# batches) it runs in a thread, so the event loop keeps answering requests meanwhile (it
# still shares the interpreter, in slices: `trainledger serve` makes them 1 ms).
_THREAD_ABOVE_BYTES = 16 * 1024


def _fold_plan(project: str, blobs: Sequence[bytes]) -> tuple[int, int, list[tuple[str, str, int]]]:
    sums, count = _sums_of(blobs)
    return count, sums.events, sums.increments(project)


async def settle(store: Store, project: str) -> int:
    """Fold what is pending for the project, so that a read of its totals that follows sees
    every batch accepted before this call. Returns the batches this call folded (others may
    have been folded meanwhile by another worker)."""
    head, length, blobs = await store.pending_batches(project, FOLD_MAX_BATCHES, FOLD_MAX_BYTES)
    target = head + length
    folded = 0
    # Each round's head is further on (this fold or another one moved it), so this ends.
    while blobs and head < target:
        if sum(map(len, blobs)) > _THREAD_ABOVE_BYTES:
            count, events, increments = await asyncio.to_thread(_fold_plan, project, blobs)
        else:
            count, events, increments = _fold_plan(project, blobs)
        if await store.fold_batches(project, head, count, events, increments):
            folded += count
        head, length, blobs = await store.pending_batches(project, FOLD_MAX_BATCHES, FOLD_MAX_BYTES)
    return folded


class Folder:
    """Folds, in the background, the projects this worker ingested into."""

    def __init__(self, store: Store, interval: float = FOLD_INTERVAL_SECONDS) -> None:
        self.store = store
        self.interval = interval
        self._touched: set[str] = set()

    def touched(self, project: str) -> None:
        """A batch of `project` was queued: fold it within the next interval."""
        self._touched.add(project)

    async def run(self) -> None:
        # Blobs a stopped worker left queued: fold every project once at start-up.
        try:
            self._touched.update(await self.store.projects())
        except RedisError as exc:
            log.warning("fold: could not list projects: %s", exc)
        pause = self.interval
        while True:
            await asyncio.sleep(pause)
            projects, self._touched = self._touched, set()
            started = time.perf_counter()
            for project in projects:
                try:
                    await settle(self.store, project)
                except RedisError as exc:  # Redis away for a while: try again next round
                    self._touched.add(project)
                    log.warning("fold of project %s failed: %s", project, exc)
            # A fold costs about the same whatever its number of batches (it is bounded by the
            # cells they touch), so under heavy load fold less often: at most ~20 % of the time.
            pause = max(self.interval, _PAUSE_PER_FOLD_SECOND * (time.perf_counter() - started))
