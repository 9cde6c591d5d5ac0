"""Budgets and the alerts they decide.

A budget watches the spend of a scope (a project, narrowed by stage, category, experiment,
owner or tags) over a period (calendar month, ISO week, or a fixed window). Its spend is a
counter kept beside the totals and moved by the same Lua script, in the same atomic step; the
script compares the counter before and after with each limit and records an alert the one time
a limit is crossed (an `HSETNX` marker per budget, period and limit). So each threshold fires
exactly once per period, whatever the number of workers, and never for a crossing that did not
happen: the comparison is between exact integers.

Limits, all in nano-currency:

* threshold `t` %: ``amount × t / 100`` rounded up — fires when spend goes from below to at or
  above it.
* forecast (`forecast` and `forecast_limit`, the one rule the status, the dashboard, the
  alerts and the Prometheus gauge all read): a plan's budget (``plan_id`` set) forecasts from
  the plan's progress, by earned value: with ``earned`` the fraction of its scope done (the
  planned cost of the work done over the planned cost of the scope, set by the plan's progress
  reports), ``forecast = spent / earned``, so a finished scope (earned 1) is forecast at its
  spend, and a scope with no progress yet at ``max(amount, spent)`` (at plan); it passes the
  amount exactly when ``spent > amount × earned``. Any other budget projects its spend
  linearly to the period's end, ``forecast = spent × period_length / elapsed``; it passes the
  amount exactly when ``spent > amount × elapsed / period_length``. The bound is computed when
  the batch is priced (``elapsed`` measured then) and the alert fires once per period when
  spend passes it. It is only armed once ``min_elapsed_pct`` of the period has passed, so a
  first-hour burst does not project a huge month.
* abnormal growth: a day's spend above ``multiple ×`` the average of the ``trailing_days``
  before it (days without spend count as zero; needs at least one day with spend) — fires once
  per day.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Literal

import msgspec

from costcore.money import format_money, parse_money, round_half_even_div

from ..errors import Invalid
from ..events.model import (
    SAFE_TEXT_PATTERN,
    Label,
    LabelledEvent,
    ProjectName,
    TagKey,
    TagValue,
)
from ..ratecards.model import COST_CATEGORIES, DecimalString

Period = Literal["monthly", "weekly", "window"]
AlertKind = Literal["threshold", "forecast", "growth", "evaluation_regression"]
# The kind of the alert an evaluation regression fires (service/evaluations/regression.py):
# it goes through the same alerts stream and webhooks as the budget kinds.
REGRESSION_KIND: Literal["evaluation_regression"] = "evaluation_regression"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class BudgetScope(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Which events a budget counts: any of stage, experiment, owner, SKU category or tags; empty
    counts the whole project."""

    stage: str | None = None
    category: str | None = None
    experiment: Label | None = None
    owner: Label | None = None
    tags: Annotated[dict[TagKey, TagValue], msgspec.Meta(max_length=8)] = {}


class GrowthRule(msgspec.Struct, forbid_unknown_fields=True):
    """An alert when a day's spend passes `multiple` times its average over the trailing days."""

    multiple: DecimalString = "3"
    trailing_days: Annotated[int, msgspec.Meta(ge=1, le=90)] = 7


class ForecastRule(msgspec.Struct, forbid_unknown_fields=True):
    """An alert when the spend forecast to the period's end passes the amount (once
    `min_elapsed_pct` of the period has passed)."""

    min_elapsed_pct: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10


class BudgetIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Body of `POST /v1/budgets`: a budget over a period (monthly, weekly or a window) with its
    scope, thresholds and alert rules."""

    project: ProjectName
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=120, pattern=SAFE_TEXT_PATTERN)]
    amount: DecimalString
    period: Period = "monthly"
    window_start: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    window_end: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    scope: BudgetScope = msgspec.field(default_factory=BudgetScope)
    thresholds: Annotated[
        list[Annotated[int, msgspec.Meta(ge=1, le=1000)]], msgspec.Meta(max_length=10)
    ] = msgspec.field(default_factory=lambda: [50, 80, 100])
    forecast: ForecastRule | None = None
    growth: GrowthRule | None = None
    plan_id: str | None = None


class Budget(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A budget as stored: its amount over a period, its scope and the rules of its alerts."""

    id: str
    created_at: datetime
    project: str
    name: str
    amount: str
    period: Period
    window_start: datetime | None = None
    window_end: datetime | None = None
    scope: BudgetScope = msgspec.field(default_factory=BudgetScope)
    thresholds: list[int] = msgspec.field(default_factory=list)
    forecast: ForecastRule | None = None
    growth: GrowthRule | None = None
    plan_id: str | None = None
    # A plan's budget: the fraction of its scope done by earned value (a decimal string from
    # 0 to 1), set from the plan's progress reports; None: no progress reported yet.
    earned: str | None = None


