"""The cost-effect report's spend per experiment from the cost-effect sums kept at fold time
(service/ledger/effectsums.py): experiments × stages × owners × categories a period, whole
months and whole days, whatever the events a day.

What is read, for a report over a time range (the filters' `from`/`to`, or none):

* each month the range holds whole (every day of it with totals is in the range and needs no
  log), from its month hash; the range's other whole days from their day hashes: the ``c|``
  and ``n|`` fields (cost and events per experiment × stage × owner × category), and of the
  quantities (``q|``) only those of the accelerator SKUs, for the experiments, stages and
  owners those periods hold (HMGET);
* from the log (its index: the entries holding events of that day, their coded columns) the
  days a time the report reads falls inside (`split_points`): a day the range starts or ends
  within, and each regressed experiment's restart day (where the rework exposure starts);
  the events of such a day are summed in the fold's compiled pass, per segment between
  those times.

A period's sums stand in the report's timeline as one point at the period's start, and a
segment's at its first time: a restart point is inside a day read from the log, at a
segment's start, so a period or segment is wholly before or wholly after it and the rework
exposure sums the same costs as over the events. None (the caller reads the finest
totals or the log, as before) for a tags filter (the sums hold no tags), while the sums do not
hold every folded event (data folded before they existed: until the project's next rebuild),
or when the log has no index.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from datetime import date, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from ..ledger.effectsums import (
    EFFECT,
    EFFECT_QUANTITY,
    EFFECT_VERSION,
    experiment_costs_match,
    parse_cost_dims,
    quantity_field,
)
from ..ledger.eventlog import CodedLog
from ..ledger.fields import dims_of
from ..ledger.folding import settle, sums_of_log
from ..ledger.ranges import read_coded_range
from .effect import ReportFilter, _micros, _Spend, cost_effect
from .model import EvaluationResult, EvaluationSettings

if TYPE_CHECKING:
    from ..stores import Stores

DAY_US = 86_400_000_000
_EPOCH_DAY = date(1970, 1, 1)
# Log entries of a day read from the log summed at a time (a 5,000-event entry's columns are
# ~1 MB decoded).
_SUMMED_AT_ONCE = 16


@lru_cache(maxsize=4096)
def period_start_us(period: str) -> int:
    """The start (µs since 1970) of a day (yyyymmdd) or a month (yyyymm), UTC."""
    day = date(int(period[:4]), int(period[4:6]), int(period[6:8] or 1))
    return (day - _EPOCH_DAY).days * DAY_US


def edge_points(filters: ReportFilter) -> set[int]:
    """The range's `from` and `to` (µs) when not at a midnight."""
    return {
        _micros(edge)
        for edge in (filters.time_from, filters.time_to)
        if edge is not None and _micros(edge) % DAY_US
    }


def restart_points(
    project: str,
    settings: EvaluationSettings,
    results: Sequence[EvaluationResult],
    filters: ReportFilter,
) -> dict[str, int]:
    """Each regressed experiment's restart point (µs), where its rework exposure starts: it
    depends on the results alone (effect.py)."""
    timed = ReportFilter(time_from=filters.time_from, time_to=filters.time_to)
    return {
        row.experiment: _micros(row.rework_since)
        for row in cost_effect(project, "", settings, [], set(), results, timed).rows
        if row.rework_since is not None
    }


def split_points(
    project: str,
    settings: EvaluationSettings,
    results: Sequence[EvaluationResult],
    filters: ReportFilter,
) -> set[int]:
    """The times (µs) the report reads inside a day: the range's edges not at a midnight and
    the restart points. Their days are read from the log."""
    return edge_points(filters) | set(restart_points(project, settings, results, filters).values())


