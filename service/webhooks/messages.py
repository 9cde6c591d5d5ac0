"""The message an alert becomes: what crossed what and by how much, the forecast, the top
cost drivers of the budget's scope over the alert's period, and links to the dashboard view
that explains it and back to the API."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from costcore.money import format_money, parse_money

from ..budgets.model import REGRESSION_KIND, Budget, PeriodBounds, forecast, linear_forecast
from ..budgets.service import AlertView, find_budget
from ..costs.report import cost_report
from .formats.message import AlertMessage, CrossedThreshold, Message, RegressionMessage

if TYPE_CHECKING:
    from ..stores import Stores

TOP_DRIVERS = 3
DRIVER_DIMENSIONS = ("stage", "experiment", "sku")
DASHBOARD_MAX_DAYS = 366  # the most the dashboard shows at once (dashboard/service.py)
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
_SCOPED = ("stage", "category", "experiment", "owner")  # scope labels the totals keep


def period_bounds(
    period: str, window: tuple[datetime, datetime] | None
) -> tuple[datetime, datetime] | None:
    """The time range an alert's period names: "2026-11", "2026-W48", "20261130" (a day, for
    growth alerts) or "window" (the budget's own window)."""
    if m := re.fullmatch(r"(\d{4})-(\d{2})", period):
        start = datetime(int(m[1]), int(m[2]), 1, tzinfo=UTC)
        return start, (start + timedelta(days=32)).replace(day=1)
    if m := re.fullmatch(r"(\d{4})-W(\d{2})", period):
        day = date.fromisocalendar(int(m[1]), int(m[2]), 1)
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return start, start + timedelta(days=7)
    if re.fullmatch(r"\d{8}", period):
        start = datetime.strptime(period, "%Y%m%d").replace(tzinfo=UTC)
        return start, start + timedelta(days=1)
    if period == "window":
        return window
    return None


def _day_range(bounds: tuple[datetime, datetime]) -> tuple[date, date]:
    """The period as days, `to` exclusive (as the cost queries take it)."""
    start, end = bounds
    last = end.date() if end.time() == datetime.min.time() else end.date() + timedelta(days=1)
    return start.date(), last


def driver_name(sku: str, stage: str, experiment: str) -> str:
    return " / ".join(part for part in (sku, stage, experiment) if part)


async def top_drivers(
    store: Stores, view: AlertView, days: tuple[date, date] | None
) -> list[dict[str, str]]:
    """The largest (stage, experiment, SKU) costs of the alert's project over its period,
    narrowed to the budget's stage, category, experiment and owner when it has them (tags
    are not kept in the totals, so a tag scope is not narrowed). Costs stay exact here."""
    narrow = [d for d in ("category", "owner") if d in view.scope]
    lo, hi = days if days is not None else (None, None)
    group_by = ["sku", "stage", "experiment", *narrow]
    report = await cost_report(store, view.project, lo, hi, group_by, {}, 0, 100_000)
    sums: dict[tuple[str, str, str], int] = {}
    for row in report.rows:
        if any(row.key.get(d) != v for d, v in view.scope.items() if d in _SCOPED):
            continue
        key = (row.key["stage"] or "", row.key["experiment"] or "", row.key["sku"] or "")
        sums[key] = sums.get(key, 0) + parse_money(Decimal(row.cost))
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DRIVERS]
    return [
        {
            "name": driver_name(sku, stage, experiment),
            "stage": stage,
            "experiment": experiment,
            "sku": sku,
            "cost": format_money(cost),
        }
        for (stage, experiment, sku), cost in ranked
        if cost > 0
    ]


def _forecast(
    view: AlertView, bounds: tuple[datetime, datetime] | None, budget: Budget | None
) -> str | None:
    """The budget's forecast by the rule its status shows (`budgets.model.forecast`: a plan's
    window budget by the plan's progress, else linear to the period's end), at the alert's
    spend and time (None for growth alerts, whose period is one day)."""
    if view.kind not in ("threshold", "forecast") or bounds is None or view.spent is None:
        return None
    spent = parse_money(Decimal(view.spent))
    if budget is not None and view.period is not None:
        value = forecast(budget, spent, PeriodBounds(view.period, *bounds), view.occurred_at)
    else:
        value = linear_forecast(spent, *bounds, view.occurred_at)
    return format_money(value) if value is not None else None


def dashboard_link(base: str, project: str, days: tuple[date, date] | None, on: date) -> str:
    """The dashboard page of the project over the alert's period up to the day it fired
    (both ends inclusive there; at most the days the dashboard shows at once)."""
    url = f"{base}/ui/{quote(project, safe='')}"
    if days is None:
        return url
    first, after = days
    last = min(max(on, first), after - timedelta(days=1))
    first = max(first, last - timedelta(days=DASHBOARD_MAX_DAYS - 1))
    return url + "?" + urlencode({"from": first.isoformat(), "to": last.isoformat()})


def _links(base: str, view: AlertView, days: tuple[date, date] | None) -> dict[str, str]:
    project = quote(view.project, safe="")
    costs = f"{base}/v1/costs?project={project}&group_by=sku,stage"
    if days is not None:
        costs += f"&from={days[0].isoformat()}&to={days[1].isoformat()}"
    return {
        "dashboard": dashboard_link(base, view.project, days, view.occurred_at.date()),
        "costs": costs,
        "alerts": f"{base}/v1/alerts?project={project}",
        "budget": f"{base}/v1/budgets/{quote(view.budget_id or '', safe='')}?project={project}",
    }


