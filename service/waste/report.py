"""Waste findings from a project's accepted events: a pure computation, no I/O, no clock.

`find_waste(project, events, skus, policy, progress, now, window_from, window_to, currency)`
reads the project's accepted events (`LoggedEvent` rows of its log), the SKUs of its rate
card, its waste policy and its experiments' progress reports, and returns a `WasteReport`:
one `Finding` per piece of waste, each with its cost so far, its cost per day if left
alone, the evidence (keys, event ids, per-day lines) and a concrete action.

All money is exact integer nano-currency (quantities in micro-units) until it is formatted
as a decimal string. Every division of money is rounded half-even to the nano.

Days, window and reference time
-------------------------------
* A day is a UTC calendar day; an event belongs to the day of its own `time`.
* The report window is `window_from` .. `window_to`, both inclusive (UTC days). Defaults:
  `window_to` = the UTC day of `now`, `window_from` = `window_to` - 29 days (30 days).
* The rules read units (`cells`): whole-day cells of events they cannot tell apart, folded
  with the totals, and single events on the few days where a rule compares event times with
  an instant inside the day (`plan_report`), plus facts kept over the whole log (first
  transfers, experiments' first events, SKUs and reservations seen). What they read grows with
  the window and the project's distinct cells, not with its history.
* Only events whose day is in the window are counted as waste. Events before the window
  are history: they tell which transfer of a dataset came first and when an experiment
  started. Events after `window_to` are ignored. Pass the project's whole log.
* `as_of` = the earlier of `now` and the end of `window_to` (midnight after it). The
  experiment checks look back from `as_of`.
* A *full day* is a day that ended at or before `now`. The *rate day* is the last full day
  of the window (`min(window_to, day of now - 1)`; `window_to` if the window has no full
  day). "Cost per day if left alone" is, for waste that recurs every day (idle reservations,
  storage and logs past retention, checkpoint growth, log ingest over the cap), the waste
  cost on the rate day: it shows the state now, and drops to 0 the day after it is fixed.
  A trailing average would keep reporting a fixed problem for days.
* Fixed SKUs are committed spend: stopping work does not save them. Only the reserved
  capacity check looks at them; every other check skips fixed SKUs.
* No cost is counted twice: an event's cost already reported by one finding is left out
  of the others (storage past retention is left out of the checkpoint growth check, and
  experiments count their spend net of all other findings). `total_waste` is the sum of
  the findings' `cost_so_far`.
* A finding is reported only when its cost so far is above zero.

The rules of each kind of waste are in their own modules: `reserved`, `experiments`,
`storage`, `cross_region` and `logs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from costcore.money import format_money

from ..ledger.eventlog import LoggedEvent
from ..ratecards.model import PricedSku
from .cells import Unit, WasteFacts, facts_of_rows, row_unit
from .cross_region import cross_region_repulls, first_transfers
from .days import DAY_US, date_of, datetime_at, day_of, micros
from .experiments import experiment_starts, experiments_without_progress, verdict_of
from .logs import log_ingest_over_cap, log_past_retention
from .model import DEFAULT_WINDOW_DAYS, ProgressPoint, WastePolicy, WasteReport
from .reserved import reserved_idle
from .scan import Scan
from .storage import checkpoint_growth, storage_past_retention

__all__ = ["ReportPlan", "find_waste", "find_waste_in_units", "plan_report"]


@dataclass(frozen=True)
class ReportPlan:
    """A report's window and reference days, and what it reads: the units of the days
    `read_from`..`last_day`, the `row_days` among them as events, the others as cells."""

    now_us: int
    today: int
    first_day: int
    last_day: int
    last_full_day: int
    rate_day: int
    as_of_us: int
    read_from: int
    row_days: frozenset[int]


def _is_fixed(skus: Mapping[str, PricedSku]) -> Callable[[str], bool]:
    def fixed(sku: str) -> bool:
        s = skus.get(sku)
        return s is not None and s.fixed

    return fixed


def plan_report(
    facts: WasteFacts,
    skus: Mapping[str, PricedSku],
    policy: WastePolicy,
    progress: Mapping[str, Sequence[ProgressPoint]],
    now: datetime,
    window_from: date | None,
    window_to: date | None,
) -> ReportPlan:
    """The window, reference days and the days to read (see the module doc). Raises
    `ValueError` for a naive `now` or a window that ends before it starts."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    now_us = micros(now)
    today = now_us // DAY_US
    last_day = day_of(window_to) if window_to is not None else today
    first_day = (
        day_of(window_from) if window_from is not None else last_day - (DEFAULT_WINDOW_DAYS - 1)
    )
    if first_day > last_day:
        raise ValueError("window_from is after window_to")
    last_full_day = min(last_day, today - 1)
    rate_day = last_full_day if last_full_day >= first_day else last_day
    as_of_us = min(now_us, (last_day + 1) * DAY_US)
    fixed = _is_fixed(skus)
    # The days holding an instant some rule compares event times with (see `cells`).
    boundaries = [as_of_us]
    read_from = first_day
    for first_us, _ in first_transfers(facts, fixed, last_day).values():
        boundaries.append(first_us)
    min_pct = Decimal(policy.min_improvement_pct)
    ignored = set(policy.ignore_experiments)
    for experiment, first_us in experiment_starts(facts, fixed, as_of_us).items():
        if experiment in ignored:
            continue
        points = [p for p in progress.get(experiment, ()) if micros(p.time) <= as_of_us]
        if not points and not policy.check_unreported:
            continue
        verdict = verdict_of(policy, as_of_us, first_us, points, min_pct)
        if verdict is not None:
            boundaries += [verdict.since, as_of_us - verdict.recent]
            read_from = min(read_from, (as_of_us - verdict.recent) // DAY_US)
    row_days = frozenset(us // DAY_US for us in boundaries if read_from <= us // DAY_US <= last_day)
    return ReportPlan(
        now_us, today, first_day, last_day, last_full_day, rate_day, as_of_us, read_from, row_days
    )


def find_waste_in_units(
    project: str,
    units: Iterable[Unit],
    facts: WasteFacts,
    plan: ReportPlan,
    skus: Mapping[str, PricedSku],
    policy: WastePolicy,
    progress: Mapping[str, Sequence[ProgressPoint]] | None,
    currency: str = "",
) -> WasteReport:
    """The waste findings over the units `plan` asked for (the days `plan.read_from` ..
    `plan.last_day`, the `plan.row_days` as events) and the facts of the whole log."""
    rows = sorted(
        (u for u in units if plan.read_from <= u.day <= plan.last_day),
        key=lambda u: (u.epoch_us, u.id, u.sku, u.category, u.experiment),
    )
    ctx = Scan(
        rows=rows,
        days=[u.day for u in rows],
        skus=skus,
        policy=policy,
        currency=currency,
        first_day=plan.first_day,
        last_day=plan.last_day,
        today=plan.today,
        last_full_day=plan.last_full_day,
        rate_day=plan.rate_day,
        as_of_us=plan.as_of_us,
        facts=facts,
        claimed=[0] * len(rows),
    )
    found = reserved_idle(ctx)
    found += storage_past_retention(ctx)
    found += checkpoint_growth(ctx)
    found += cross_region_repulls(ctx)
    found += log_ingest_over_cap(ctx)
    found += log_past_retention(ctx)
    found += experiments_without_progress(ctx, progress or {})
    found.sort(key=lambda f: (-f.cost, -f.per_day, f.finding.kind, f.finding.title))
    return WasteReport(
        project=project,
        currency=currency,
        window_from=date_of(plan.first_day),
        window_to=date_of(plan.last_day),
        as_of=datetime_at(plan.as_of_us),
        total_waste=format_money(sum(f.cost for f in found)),
        total_per_day_if_left=format_money(sum(f.per_day for f in found)),
        findings=[f.finding for f in found],
        policy=policy,
    )


def find_waste(
    project: str,
    events: Iterable[LoggedEvent],
    skus: Mapping[str, PricedSku],
    policy: WastePolicy | None,
    progress: Mapping[str, Sequence[ProgressPoint]] | None,
    now: datetime,
    window_from: date | None = None,
    window_to: date | None = None,
    currency: str = "",
) -> WasteReport:
    """The waste findings of one project over a window of UTC days (see the module doc), from
    its whole log read event by event (a log without the fold's cells: `service`).

    `events`: the project's accepted events (any order; the whole log, history included);
    `skus`: its rate card's SKUs by code (for `fixed` and `unit`); `now`: tz-aware.
    Raises `ValueError` for a naive `now` or a window that ends before it starts.
    """
    policy = policy if policy is not None else WastePolicy()
    rows = list(events)
    facts = facts_of_rows(rows)
    plan = plan_report(facts, skus, policy, progress or {}, now, window_from, window_to)
    units = [row_unit(r) for r in rows if plan.read_from <= r.epoch_us // DAY_US <= plan.last_day]
    return find_waste_in_units(project, units, facts, plan, skus, policy, progress, currency)