def exact_days(
    project: str,
    settings: EvaluationSettings,
    results: Sequence[EvaluationResult],
    filters: ReportFilter,
) -> set[int]:
    """The days (since 1970) of the `split_points`: those read from the log."""
    return {p // DAY_US for p in split_points(project, settings, results, filters)}


def whole_periods(days: Sequence[str], read_whole: set[str]) -> tuple[list[str], list[str]]:
    """(months, days) to read: each month all of whose `days` (those with totals) are in
    `read_whole` as one month, the other days of `read_whole` one by one."""
    by_month: dict[str, list[str]] = defaultdict(list)
    for day in days:
        by_month[day[:6]].append(day)
    months = [m for m, held in sorted(by_month.items()) if all(d in read_whole for d in held)]
    taken = set(months)
    return months, sorted(d for d in read_whole if d[:6] not in taken)


async def _effect_state(store: Stores, project: str) -> tuple[dict[str, int], bool]:
    """The days with totals, and whether the cost-effect sums hold every folded event, after
    folding what is queued."""
    await settle(store, project)
    daily, folded, covered = await store.ledger.totals_state(project, EFFECT_VERSION)
    if covered != folded:  # maybe a batch landed between the two reads: look once more
        daily, folded, covered = await store.ledger.totals_state(project, EFFECT_VERSION)
    return daily, covered == folded


async def spend_from_effect_sums(
    store: Stores,
    project: str,
    settings: EvaluationSettings,
    results: Sequence[EvaluationResult],
    accelerators: set[str],
    filters: ReportFilter,
) -> dict[str, _Spend] | None:
    """The report's spend per experiment (`effect._spend_by_experiment` of every event) from
    the cost-effect sums and the log of the exact days (this module's docstring); None when
    those sums cannot tell."""
    if filters.tags:
        return None
    daily, complete = await _effect_state(store, project)
    if not complete:
        return None
    indexed, _ = await store.ledger.log_index_state(project)
    if not indexed:
        return None
    restarts = restart_points(project, settings, results, filters)
    points = edge_points(filters) | set(restarts.values())
    edge_days = {p // DAY_US for p in edge_points(filters)}
    exact = {p // DAY_US for p in points}
    days = sorted(daily)
    in_range = {
        d
        for d in days
        if period_start_us(d) // DAY_US not in edge_days and filters.keeps_time(period_start_us(d))
    }
    # A month whose days are all in the range is read whole, its restart days too (their log
    # then splits its timeline only: `_split_months`); the other days one by one.
    months, _ = whole_periods(days, in_range)
    whole_days = [d for d in days if d in in_range and d[:6] not in months and _day(d) not in exact]
    spend: dict[str, _Spend] = defaultdict(_Spend)
    last = await store.ledger.last_log_entry(project) if exact else ""
    for day_number in sorted(exact):
        lo, hi = day_number * DAY_US, (day_number + 1) * DAY_US
        cuts = [lo, *sorted(p for p in points if lo < p < hi)]
        month = _day_name(day_number)[:6]
        month_start = period_start_us(month) if month in months else None
        entries: list[CodedLog] = []
        async for _, entry in read_coded_range(store, project, last, lo, hi):
            entries.append(entry)
            if len(entries) == _SUMMED_AT_ONCE:  # a day of many entries: bounded memory
                add_day_segments(spend, entries, cuts, accelerators, filters, month_start)
                entries = []
        add_day_segments(spend, entries, cuts, accelerators, filters, month_start)
    periods = months + whole_days
    hashes = await store.ledger.totals_hashes(project, EFFECT, periods)
    held = add_cost_fields(spend, periods, hashes, filters)
    await _split_months(store, project, spend, days, months, restarts, exact, filters)
    if accelerators:
        codes = sorted(accelerators)
        wanted = [
            (period, [(combo[0], quantity_field(*combo, sku)) for combo in combos for sku in codes])
            for period, combos in zip(periods, held, strict=True)
            if combos
        ]
        reads = [(period, [f.encode() for _, f in fields]) for period, fields in wanted]
        quantities = await store.ledger.totals_fields(project, EFFECT_QUANTITY, reads)
        for (_, fields), values in zip(wanted, quantities, strict=True):
            for (experiment, _), value in zip(fields, values, strict=True):
                if value is not None:
                    spend[experiment].accelerator_micro += int(value)
    return spend


def _day(name: str) -> int:
    return period_start_us(name) // DAY_US


def _day_name(day_number: int) -> str:
    return (_EPOCH_DAY + timedelta(days=day_number)).strftime("%Y%m%d")


async def _split_months(
    store: Stores,
    project: str,
    spend: dict[str, _Spend],
    days: Sequence[str],
    months: Sequence[str],
    restarts: dict[str, int],
    exact: set[int],
    filters: ReportFilter,
) -> None:
    """In the timeline of each experiment whose restart point falls in a month read whole,
    move its cost of that month's days after the restart day (but the days read from the
    log, split already) from the month's start to each day's: only that experiment's fields
    of those days are read."""
    for experiment, since in sorted(restarts.items()):
        month = _day_name(since // DAY_US)[:6]
        if month not in months or experiment not in spend:  # no cost of it to move
            continue
        month_start = period_start_us(month)
        after = [
            d for d in days if d[:6] == month and since // DAY_US < _day(d) and _day(d) not in exact
        ]
        match = experiment_costs_match(experiment)
        timeline = spend[experiment].timeline
        for day, fields in zip(
            after, await store.ledger.matching_fields(project, EFFECT, after, match), strict=True
        ):
            for raw, value in fields.items():
                _, stage, owner, _ = parse_cost_dims(raw[2:].decode())
                if (filters.stage is not None and stage != filters.stage) or (
                    filters.owner is not None and owner != filters.owner
                ):
                    continue
                timeline += [(period_start_us(day), int(value)), (month_start, -int(value))]


def _segments(epochs: Sequence[int], cuts: Sequence[int]) -> list[int]:
    """Each event's segment of the day [cuts[0], cuts[0] + a day) cut at `cuts` (its index
    times a day's µs, as if a day: the compiled sums group by day), -1 day outside it."""
    lo, hi = cuts[0], cuts[0] + DAY_US
    if len(cuts) == 1:
        return [0 if lo <= t < hi else -DAY_US for t in epochs]
    return [(bisect_right(cuts, t) - 1) * DAY_US if lo <= t < hi else -DAY_US for t in epochs]


def add_day_segments(
    spend: dict[str, _Spend],
    entries: Sequence[CodedLog],
    cuts: Sequence[int],
    accelerators: set[str],
    filters: ReportFilter,
    month_start: int | None = None,
) -> None:
    """Add the events of one day (from `cuts[0]`) of these log entries to `spend`, as
    `effect._spend_by_experiment` does, summed per segment between the `cuts` (the report's
    split points inside the day) in the fold's compiled pass: each segment's sums stand in
    the timeline at its cut, where no time the report compares with falls inside. With a
    `month_start` (the day's month is read whole: its sums hold the day's), the timeline
    only: each segment's cost moves from the month's start to its cut."""
    relabeled = [e._replace(epoch_us=_segments(e.epoch_us, cuts)) for e in entries]
    for (segment_day, dims), (cost, quantity, count) in sums_of_log(relabeled).cells.items():
        segment = period_start_us(segment_day) // DAY_US
        if segment < 0 or not count:
            continue
        stage, experiment, category, sku, owner = dims_of(dims)[:5]
        if not experiment or not filters.keeps_time(cuts[segment]):
            continue
        if (filters.stage is not None and stage != filters.stage) or (
            filters.owner is not None and owner != filters.owner
        ):
            continue
        s = spend[experiment]
        s.timeline.append((cuts[segment], cost))
        if month_start is not None:
            s.timeline.append((month_start, -cost))
            continue
        s.cost += cost
        s.events += count
        s.by_category[category] += cost
        s.by_stage[stage] += cost
        if sku in accelerators:
            s.accelerator_micro += quantity


def add_cost_fields(
    spend: dict[str, _Spend],
    periods: Sequence[str],
    hashes: Sequence[dict[bytes, bytes]],
    filters: ReportFilter,
) -> list[list[tuple[str, str, str]]]:
    """Add the ``c|``/``n|`` fields of each period's cost-effect hash the stage and owner
    filters keep to `spend`; returns each period's (experiment, stage, owner) kept."""
    held: list[list[tuple[str, str, str]]] = []
    for period, fields in zip(periods, hashes, strict=True):
        start = period_start_us(period)
        sums: dict[str, list[int]] = {}
        for raw, value in fields.items():
            pair = sums.setdefault(raw[2:].decode(), [0, 0])
            pair[raw[0] == ord("n")] += int(value)
        combos: set[tuple[str, str, str]] = set()
        for dims, (cost, count) in sums.items():
            experiment, stage, owner, category = parse_cost_dims(dims)
            if (filters.stage is not None and stage != filters.stage) or (
                filters.owner is not None and owner != filters.owner
            ):
                continue
            s = spend[experiment]
            s.cost += cost
            s.events += count
            s.by_category[category] += cost
            s.by_stage[stage] += cost
            s.timeline.append((start, cost))
            combos.add((experiment, stage, owner))
        held.append(sorted(combos))
    return held