def _regression_links(base: str, view: AlertView) -> dict[str, str]:
    project = quote(view.project, safe="")
    experiment = quote(view.scope.get("experiment", ""), safe="")
    return {
        "dashboard": dashboard_link(base, view.project, None, view.occurred_at.date())
        + "#cost-effect",
        "report": f"{base}/v1/reports/cost-effect?project={project}",
        "evaluations": f"{base}/v1/evaluations?project={project}&experiment={experiment}",
        "alerts": f"{base}/v1/alerts?project={project}&kind={REGRESSION_KIND}",
    }


async def regression_message(store: Stores, view: AlertView, public_url: str) -> RegressionMessage:
    """The message for an evaluation regression alert: its facts as recorded when it fired,
    the experiment's top cost drivers (over all time) and links to the dashboard's
    cost-effect section and the API."""
    assert view.regression is not None  # alert_view checks it
    currency = view.currency if _CURRENCY_RE.match(view.currency) else "XXX"
    return RegressionMessage(
        id=view.id,
        kind=view.kind,
        project=view.project,
        scope=view.scope,
        currency=currency,
        regression=view.regression,
        top_drivers=await top_drivers(store, view, None),
        occurred_at=view.occurred_at,
        links=_regression_links(public_url.rstrip("/"), view),
    )


async def alert_message(
    store: Stores, view: AlertView, public_url: str, also: Sequence[AlertView] = ()
) -> Message:
    """The message for one alert (and `also`, the lower thresholds of the same budget that
    the same batch crossed, listed in it): what crossed what and by how much, the forecast,
    the top cost drivers over the alert's period, and links to the dashboard and the API.
    An evaluation regression alert: `regression_message`."""
    if view.kind == REGRESSION_KIND:
        return await regression_message(store, view, public_url)
    assert view.period is not None and view.budget_id is not None  # a budget alert
    assert view.amount is not None and view.spent is not None and view.limit is not None
    assert view.over_by is not None
    window: tuple[datetime, datetime] | None = None
    budget: Budget | None = None
    if view.period == "window":
        budget = await find_budget(store, view.project, view.budget_id)
        if budget is not None and budget.window_start and budget.window_end:
            window = (budget.window_start, budget.window_end)
    bounds = period_bounds(view.period, window)
    days = _day_range(bounds) if bounds is not None else None
    currency = view.currency if _CURRENCY_RE.match(view.currency) else "XXX"  # ISO: no currency
    return AlertMessage(
        id=view.id,
        kind=view.kind,
        project=view.project,
        budget_id=view.budget_id,
        budget_name=view.budget_name,
        scope=view.scope,
        period=view.period,
        threshold_pct=view.threshold_pct,
        amount=view.amount,
        spent=view.spent,
        limit=view.limit,
        over_by=view.over_by,
        currency=currency,
        forecast=_forecast(view, bounds, budget),
        top_drivers=await top_drivers(store, view, days),
        occurred_at=view.occurred_at,
        links=_links(public_url.rstrip("/"), view, days),
        also_crossed=[
            CrossedThreshold(id=a.id, threshold_pct=a.threshold_pct, limit=a.limit or "0")
            for a in sorted(also, key=lambda a: (a.threshold_pct or 0, a.id), reverse=True)
        ],
    )


_SAMPLE_DRIVERS = (
    ("pretrain", "exp-42", "gpu.h100.hour", "8160.00"),
    ("pretrain", "exp-42", "storage.gb.month", "1402.5"),
    ("pretrain", "", "network.egress.gb", "750.00"),
)


def sample_message(project: str | None, public_url: str, now: datetime) -> AlertMessage:
    """What `POST /v1/webhooks/{id}/test` sends: a made-up alert, marked `test`, shaped as a
    real one (a batch that crossed 50, 80 and 100 % of a budget), for a first look at how
    the endpoint shows it. Its id is new each time, so a receiver that drops repeated ids
    shows every test."""
    project = project or "sample-project"
    month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    after = (month + timedelta(days=32)).replace(day=1)
    days = (month.date(), after.date())
    base = public_url.rstrip("/")
    quoted = quote(project, safe="")
    budget_id = "bud_sample"
    period = month.strftime("%Y-%m")
    alert_id = f"test_{secrets.token_hex(8)}"
    return AlertMessage(
        id=alert_id,
        kind="threshold",
        project=project,
        budget_id=budget_id,
        budget_name="sample monthly budget",
        scope={"stage": "pretrain"},
        period=period,
        threshold_pct=100,
        amount="10000.00",
        spent="10312.5",
        limit="10000.00",
        over_by="312.50",
        currency="USD",
        forecast=format_money(
            linear_forecast(10_312_500_000_000, month, after, now) or 10_312_500_000_000
        ),
        top_drivers=[
            {
                "name": driver_name(sku, stage, experiment),
                "stage": stage,
                "experiment": experiment,
                "sku": sku,
                "cost": cost,
            }
            for stage, experiment, sku, cost in _SAMPLE_DRIVERS
        ],
        occurred_at=now,
        links={
            "dashboard": dashboard_link(base, project, days, now.date()),
            "costs": f"{base}/v1/costs?project={quoted}&group_by=sku,stage",
            "alerts": f"{base}/v1/alerts?project={quoted}",
            "budget": f"{base}/v1/budgets/{budget_id}?project={quoted}",
        },
        also_crossed=[
            CrossedThreshold(id=f"{alert_id}_80", threshold_pct=80, limit="8000.00"),
            CrossedThreshold(id=f"{alert_id}_50", threshold_pct=50, limit="5000.00"),
        ],
        test=True,
    )