class BudgetError(Invalid, ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


def new_budget(data: BudgetIn, now: datetime | None = None) -> Budget:
    """Validate a budget beyond its schema and give it an id."""
    from ..events.model import STAGES

    try:
        amount = parse_money(Decimal(data.amount))
    except ValueError as exc:
        raise BudgetError("$.amount", str(exc)) from exc
    if amount == 0:
        raise BudgetError("$.amount", "must be greater than zero")
    if data.period == "window":
        if data.window_start is None or data.window_end is None:
            raise BudgetError("$.window_start", "a window budget needs window_start and window_end")
        if data.window_end <= data.window_start:
            raise BudgetError("$.window_end", "must be after window_start")
    elif data.window_start is not None or data.window_end is not None:
        raise BudgetError("$.period", "window_start/window_end need period 'window'")
    if data.scope.stage is not None and data.scope.stage not in STAGES:
        raise BudgetError("$.scope.stage", f"unknown stage; use one of {', '.join(STAGES)}")
    if data.scope.category is not None and data.scope.category not in COST_CATEGORIES:
        raise BudgetError(
            "$.scope.category", f"unknown category; use one of {', '.join(COST_CATEGORIES)}"
        )
    if len(set(data.thresholds)) != len(data.thresholds):
        raise BudgetError("$.thresholds", "a threshold is listed twice")
    if data.growth is not None:
        try:
            multiple = Decimal(data.growth.multiple)
        except ArithmeticError as exc:
            raise BudgetError("$.growth.multiple", "not a decimal") from exc
        if not multiple.is_finite() or multiple <= 1:
            raise BudgetError("$.growth.multiple", "must be greater than 1")
    return Budget(
        id="bud_" + secrets.token_hex(6),
        created_at=now or datetime.now(UTC),
        project=data.project,
        name=data.name,
        amount=format_money(amount),
        period=data.period,
        window_start=data.window_start.astimezone(UTC) if data.window_start else None,
        window_end=data.window_end.astimezone(UTC) if data.window_end else None,
        scope=data.scope,
        thresholds=sorted(data.thresholds),
        forecast=data.forecast,
        growth=data.growth,
        plan_id=data.plan_id,
    )


def amount_nano(budget: Budget) -> int:
    return parse_money(Decimal(budget.amount))


def matches(budget: Budget, event: LabelledEvent, category: str) -> bool:
    s = budget.scope
    if s.stage is not None and event.stage != s.stage:
        return False
    if s.category is not None and category != s.category:
        return False
    if s.experiment is not None and event.experiment != s.experiment:
        return False
    if s.owner is not None and event.owner != s.owner:
        return False
    return all(event.tags.get(k) == v for k, v in s.tags.items())


@dataclass(frozen=True)
class PeriodBounds:
    name: str
    start: datetime
    end: datetime


def period_of(budget: Budget, when: datetime) -> PeriodBounds | None:
    """The budget period an event time falls in; None if outside a window budget."""
    when = when.astimezone(UTC)
    if budget.period == "monthly":
        start = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=32)).replace(day=1)
        return PeriodBounds(start.strftime("%Y-%m"), start, end)
    if budget.period == "weekly":
        day = when.replace(hour=0, minute=0, second=0, microsecond=0)
        start = day - timedelta(days=day.weekday())
        year, week, _ = start.isocalendar()
        return PeriodBounds(f"{year}-W{week:02d}", start, start + timedelta(days=7))
    assert budget.window_start is not None and budget.window_end is not None
    if budget.window_start <= when < budget.window_end:
        return PeriodBounds("window", budget.window_start, budget.window_end)
    return None


def shown_period(budget: Budget, now: datetime) -> PeriodBounds:
    """The period a budget's status shows at `now`: the current one; a window budget's
    window as a whole before or after it."""
    bounds = period_of(budget, now)
    if bounds is None:
        assert budget.window_start is not None and budget.window_end is not None
        inside = min(max(now, budget.window_start), budget.window_end - timedelta(microseconds=1))
        bounds = period_of(budget, inside)
    assert bounds is not None
    return bounds


