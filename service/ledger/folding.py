"""Folding: the totals summed from the accepted-event log, many batches at a time.

The ingest script applies at once what must be exact at once: the deduplication ids, the log
entry, the graduated-tier and budget counters (alerts fire from those) and `accepted`. The
batch's totals (one sum per cell: day x stage x experiment x category x SKU x owner x
fixed/elastic x attributed tags, plus the hourly cells, the daily index and the roll-ups) are
not written there, field by field: a fold reads the log entries after the project's cursor
(meta ``fold_cursor``), sums their events by cell in one compiled pass (`costcore.CodedSums`;
batches touching the same cells merge, so a cell is written once per fold rather than once per
batch), derives the daily index, hours and roll-ups from the sums, and applies it all in one
script that also moves the cursor past the entries it summed, after checking that no other
fold moved it first. The log entry carries what a fold needs (each event's cost, category,
fixed/elastic flag and attributed tags, as priced), so a fold reads no rate card or setting.

Answers stay exact and current: every read of the totals folds first (`settle`), and in the
background `trainledger serve`'s folding process folds every project every 2 seconds (an app
run otherwise folds, in each worker, the projects it ingested into: `Folder`). Nothing
is lost if a worker stops between the two steps: the entries stay after the cursor until some
fold applies them, and a fold that lost the race writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Generator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from costcore import CodedEntry, CodedGroups, coded_sums_for

from ..cancellation import raise_if_cancelled
from ..storage.connection import StoreError
from .effectsums import effect_increments
from .eventlog import CodedLog, decode_log_entry
from .fields import joined_dims
from .hashes import DAILY, HOURLY, LOG_INDEX, TIER_INDEX, TOTALS, SumsHash
from .logindex import day_name, entry_hours, entry_tier_quantities
from .rollups import ROLLUP_VERSION, rollup_increments
from .store import Merges
from .wastecells import WasteSums

if TYPE_CHECKING:
    from ..stores import Stores

log = logging.getLogger("trainledger")

# A fold's writes grow with the distinct cells its entries touch, not with their events, so
# folding less often writes less (at 1,000 one-event posts a second: single-event p99 3.7-3.8 ms
# folding every 2 s, 3.9-4.8 ms every second, 5.9-6.2 ms every 0.25 s); reads fold first, so
# this delays no answer.
FOLD_INTERVAL_SECONDS = 2.0
# What one fold reads and writes. Valkey runs the fold's script alone, so a fold writes at most
# 32,768 cells (~0.1 s of Valkey at most; a day of the benchmark's project has 12,000); it
# reads log entries up to 8 MB (a 5,000-event entry is ~62 kB: ~650,000 events, ~0.5 s of
# decoding and summing, in slices) or 4,096 of them (a second of one-event posts at 1,000/s
# is one fold, not several).
FOLD_MAX_ENTRIES = 4096
FOLD_MAX_BYTES = 8 << 20
FOLD_MAX_CELLS = 32768
# A fold's sums are exact ints of any size: the store keeps every sum in two limbs and splits
# an increment past int64 between them (service/storage/limbs.py, docs/exact-money.md).

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MEMO_LIMIT = 200_000
# A fold's cells recur fold after fold: each key is spelled out once per worker.
_cell_memo: dict[tuple[int, str, str, str, str, str, str, str], tuple[str, str]] = {}
_hour_memo: dict[tuple[int, str, str, str], tuple[str, str]] = {}


def _cell_of(key: tuple[int, str, str, str, str, str, str, str]) -> tuple[str, str]:
    """(yyyymmdd, dims) of a cell key (day, then the dims): dims as the totals fields spell them."""
    if len(_cell_memo) >= _MEMO_LIMIT:
        _cell_memo.clear()
    day, *dims = key
    cell = _cell_memo[key] = (day_name(day), joined_dims(dims))
    return cell


def _hour_cell_of(key: tuple[int, str, str, str]) -> tuple[str, str]:
    """(yyyymmdd, hourly field) of an hour key (hours since 1970-01-01, stage, category, fixed)."""
    if len(_hour_memo) >= _MEMO_LIMIT:
        _hour_memo.clear()
    hours, stage, category, fixed = key
    field = f"c|{hours % 24:02d}|" + joined_dims((stage, category, fixed))
    cell = _hour_memo[key] = (day_name(hours // 24), field)
    return cell


class CellSums:
    """Cost (nano), quantity (micro) and events per totals cell, and cost and events per
    hourly cell, and the log index's fields of the entries summed.

    `cells` maps (yyyymmdd, dims) to [cost, quantity, events]: dims as the totals fields spell
    them (service/storage/keys.py); `hourly` maps (yyyymmdd, ``c|HH|...`` field) to [cost, events]
    (the events go to the ``n|HH|...`` field); `entries` maps (yyyymmdd, ``HH|<entry id>``) to
    the events of that entry in that hour (`entry_hours`); `tiers` maps (yyyymm,
    ``<entry id>|<version>|<sku>``) to a quantity (`entry_tier_quantities`).
    """

    __slots__ = ("cells", "entries", "events", "hourly", "tiers", "waste")

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], list[int]] = {}
        self.hourly: dict[tuple[str, str], list[int]] = {}
        self.entries: dict[tuple[str, str], int] = {}
        self.tiers: dict[tuple[str, str], int] = {}
        self.waste = WasteSums()  # the waste report's cells and facts (wastecells.py)
        self.events = 0

    def __bool__(self) -> bool:
        return self.events > 0

    def add(self, other: CellSums) -> None:
        """Add another batch's sums."""
        self.events += other.events
        self.waste.add(other.waste)
        index = self.entries
        for key, count in other.entries.items():
            index[key] = index.get(key, 0) + count
        tiers = self.tiers
        for key, quantity in other.tiers.items():
            tiers[key] = tiers.get(key, 0) + quantity
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
        for key, (cost, count) in other.hourly.items():
            have_hour = hours.get(key)
            if have_hour is None:
                hours[key] = [cost, count]
            else:
                have_hour[0] += cost
                have_hour[1] += count

    def add_index(self, entry_id: str, entry: CodedLog) -> None:
        """Add the log index's and the tier index's fields of log entry `entry_id`, and its
        waste cells and facts (from the entry as stored, as the indexes)."""
        self.waste.add_entry(entry)
        index = self.entries
        for key, count in entry_hours(entry_id, entry.epoch_us).items():
            index[key] = index.get(key, 0) + count
        tiers = self.tiers
        for key, quantity in entry_tier_quantities(entry_id, entry).items():
            tiers[key] = tiers.get(key, 0) + quantity

    def add_groups(self, groups: CodedGroups, labels: _Labels) -> None:
        """Add events summed by `costcore.group_coded`, whose codes `labels` spell out."""
        into = self.cells
        stages, experiments, owners, rates, attributed, hour_classes = labels
        for (day, stage, experiment, owner, rate, attr), cost, quantity, count in zip(
            groups.keys, groups.cost_nano, groups.quantity_micro, groups.events, strict=True
        ):
            sku, category, fixed = rates[rate]
            key = (
                day,
                stages[stage],
                experiments[experiment],
                category,
                sku,
                owners[owner],
                fixed,
                attributed[attr],
            )
            cell = _cell_memo.get(key)
            if cell is None:
                cell = _cell_of(key)
            have = into.get(cell)
            if have is None:
                into[cell] = [cost, quantity, count]
            else:
                have[0] += cost
                have[1] += quantity
                have[2] += count
            self.events += count
        hours = self.hourly
        for (hour, stage, hour_class), cost, count in zip(
            groups.hour_keys, groups.hour_cost_nano, groups.hour_events, strict=True
        ):
            category, fixed = hour_classes[hour_class]
            hour_key = (hour, stages[stage], category, fixed)
            cell = _hour_memo.get(hour_key)
            if cell is None:
                cell = _hour_cell_of(hour_key)
            have_hour = hours.get(cell)
            if have_hour is None:
                hours[cell] = [cost, count]
            else:
                have_hour[0] += cost
                have_hour[1] += count

    def increments(self) -> list[tuple[SumsHash, str, int]]:
        """Every totals increment these sums make, as (hash, field, delta): finest cells (``c|``,
        ``q|``, ``n|``), the daily index, the hourly cells, the roll-ups and the cost-effect sums
        (effectsums.py; both with their event count)."""
        out: list[tuple[SumsHash, str, int]] = []
        daily: dict[str, int] = {}
        totals_key: dict[str, SumsHash] = {}
        cell_keys: list[tuple[str, str]] = []
        costs: list[int] = []
        quantities: list[int] = []
        counts: list[int] = []
        for cell, (cost, quantity, count) in self.cells.items():
            day, dims = cell
            key = totals_key.get(day)
            if key is None:
                key = totals_key[day] = SumsHash(TOTALS, day)
            out.append((key, "c|" + dims, cost))
            out.append((key, "q|" + dims, quantity))
            out.append((key, "n|" + dims, count))
            daily[day] = daily.get(day, 0) + cost
            cell_keys.append(cell)
            costs.append(cost)
            quantities.append(quantity)
            counts.append(count)
        daily_key = SumsHash(DAILY)
        out += [(daily_key, day, cost) for day, cost in daily.items()]
        hourly_key: dict[str, SumsHash] = {}
        for (day, field), (cost, count) in self.hourly.items():
            key = hourly_key.get(day)
            if key is None:
                key = hourly_key[day] = SumsHash(HOURLY, day)
            # An hour whose events cost nothing still has them: its events field says so.
            if cost:
                out.append((key, field, cost))
            if count:
                out.append((key, "n" + field[1:], count))
        index_key: dict[str, SumsHash] = {}
        for (day, field), count in self.entries.items():
            key = index_key.get(day)
            if key is None:
                key = index_key[day] = SumsHash(LOG_INDEX, day)
            out.append((key, field, count))
        tier_key: dict[str, SumsHash] = {}
        for (month, field), quantity in self.tiers.items():
            key = tier_key.get(month)
            if key is None:
                key = tier_key[month] = SumsHash(TIER_INDEX, month)
            out.append((key, field, quantity))
        out += rollup_increments(cell_keys, costs, quantities, counts)
        out += effect_increments(cell_keys, costs, quantities, counts)
        out += self.waste.increments()
        return out


