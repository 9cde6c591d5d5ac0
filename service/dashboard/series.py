"""Chart data from domain results: pure functions, no I/O, no clock (`now` is passed in)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from costcore.money import format_money, parse_money

from ..budgets.model import Budget, amount_nano, matches, threshold_limit
from ..costs.report import CostReport
from ..events.model import EventIn
from .charts import StackSeries

ZERO = "0.00"


def stacked_by_period(
    report: CostReport, dimension: str, first: date, last: date
) -> tuple[list[str], list[StackSeries]]:
    """Every day from `first` to `last` (both included), one series per value of `dimension`.

    `report` is a `cost_report` with `granularity="day"` grouped by `dimension`; days without
    spend are shown as empty bars, so the time axis has no gaps. Series are ordered by their
    total over the range, largest first (the largest stack at the bottom).
    """
    periods = [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
    cells: dict[str, dict[str, str]] = {}
    totals: dict[str, int] = {}
    for row in report.rows:
        name = row.key[dimension] or "(none)"
        cells.setdefault(name, {})[row.key["period"]] = row.cost
        totals[name] = totals.get(name, 0) + _nano(row.cost)
    order = sorted(cells, key=lambda n: (-totals[n], n))
    series = [StackSeries(n, [cells[n].get(p, ZERO) for p in periods]) for n in order]
    return periods, series


def _nano(money: str) -> int:
    return parse_money(Decimal(money))


def burn_down_points(
    budget: Budget,
    start: datetime,
    end: datetime,
    now: datetime,
    priced: Iterable[tuple[EventIn, str, int]],
) -> list[tuple[datetime, str]]:
    """`burn_down_of_days` of the spend per day of `priced`: (event, category, cost in nano)
    of every accepted event. An event counts when the budget's own scope rule
    (`budgets.matches`) keeps it and its time is in the period — the same rule that moves the
    budget's counter (the dashboard reads the days from the totals: `budgets.spend`)."""
    by_day: dict[date, int] = {}
    for event, category, cost in priced:
        when = event.time.astimezone(UTC)
        if start <= when < end and matches(budget, event, category):
            day = when.date()
            by_day[day] = by_day.get(day, 0) + cost
    return burn_down_of_days(start, end, now, by_day)


def burn_down_of_days(
    start: datetime, end: datetime, now: datetime, by_day: dict[date, int]
) -> list[tuple[datetime, str]]:
    """Cumulative spend of a budget over its period `start`..`end`, one point per UTC day,
    from its spend per day in the period (`by_day`).

    Each day's point is at the day's end (now, for today). Events already posted for later
    than now (the service accepts up to a day ahead) count in the last point, as they count in
    the counter.
    """
    if now <= start:
        return []
    by_day = dict(by_day)
    stop = min(now, end)
    last_day = (stop - timedelta(microseconds=1)).date()
    times: list[datetime] = []
    sums: list[int] = []
    running = 0
    day = start.astimezone(UTC).date()
    while day <= last_day:
        running += by_day.pop(day, 0)
        times.append(min(datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC), stop))
        sums.append(running)
        day += timedelta(days=1)
    if sums:
        sums[-1] += sum(v for d, v in by_day.items() if d > last_day)
    return [(at, format_money(value)) for at, value in zip(times, sums, strict=True)]


def threshold_limits(budget: Budget) -> list[tuple[int, str]]:
    """Each threshold as (percent, the spend that reaches it), rounded up like the alerts."""
    nano = amount_nano(budget)
    return [(pct, format_money(threshold_limit(nano, pct))) for pct in budget.thresholds]