def threshold_limit(amount: int, pct: int) -> int:
    return -(-amount * pct // 100)  # rounded up: the limit is reached, never undershot


def _armed(bounds: PeriodBounds, now: datetime, min_pct: int) -> tuple[int, int] | None:
    """(elapsed, length) of the period in seconds once `min_pct` of it has passed, else None."""
    length = int((bounds.end - bounds.start).total_seconds())
    elapsed = int((min(now, bounds.end) - bounds.start).total_seconds())
    if elapsed <= 0 or elapsed * 100 < length * min_pct:
        return None
    return elapsed, length


def _earned(budget: Budget) -> Fraction | None:
    """A plan budget's fraction done; None for no progress yet (or none above zero)."""
    if budget.earned is None:
        return None
    fraction = Fraction(Decimal(budget.earned))
    return fraction if fraction > 0 else None


def forecast_limit(budget: Budget, bounds: PeriodBounds, now: datetime, min_pct: int) -> int | None:
    """Spend above which the budget's forecast (`forecast`) exceeds its amount; None before
    `min_pct` of the period has passed."""
    armed = _armed(bounds, now, min_pct)
    if armed is None:
        return None
    amount = amount_nano(budget)
    if budget.plan_id is not None:
        earned = _earned(budget)
        if earned is None:
            return amount  # at plan: over only once the spend itself is
        return amount * earned.numerator // earned.denominator  # spent / earned > amount
    elapsed, length = armed
    return amount * elapsed // length  # forecast > amount  <=>  spent > this


def forecast(budget: Budget, spent: int, bounds: PeriodBounds, now: datetime) -> int | None:
    """The budget's forecast: a plan's budget by earned value (spend over the fraction done,
    the spend itself once done, the amount before any progress), any other the spend at the
    period's end if it goes on as it went so far (None before the period starts)."""
    if budget.plan_id is not None:
        earned = _earned(budget)
        if earned is None:
            return max(amount_nano(budget), spent)
        return round_half_even_div(spent * earned.denominator, earned.numerator)
    return linear_forecast(spent, bounds.start, bounds.end, now)


def linear_forecast(spent: int, start: datetime, end: datetime, now: datetime) -> int | None:
    """The spend at the period's end if it goes on as it went from `start` to `now` (None
    before the period starts)."""
    elapsed = (min(now, end) - start).total_seconds()
    if elapsed <= 0:
        return None
    length = (end - start).total_seconds()
    return spent * int(length) // max(int(elapsed), 1)


def growth_limit(multiple: str, trailing: Sequence[int]) -> int | None:
    """A day's spend strictly above this is abnormal growth (None: no history yet).

    `trailing` holds the spend of the days before, most recent first. Days before the first
    one with spend are left out of the average, so a new project's second day is compared
    with its first, not with a week of zeros; a quiet day after that counts as zero.
    """
    history = list(trailing)
    while history and history[-1] == 0:
        history.pop()
    if not history:
        return None
    num, den = Decimal(multiple).as_integer_ratio()
    return sum(history) * num // (den * len(history))


def day_number(when: datetime) -> int:
    return (when - _EPOCH).days


def day_name(days: int) -> str:
    return (_EPOCH + timedelta(days=days)).strftime("%Y%m%d")


class RegressionFacts(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What an `evaluation_regression` alert is about: a running experiment's latest value of
    a general benchmark fell more than the tolerance below the baseline's latest value (the
    rule: service/evaluations/effect.py). Values are exact decimal strings; the rework
    exposure is money (the experiment's cost after its last good checkpoint)."""

    experiment: str
    benchmark: str
    baseline: str
    value: str
    baseline_value: str
    gain: str  # value - baseline value, sign flipped when lower is better (< -tolerance)
    tolerance: str
    higher_is_better: bool
    measured_at: datetime  # the time of the regressed result
    step: int | None = None
    tokens_seen: int | None = None
    rework_exposure: str
    rework_since: datetime | None = None  # None: all of the experiment's cost


class AlertRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An alert as the alerts stream holds it. A budget alert (kinds threshold, forecast,
    growth: what the ingest script stores when a limit is crossed, `spent` filled in there)
    has the budget fields; an `evaluation_regression` alert has none of them and has
    `regression` instead (its scope names the experiment and the benchmark)."""

    id: str
    kind: AlertKind
    project: str
    budget_id: str | None = None
    budget_name: str | None = None
    scope: dict[str, str]
    period: str | None = None
    threshold_pct: int | None = None
    amount: str | None = None
    limit: str | None = None
    currency: str
    regression: RegressionFacts | None = None


def scope_labels(budget: Budget) -> dict[str, str]:
    s = budget.scope
    labels = {
        k: v
        for k, v in (
            ("stage", s.stage),
            ("category", s.category),
            ("experiment", s.experiment),
            ("owner", s.owner),
        )
        if v is not None
    }
    labels.update({f"tag.{k}": v for k, v in s.tags.items()})
    return labels


def alert_id(budget: Budget, period: str, suffix: str) -> str:
    return f"{budget.id}:{period}:{suffix}"


# What budgets read of a priced event: its labels, its time (µs since the epoch), its SKU's
# category and its cost (nano).
PricedEvent = tuple[LabelledEvent, int, str, int]
_DAY_US = 86_400_000_000


@dataclass
class _Group:
    """A batch's events that every budget sees alike: the same UTC day, and the same value of
    every label and tag some budget's scope reads."""

    event: LabelledEvent  # the first of them: its labels stand for all
    category: str
    day: int  # days since 1970-01-01 (UTC)
    cost: int
    # Each event's time (epoch µs) and cost, kept only on a day where a window budget starts
    # or ends (there the exact time decides); None elsewhere.
    timed: list[tuple[int, int]] | None


def _epoch_us(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def _groups(budgets: Sequence[Budget], priced: Sequence[PricedEvent]) -> list[_Group]:
    """The batch's events grouped for the budgets, in order of each group's first event: a
    batch's thousands of events fall into a few groups, and each budget then checks its scope
    and finds its period once per group, not once per event."""
    edges = {
        _epoch_us(edge) // _DAY_US
        for b in budgets
        for edge in (b.window_start, b.window_end)
        if b.period == "window" and edge is not None
    }
    # Only what some budget's scope reads tells events apart (`matches` reads nothing else).
    scopes = [b.scope for b in budgets]
    by_stage = any(s.stage is not None for s in scopes)
    by_experiment = any(s.experiment is not None for s in scopes)
    by_owner = any(s.owner is not None for s in scopes)
    by_category = any(s.category is not None for s in scopes)
    tag_keys = sorted({k for s in scopes for k in s.tags})
    groups: dict[tuple[object, ...], _Group] = {}
    for event, us, category, cost in priced:
        day = us // _DAY_US
        tags = event.tags
        key = (
            event.stage if by_stage else None,
            event.experiment if by_experiment else None,
            event.owner if by_owner else None,
            tuple([tags.get(k) for k in tag_keys]) if tag_keys and tags else None,
            category if by_category else None,
            day,
        )
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(event, category, day, 0, [] if day in edges else None)
        group.cost += cost
        if group.timed is not None:
            group.timed.append((us, cost))
    return list(groups.values())


def counters_for(
    budgets: Sequence[Budget], priced: Sequence[PricedEvent]
) -> dict[tuple[str, str], tuple[Budget, PeriodBounds, int]]:
    """Sum the batch's cost per (budget, period): the cost of the events in the budget's
    scope whose time falls in the period. Keys in order of budget, then of each period's
    first event."""
    sums: dict[tuple[str, str], tuple[Budget, PeriodBounds, int]] = {}

    def add(budget: Budget, bounds: PeriodBounds | None, cost: int) -> None:
        if bounds is not None:
            key = (budget.id, bounds.name)
            held = sums.get(key)
            sums[key] = (budget, bounds, (held[2] if held else 0) + cost)

    groups = _groups(budgets, priced)
    for budget in budgets:
        periods: dict[int, PeriodBounds | None] = {}
        for group in groups:
            if not matches(budget, group.event, group.category):
                continue
            if budget.period == "window" and group.timed is not None:
                for us, cost in group.timed:  # the window starts or ends this day
                    add(budget, period_of(budget, _EPOCH + timedelta(microseconds=us)), cost)
                continue
            day = group.day
            if day not in periods:
                # Any time of the day falls in the same period (a window's edges are not on it).
                periods[day] = period_of(budget, _EPOCH + timedelta(days=day))
            add(budget, periods[day], group.cost)
    return sums


def daily_for(
    budgets: Sequence[Budget], priced: Sequence[PricedEvent]
) -> dict[tuple[str, int], int]:
    """Sum the batch's cost per (budget with a growth rule, UTC day of the event)."""
    sums: dict[tuple[str, int], int] = {}
    growing = [b for b in budgets if b.growth is not None]
    if not growing:
        return sums
    groups = _groups(growing, priced)
    for budget in growing:
        for group in groups:
            if matches(budget, group.event, group.category):
                key = (budget.id, group.day)
                sums[key] = sums.get(key, 0) + group.cost
    return sums


def money(nano: int) -> str:
    return format_money(nano)