# A fold's decoding and summing run in the event loop itself, in slices of about this long
# between which requests are served: in a thread they would take turns with the requests for
# the interpreter in 1 ms slices (`trainledger serve`'s switch interval), stretching requests
# by several milliseconds. The increments of many cells (one step) go to a thread.
_SLICE_SECONDS = 0.0005
_THREAD_ABOVE_CELLS = 2000

_LogPlan = tuple[int, str, int, list[tuple[SumsHash, str, int]], Merges]
_T = TypeVar("_T")


def _plan_steps(
    entries: Sequence[tuple[str, bytes]],
) -> Generator[None, None, tuple[int, CellSums]]:
    """Steps (one entry each) of summing the first entries: all of them, or fewer when their
    cells pass `FOLD_MAX_CELLS` (sums are exact ints of any size). Returns how many entries
    were summed, and their sums."""
    # An entry of an unknown format (none is written) is left out.
    coded: list[CodedLog | None] = []
    for _, blob in entries:
        coded.append(decode_log_entry(blob))
        yield
    take = len(entries)
    while True:
        kept = [(entries[i][0], e) for i, e in enumerate(coded[:take]) if e is not None]
        sums = yield from _sum_steps([e for _, e in kept], [entry_id for entry_id, _ in kept])
        if len(sums.cells) > FOLD_MAX_CELLS and take > 1:
            take //= 2
            continue
        return take, sums


