"""The message an alert becomes: what crossed what and by how much, the top cost drivers over
the alert's period, and links back to the API."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING
from urllib.parse import quote

from costcore.money import format_money, parse_money

from ..budgets.service import AlertView, find_budget
from ..costs.report import cost_report
from .formats import AlertMessage

if TYPE_CHECKING:
    from ..stores import Stores

TOP_DRIVERS = 5
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")


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
    start, end = bounds
    last = end.date() if end.time() == datetime.min.time() else end.date() + timedelta(days=1)
    return start.date(), last


async def top_drivers(
    store: Stores, view: AlertView, days: tuple[date, date] | None
) -> list[dict[str, str]]:
    """The largest (SKU, stage) costs of the alert's project over its period, narrowed to
    the budget's stage, category, experiment and owner when it has them (tags are not kept
    in the totals, so a tag scope is not narrowed)."""
    narrow = [d for d in ("category", "experiment", "owner") if d in view.scope]
    group_by = ["sku", "stage", *narrow]
    lo, hi = days if days is not None else (None, None)
    report = await cost_report(store, view.project, lo, hi, group_by, {}, 0, 100_000)
    sums: dict[tuple[str, str], int] = {}
    for row in report.rows:
        if any(row.key.get(d) != v for d, v in view.scope.items() if d in ("stage", *narrow)):
            continue
        key = (row.key["sku"], row.key["stage"])
        sums[key] = sums.get(key, 0) + parse_money(Decimal(row.cost))
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DRIVERS]
    return [
        {"name": f"{sku} / {stage}" if stage else sku, "cost": format_money(cost)}
        for (sku, stage), cost in ranked
        if cost > 0
    ]


def _forecast(view: AlertView, bounds: tuple[datetime, datetime] | None) -> str | None:
    if view.kind != "forecast" or bounds is None:
        return None
    start, end = bounds
    elapsed = int((min(view.occurred_at, end) - start).total_seconds())
    if elapsed <= 0:
        return None
    length = int((end - start).total_seconds())
    return format_money(parse_money(Decimal(view.spent)) * length // elapsed)


async def alert_message(store: Stores, view: AlertView, public_url: str) -> AlertMessage:
    """The message for one alert: what crossed what and by how much, the top cost drivers over
    the alert's period, and links back to the API."""
    window: tuple[datetime, datetime] | None = None
    if view.period == "window":
        budget = await find_budget(store, view.project, view.budget_id)
        if budget is not None and budget.window_start and budget.window_end:
            window = (budget.window_start, budget.window_end)
    bounds = period_bounds(view.period, window)
    days = _day_range(bounds) if bounds is not None else None
    base = public_url.rstrip("/")
    project = quote(view.project, safe="")
    costs = f"{base}/v1/costs?project={project}&group_by=sku,stage"
    if days is not None:
        costs += f"&from={days[0].isoformat()}&to={days[1].isoformat()}"
    links = {
        "costs": costs,
        "alerts": f"{base}/v1/alerts?project={project}",
        "budget": f"{base}/v1/budgets/{quote(view.budget_id, safe='')}?project={project}",
    }
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
        forecast=_forecast(view, bounds),
        top_drivers=await top_drivers(store, view, days),
        occurred_at=view.occurred_at,
        links=links,
    )
