"""Reading the accepted-event log by event time: the log index (meta ``logix``, keys
``logix:<yyyymmdd>``, service/storage/keys.py) names the entries holding events of each hour,
so a read of a time range fetches those entries only, not the whole log.

The fold writes the index with the totals (service/ledger/folding.py, `entry_hours`), in the
same script that moves its cursor, so the index covers exactly the entries up to the cursor;
the entries after it (not folded yet: a fold runs every 2 seconds) are read as they are. A
rebuild writes the index again with the totals. A project whose log began before the index
existed (meta ``logix`` unset until a rebuild) is read whole, as before.

A ranged read may yield entries that hold events outside the range as well (an entry spans
the hours of its batch): callers keep the rows they want by their time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..storage.replies import as_text
from .eventlog import (
    CodedLog,
    LoggedEvent,
    decode_log,
    decode_log_entry,
    read_log,
    read_log_entries,
)
from .folding import entry_order
from .logindex import day_name

if TYPE_CHECKING:
    from ..stores import Stores

_HOUR_US = 3_600_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FETCH_PAGE = 64  # entries fetched per round trip (a 5,000-event entry is ~62 kB)


@dataclass
class RangeStats:
    """What a ranged read did: whether it used the index, and the entries it fetched."""

    indexed: bool = False
    entries: int = 0


def _month_hours(hour: int) -> tuple[int, int]:
    """The first and last hour (since 1970) of the UTC month holding `hour`."""
    when = _EPOCH + timedelta(hours=hour)
    start = when.replace(day=1, hour=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return (start - _EPOCH) // timedelta(hours=1), (end - _EPOCH) // timedelta(hours=1) - 1


def _day_number(name: str) -> int:
    when = datetime.strptime(name, "%Y%m%d").replace(tzinfo=UTC)
    return (when - _EPOCH).days


async def _hour_span(
    store: Stores, project: str, start_us: int | None, end_us: int | None, whole_months: bool
) -> tuple[int, int] | None:
    """The hours [first, last] a read of [start_us, end_us) needs; an open end stops at the
    first or last day the totals hold. None: no folded event can be in the range."""
    first = None if start_us is None else start_us // _HOUR_US
    last = None if end_us is None else (end_us - 1) // _HOUR_US
    if first is None or last is None:
        days = sorted(await store.ledger.daily_costs(project))
        if not days:
            return None
        if first is None:
            first = _day_number(days[0]) * 24
        if last is None:
            last = _day_number(days[-1]) * 24 + 23
    if whole_months:
        first, last = _month_hours(first)[0], _month_hours(last)[1]
    return (first, last) if first <= last else None


async def _indexed_ids(store: Stores, project: str, span: tuple[int, int], last: str) -> list[str]:
    """The ids (up to `last`, in log order) of the entries the index names in the hours."""
    first, final = span
    day_numbers = list(range(first // 24, final // 24 + 1))
    indexes = await store.ledger.log_index(project, [day_name(d) for d in day_numbers])
    stop = entry_order(last)
    ids: set[str] = set()
    for day, fields in zip(day_numbers, indexes, strict=True):
        for raw in fields:
            hh, _, entry_id = as_text(raw).partition("|")
            if first <= day * 24 + int(hh) <= final and entry_order(entry_id) <= stop:
                ids.add(entry_id)
    return sorted(ids, key=entry_order)


async def read_log_range(
    store: Stores,
    project: str,
    last: str,
    start_us: int | None,
    end_us: int | None,
    whole_months: bool = False,
    stats: RangeStats | None = None,
) -> AsyncIterator[tuple[str, list[LoggedEvent]]]:
    """Every logged batch of the project up to entry `last` holding an event whose time is in
    [start_us, end_us) (with `whole_months`: in the UTC months of that range), in the order
    they were applied; possibly others besides (with `whole_months`, none after the last
    entry holding an event of the range itself, unless unfolded entries follow). No bound at
    all: the whole log."""
    stats = stats if stats is not None else RangeStats()
    complete, cursor = await store.ledger.log_index_state(project)
    if not complete or (start_us is None and end_us is None) or not last:
        async for entry_id, rows in read_log(store, project, last):
            stats.entries += 1
            yield entry_id, rows
        return
    async for entry_id, blob in _range_entries(
        store, project, last, cursor, (start_us, end_us), whole_months, stats
    ):
        yield entry_id, decode_log(blob)


async def read_coded_range(
    store: Stores, project: str, last: str, start_us: int, end_us: int
) -> AsyncIterator[tuple[str, CodedLog]]:
    """`read_log_range` of [start_us, end_us) as the entries' coded columns (`CodedLog`: no
    event ids or tags decoded), for a reader that sums them (an entry of an unknown format,
    none is written, is left out)."""
    complete, cursor = await store.ledger.log_index_state(project)
    if complete and last:
        entries = _range_entries(
            store, project, last, cursor, (start_us, end_us), False, RangeStats()
        )
    else:
        entries = read_log_entries(store, project, last)
    async for entry_id, blob in entries:
        entry = decode_log_entry(blob)
        if entry is not None:
            yield entry_id, entry


async def _range_entries(
    store: Stores,
    project: str,
    last: str,
    cursor: str,
    bounds: tuple[int | None, int | None],
    whole_months: bool,
    stats: RangeStats,
) -> AsyncIterator[tuple[str, bytes]]:
    """The entries (id, blob) `read_log_range` yields when the log is indexed up to the fold's
    `cursor` (read before the index)."""
    start_us, end_us = bounds
    stats.indexed = True
    # The tail (after the cursor read above) first: an entry folded meanwhile is in both.
    tail: list[tuple[str, bytes]] = []
    stop = entry_order(last)
    after = cursor
    while entry_order(after) < stop:
        page = await store.ledger.log_entries(project, after=after, count=200)
        if not page:
            break
        for entry_id, blob in page:
            if entry_order(entry_id) <= stop:
                tail.append((entry_id, blob))
        after = page[-1][0]
    span = await _hour_span(store, project, start_us, end_us, whole_months)
    in_tail = {entry_id for entry_id, _ in tail}
    ids = [] if span is None else await _indexed_ids(store, project, span, last)
    if whole_months and ids and not tail:
        # An entry after the last one holding the range's own events comes later in the
        # order of the log: it cannot have shaped anything the range shows.
        own = await _hour_span(store, project, start_us, end_us, False)
        own_ids = [] if own is None else await _indexed_ids(store, project, own, last)
        ids = [i for i in ids if own_ids and entry_order(i) <= entry_order(own_ids[-1])]
    ids = [entry_id for entry_id in ids if entry_id not in in_tail]
    for at in range(0, len(ids), _FETCH_PAGE):
        for entry_id, blob in await store.ledger.entries_by_id(project, ids[at : at + _FETCH_PAGE]):
            stats.entries += 1
            yield entry_id, blob
    for entry_id, blob in tail:
        stats.entries += 1
        yield entry_id, blob


class TierPrefix:
    """The graduated-tier counters as a replay of the whole log would hold them before each
    entry, from the tier index (``tierix:<yyyymm>``: each entry's quantity per month, rate
    version and SKU), so an export of a window prices its events without reading the entries
    before them. `before` is asked of entries in the order of the log."""

    def __init__(self, fields: list[tuple[tuple[int, int], str, str, int]]) -> None:
        self._fields = sorted(fields)  # (entry order, month, sku, quantity)
        self.fields = self._fields
        self._at = 0
        self._running: dict[tuple[str, str], int] = {}

    def before(self, entry_id: str) -> dict[tuple[str, str], int]:
        """(yyyymm, sku) -> the quantity of the entries before `entry_id`."""
        order, fields, running = entry_order(entry_id), self._fields, self._running
        while self._at < len(fields) and fields[self._at][0] < order:
            _, month, sku, quantity = fields[self._at]
            running[(month, sku)] = running.get((month, sku), 0) + quantity
            self._at += 1
        return running


async def tier_prefix(
    store: Stores,
    project: str,
    last: str,
    start_us: int | None,
    end_us: int | None,
    counts: Callable[[int, str], bool],
    cache: dict[tuple[str, ...], list[tuple[tuple[int, int], str, str, int]]] | None = None,
) -> TierPrefix | None:
    """The tier counters before each entry of a read of [start_us, end_us) up to `last`,
    for the (version, sku) that `counts`; None when the index does not cover the log up to
    `last` (a log from before the index, batches not folded yet): replay the months then.
    With `cache`, the fields of the last months read are kept there and used again by the
    next read of the same months (an export read period by period: one month's fields)."""
    complete, cursor = await store.ledger.log_index_state(project)
    if not complete or not last or entry_order(cursor) < entry_order(last):
        return None
    span = await _hour_span(store, project, start_us, end_us, False)
    if span is None:
        return TierPrefix([])
    first_day, last_day = span[0] // 24, span[1] // 24
    months = sorted({day_name(d)[:6] for d in range(first_day, last_day + 1)})
    if cache is not None and tuple(months) in cache:
        return TierPrefix(cache[tuple(months)])
    # Entries trimmed away by the log's retention are no longer replayed: nor are they here.
    oldest, stop = entry_order(await store.ledger.first_log_entry(project)), entry_order(last)
    fields = []
    for month, raw in zip(months, await store.ledger.tier_index(project, months), strict=True):
        for key, value in raw.items():
            entry_id, version, sku = as_text(key).split("|", 2)
            order = entry_order(entry_id)
            if oldest <= order <= stop and counts(int(version), sku):
                fields.append((order, month, sku, int(value)))
    prefix = TierPrefix(fields)
    if cache is not None:
        cache.clear()
        cache[tuple(months)] = prefix.fields
    return prefix


_DAYS_PER_READ = 31  # days of the log index read per round trip by `event_hours`


async def event_hours(
    store: Stores, project: str, last: str, start_us: int | None, end_us: int | None
) -> AsyncIterator[int]:
    """The hours (since 1970, ascending) in [start_us, end_us) that may hold an event of the
    log up to entry `last`: those the log index names when it covers the log up to `last`,
    else every hour of the range (an open end stops at the first or last day the totals
    hold). The index is read a month of days at a time, so this holds one month's fields."""
    span = await _hour_span(store, project, start_us, end_us, False)
    if span is None or not last:
        return
    first, final = span
    complete, cursor = await store.ledger.log_index_state(project)
    if not complete or entry_order(cursor) < entry_order(last):
        for hour in range(first, final + 1):
            yield hour
        return
    stop = entry_order(last)
    for day0 in range(first // 24, final // 24 + 1, _DAYS_PER_READ):
        days = list(range(day0, min(day0 + _DAYS_PER_READ, final // 24 + 1)))
        indexes = await store.ledger.log_index(project, [day_name(d) for d in days])
        for day, fields in zip(days, indexes, strict=True):
            hours: set[int] = set()
            for raw in fields:
                hh, _, entry_id = as_text(raw).partition("|")
                hour = day * 24 + int(hh)
                if first <= hour <= final and entry_order(entry_id) <= stop:
                    hours.add(hour)
            for hour in sorted(hours):
                yield hour