def _run(steps: Generator[None, None, _T]) -> _T:
    """Run steps to their end, at once."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return cast(_T, done.value)


async def _run_sliced(steps: Generator[None, None, _T]) -> _T:
    """Run steps to their end in the event loop, giving way to other tasks between slices."""
    give_way = time.perf_counter() + _SLICE_SECONDS
    try:
        while True:
            next(steps)
            if time.perf_counter() >= give_way:
                await asyncio.sleep(0)
                give_way = time.perf_counter() + _SLICE_SECONDS
    except StopIteration as done:
        return cast(_T, done.value)


async def _log_plan_sliced(entries: Sequence[tuple[str, bytes]]) -> _LogPlan:
    """(entries summed, the last one's id, events, increments) for a fold of the first
    entries (see `_plan_steps`), sliced between the event loop's other tasks."""
    take, sums = await _run_sliced(_plan_steps(entries))
    if len(sums.cells) > _THREAD_ABOVE_CELLS:
        increments = await asyncio.to_thread(sums.increments)
    else:
        increments = sums.increments()
    return take, entries[take - 1][0], sums.events, increments, sums.waste.merges()


# The labels a fold's codes stand for: stages, experiments, owners, rates as (sku, category,
# fixed), attributed tags, and hour classes as (category, fixed).
_Labels = tuple[
    list[str], list[str], list[str], list[tuple[str, str, str]], list[str], list[tuple[str, str]]
]


def sums_of_log(entries: Sequence[CodedLog], entry_ids: Sequence[str] = ()) -> CellSums:
    """The totals of these log entries, summed by cell and hour in one compiled pass, and
    their log index fields when their `entry_ids` (the log's) are given."""
    return _run(_sum_steps(entries, entry_ids))


def _sum_steps(
    entries: Sequence[CodedLog], entry_ids: Sequence[str] = ()
) -> Generator[None, None, CellSums]:
    """`sums_of_log` in steps of one entry."""
    spaces: list[dict[Any, int]] = [{}, {}, {}, {}, {}]
    hour_class: dict[tuple[str, str], int] = {}
    coded: list[CodedEntry] = []
    for e in entries:
        rates = [(sku, category, fixed) for _, sku, category, fixed in e.rates]
        columns: tuple[list[Any], ...] = (e.stages, e.experiments, e.owners, rates, e.attributed)
        to_global = [
            [space.setdefault(value, len(space)) for value in values]
            for space, values in zip(spaces, columns, strict=True)
        ]
        codes = (e.stage_codes, e.experiment_codes, e.owner_codes, e.rate_codes)
        coded.append(
            CodedEntry(
                e.epoch_us, e.cost_nano, e.quantity_micro, (*codes, e.attributed_codes), to_global
            )
        )
        yield
    rate_space = list(spaces[3])
    classes = [hour_class.setdefault((c, f), len(hour_class)) for _, c, f in rate_space]
    acc = coded_sums_for(coded, classes)
    # One entry per step: a sliced fold holds the event loop for one entry at most.
    for entry in coded:
        acc.add(entry)
        yield
    groups = acc.result()
    labels: _Labels = (
        list(spaces[0]),
        list(spaces[1]),
        list(spaces[2]),
        rate_space,
        list(spaces[4]),
        list(hour_class),
    )
    sums = CellSums()
    sums.add_groups(groups, labels)
    for entry_id, e in zip(entry_ids, entries if entry_ids else (), strict=True):
        sums.add_index(entry_id, e)
    return sums


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id ("ms-seq") as a sortable pair; "" sorts first."""
    if not entry_id:
        return (-1, -1)
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0))


async def settle(store: Stores, project: str) -> int:
    """Fold what is pending for the project, so that a read of its totals that follows sees
    every batch accepted before this call. Returns the batches this call folded (others may
    have been folded meanwhile by another worker)."""
    cursor, last, entries = await store.ledger.unfolded_entries(
        project, FOLD_MAX_ENTRIES, FOLD_MAX_BYTES
    )
    folded = 0
    target = entry_order(last)
    # Each round's cursor is further on (this fold or another one moved it), so this ends.
    while entries and entry_order(cursor) < target:
        raise_if_cancelled()  # a cancel redis-py dropped (service/cancellation.py)
        count, new_cursor, events, increments, merges = await _log_plan_sliced(entries)
        if await store.ledger.fold_log(project, cursor, new_cursor, events, increments, merges):
            folded += count
        cursor, _, entries = await store.ledger.unfolded_entries(
            project, FOLD_MAX_ENTRIES, FOLD_MAX_BYTES
        )
    raise_if_cancelled()
    return folded


async def settled_state(store: Stores, project: str) -> tuple[dict[str, int], bool]:
    """What every read of the totals starts from: the days with totals (yyyymmdd -> cost) and
    whether the roll-ups hold every event, after folding the batches still queued (so the
    answer holds every batch accepted before the request)."""
    await settle(store, project)
    daily, accepted, covered = await store.ledger.totals_state(project, ROLLUP_VERSION)
    if covered != accepted:  # maybe a batch landed between the two reads: look once more
        daily, accepted, covered = await store.ledger.totals_state(project, ROLLUP_VERSION)
    return daily, covered == accepted


class Folder:
    """Folds, in the background, the projects this worker ingested into, or (`every_project`:
    the folding process `trainledger serve` runs beside its workers) every project."""

    def __init__(
        self, store: Stores, interval: float = FOLD_INTERVAL_SECONDS, every_project: bool = False
    ) -> None:
        self.store = store
        self.interval = interval
        self.every_project = every_project
        self._touched: set[str] = set()

    def touched(self, project: str) -> None:
        """A batch of `project` was accepted: fold it within the next interval."""
        self._touched.add(project)

    async def run(self, keep_going: Callable[[], bool] = lambda: True) -> None:
        """Fold every `interval` seconds while `keep_going()`."""
        # Entries a stopped worker left unfolded: fold every project once at start-up.
        await self._add_every_project()
        # Every round starts by checking for a cancel that redis-py dropped: a folder that
        # carried on after one folded into what came next (service/cancellation.py).
        while keep_going():
            raise_if_cancelled()
            # A fixed pause, not one that grows with the fold's duration: a fold's work is
            # mostly per event (decoding, summing), so folding less often under load saves
            # little and lets the log run ahead of the totals.
            await asyncio.sleep(self.interval)
            if self.every_project:
                await self._add_every_project()
            projects, self._touched = self._touched, set()
            for project in projects:
                raise_if_cancelled()
                try:
                    await settle(self.store, project)
                except StoreError as exc:  # Redis away for a while: try again next round
                    raise_if_cancelled(exc)  # an error the cancel was turned into
                    self._touched.add(project)
                    log.warning("fold of project %s failed: %s", project, exc)

    async def _add_every_project(self) -> None:
        try:
            self._touched.update(await self.store.projects.projects())
        except StoreError as exc:
            raise_if_cancelled(exc)
            log.warning("fold: could not list projects: %s", exc)
