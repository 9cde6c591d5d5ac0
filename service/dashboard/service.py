"""The dashboard's figures: the same domain calls the JSON routes make, for one page."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING

from ..budgets.model import Budget, shown_period
from ..budgets.service import budget_status, list_budgets
from ..budgets.spend import spend_by_day
from ..costs.query import QueryError
from ..costs.report import cost_report
from ..costs.summary import cost_summary
from ..errors import Invalid
from ..evaluations.effect import ReportFilter
from ..evaluations.service import cost_effect_report
from ..plans.service import list_plans, plan_status
from ..projects.service import project_currency
from ..ratecards.catalog import RateCards
from ..waste.service import waste_report
from .page import BudgetPanel, DashboardData, PlanPanel
from .series import burn_down_of_days

if TYPE_CHECKING:
    from ..stores import Stores

DEFAULT_DAYS = 30
MAX_DAYS = 366
TOP_EXPERIMENTS = 10
MAX_PLANS = 10


class DashboardQueryError(Invalid, ValueError):
    """The page cannot be drawn for these parameters (a 400 naming the parameter)."""

    status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.args = (reason,)


def day_range(from_day: date | None, to_day: date | None, today: date) -> tuple[date, date]:
    """The days shown: both ends included; by default the `DEFAULT_DAYS` up to today."""
    last = to_day or today
    first = from_day or last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise DashboardQueryError("from", "must not be after 'to'")
    if (last - first).days + 1 > MAX_DAYS:
        raise DashboardQueryError("from", f"show at most {MAX_DAYS} days at once")
    return first, last


async def dashboard_data(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    from_day: date | None,
    to_day: date | None,
    now: datetime,
) -> DashboardData:
    """The page's figures over [from_day, to_day]. Raises DashboardQueryError."""
    first, last = day_range(from_day, to_day, now.date())
    return await _gather(store, rate_cards, project, first, last, now)


async def _gather(
    store: Stores, rate_cards: RateCards, project: str, first: date, last: date, now: datetime
) -> DashboardData:
    end = last + timedelta(days=1)  # the cost queries take `to` exclusive
    try:
        summary = await cost_summary(store, project, first, end)
        by_stage = await cost_report(
            store, project, first, end, ["stage"], {}, 0, 10_000, granularity="day"
        )
        by_category = await cost_report(
            store, project, first, end, ["category"], {}, 0, 10_000, granularity="day"
        )
        experiments = await cost_report(
            store, project, first, end, ["experiment"], {}, 0, TOP_EXPERIMENTS + 1,
            top=TOP_EXPERIMENTS,
        )  # fmt: skip
    except QueryError as exc:
        raise DashboardQueryError(exc.field, exc.reason) from exc
    currency = await project_currency(store, rate_cards, project)
    panels = await _budget_panels(store, project, currency, now, _midnight(end))
    records = sorted(await list_plans(store, project), key=lambda r: r.created_at, reverse=True)
    plans = [
        PlanPanel(record.plan.name, await plan_status(store, record, now))
        for record in records[:MAX_PLANS]
    ]
    try:
        waste = await waste_report(store, rate_cards, project, first, last, now)
    except ValueError as exc:
        raise DashboardQueryError("from", str(exc)) from exc
    days = ReportFilter(time_from=_midnight(first), time_to=_midnight(end))
    effect = await cost_effect_report(store, rate_cards, project, days)
    return DashboardData(
        project=project,
        currency=summary.currency or currency,
        first_day=first,
        last_day=last,
        now=now,
        summary=summary,
        by_stage=by_stage,
        by_category=by_category,
        experiments=experiments,
        budgets=panels,
        plans=plans,
        waste=waste,
        effect=effect,
    )


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _shown_at(budget: Budget, now: datetime, page_end: datetime) -> datetime:
    """When a budget's panel is read: now, unless its current period starts after the page's
    last day (a page of last month); then the end of the period holding that day, so that a
    monthly budget never shows a month outside the page's days (and a past one whole)."""
    if shown_period(budget, now).start < page_end:
        return now
    past = shown_period(budget, page_end - timedelta(microseconds=1))
    return min(now, past.end - timedelta(microseconds=1))


async def _budget_panels(
    store: Stores, project: str, currency: str, now: datetime, page_end: datetime
) -> list[BudgetPanel]:
    budgets = await list_budgets(store, project)
    panels: list[BudgetPanel] = []
    if not budgets:
        return panels
    # The burn-down needs spend per day within each budget's scope: the totals hold it
    # (`budgets.spend`), read for the period's days only.
    for budget in budgets:
        at = _shown_at(budget, now, page_end)
        status = await budget_status(store, budget, currency, at)
        assert status.period_start is not None and status.period_end is not None
        by_day = await spend_by_day(store, budget, status.period_start, status.period_end)
        points = burn_down_of_days(status.period_start, status.period_end, at, by_day)
        panels.append(BudgetPanel(status, points))
    return panels
