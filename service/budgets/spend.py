"""A budget's spend per UTC day, read from the kept totals rather than the event log: what a
new budget's counters start from (`counters_now`) and what the dashboard's burn-down draws
(`spend_by_day`).

The totals (the smallest roll-up holding the scope's dimensions, service/ledger/rollups.py)
hold each day's cost per stage, experiment, category and owner, which is all a scope without
tags reads (`model.matches`), so a day's spend in scope is a sum of a few cells. Two cases
still read events, each only the part of the log it needs (service/ledger/ranges.py): the
day a window budget starts or ends within (its exact time decides), and a scope with tags
(the totals hold only the project's attribution tags, as they were when each batch came).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from ..ledger.fields import dims_of
from ..ledger.folding import settled_state
from ..ledger.ranges import read_log_range
from ..ledger.rollups import FINE_DIMS, covering
from .firing import day_field, spend_field
from .model import Budget, matches, period_of

if TYPE_CHECKING:
    from ..stores import Stores

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY = timedelta(days=1)


def _us(when: datetime) -> int:
    return (when.astimezone(UTC) - _EPOCH) // timedelta(microseconds=1)


def _day_number(when: datetime) -> int:
    return (when.astimezone(UTC) - _EPOCH).days


def _midnight(day: int) -> datetime:
    return _EPOCH + timedelta(days=day)


async def _from_log(
    store: Stores, budget: Budget, last: str, start: datetime | None, end: datetime | None
) -> dict[int, int]:
    """Spend in scope per day (days since 1970) of the events in [start, end), from the log."""
    project = budget.project
    lo = None if start is None else _us(start)
    hi = None if end is None else _us(end)
    by_day: dict[int, int] = {}
    async for _, rows in read_log_range(store, project, last, lo, hi):
        for row in rows:
            if (lo is not None and row.epoch_us < lo) or (hi is not None and row.epoch_us >= hi):
                continue
            if matches(budget, row.event(project), row.category):
                day = row.epoch_us // 86_400_000_000
                by_day[day] = by_day.get(day, 0) + row.cost_nano
    return by_day


async def _from_totals(
    store: Stores, budget: Budget, days: list[str], complete: bool
) -> dict[int, int]:
    """Spend in scope of each of these whole days (yyyymmdd), from the totals: the smallest
    roll-up holding the scope's dimensions (when the roll-ups hold every event), else the
    finest totals."""
    s = budget.scope
    wanted = {
        name: value
        for name, value in (
            ("stage", s.stage),
            ("category", s.category),
            ("experiment", s.experiment),
            ("owner", s.owner),
        )
        if value is not None
    }
    rollup = covering(wanted, False) if complete else None
    source, dims = ("tot", FINE_DIMS) if rollup is None else (rollup.name, rollup.dims)
    at = [(dims.index(name), value) for name, value in wanted.items()]
    hashes = await store.ledger.totals_hashes(budget.project, source, days, "c")
    by_day: dict[int, int] = {}
    for name, fields in zip(days, hashes, strict=True):
        day = _day_number(datetime.strptime(name, "%Y%m%d").replace(tzinfo=UTC))
        for raw, value in fields.items():
            text = raw.decode()
            if not text.startswith("c|"):
                continue
            cell = dims_of(text[2:])
            if all(i < len(cell) and cell[i] == want for i, want in at):
                by_day[day] = by_day.get(day, 0) + int(value)
    return by_day


async def _spend(
    store: Stores,
    budget: Budget,
    last: str,
    daily: dict[str, int],
    complete: bool,
    start: datetime | None,
    end: datetime | None,
) -> dict[int, int]:
    """Spend in scope per day of the events in [start, end) (None: unbounded), the totals
    folded up to `last`."""
    if budget.scope.tags:
        return await _from_log(store, budget, last, start, end)
    whole: list[str] = []
    partial: list[tuple[datetime, datetime]] = []  # edge days: [from, to) within the day
    for name in sorted(daily):
        day = _day_number(datetime.strptime(name, "%Y%m%d").replace(tzinfo=UTC))
        lo, hi = _midnight(day), _midnight(day + 1)
        cut_lo = max(lo, start) if start is not None else lo
        cut_hi = min(hi, end) if end is not None else hi
        if cut_lo >= cut_hi:
            continue
        if (cut_lo, cut_hi) == (lo, hi):
            whole.append(name)
        else:
            partial.append((cut_lo, cut_hi))
    by_day = await _from_totals(store, budget, whole, complete) if whole else {}
    for lo, hi in partial:
        for day, cost in (await _from_log(store, budget, last, lo, hi)).items():
            by_day[day] = by_day.get(day, 0) + cost
    return by_day


def _same_entry(cursor: str, last: str) -> bool:
    # An empty log's cursor is "0-0" once a rebuild or a first batch set it.
    return (cursor or "0-0") == (last or "0-0")


async def spend_by_day(
    store: Stores, budget: Budget, start: datetime, end: datetime
) -> dict[date, int]:
    """The budget's spend in scope per UTC day of the events in [start, end)."""
    daily, complete = await settled_state(store, budget.project)  # folds what is pending first
    last = await store.ledger.last_log_entry(budget.project)
    by_day = await _spend(store, budget, last, daily, complete, start, end)
    return {_midnight(day).date(): cost for day, cost in sorted(by_day.items())}


async def counters_now(
    store: Stores, budget: Budget
) -> tuple[str, dict[str, int], dict[str, int]] | None:
    """A new budget's counters from everything accepted up to the log's last entry: that
    entry, the spend per period field and the spend per day field (growth rules). None when
    a batch came meanwhile (the totals and that entry differ: ask again)."""
    project = budget.project
    daily, complete = await settled_state(store, project)
    last = await store.ledger.last_log_entry(project)
    by_day = await _spend(store, budget, last, daily, complete, None, None)
    spend: dict[str, int] = {}
    if budget.period == "window":
        inside = await _spend(
            store, budget, last, daily, complete, budget.window_start, budget.window_end
        )
        if inside:
            spend[spend_field(budget.id, "window")] = sum(inside.values())
    else:
        for day, cost in sorted(by_day.items()):
            bounds = period_of(budget, _midnight(day))
            assert bounds is not None  # weekly and monthly periods hold every day
            field = spend_field(budget.id, bounds.name)
            spend[field] = spend.get(field, 0) + cost
    days = (
        {day_field(budget.id, day): cost for day, cost in sorted(by_day.items())}
        if budget.growth is not None
        else {}
    )
    _, cursor = await store.ledger.log_index_state(project)
    if not budget.scope.tags and not _same_entry(cursor, last):
        return None
    return last, spend, days
