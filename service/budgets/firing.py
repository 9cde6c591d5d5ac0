"""From a priced batch to the budget counters and limit checks the ingest script applies."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from ..ingest.store import BudgetCounter, LimitCheck
from ..stores import Stores
from .model import (
    AlertRecord,
    Budget,
    PricedEvent,
    alert_id,
    amount_nano,
    counters_for,
    daily_for,
    day_name,
    forecast_limit,
    growth_limit,
    money,
    scope_labels,
    threshold_limit,
)


def spend_field(budget_id: str, period: str) -> str:
    return f"{budget_id}|{period}"


def day_field(budget_id: str, day: int) -> str:
    return f"{budget_id}|{day_name(day)}"


def _record(
    budget: Budget, kind: str, period: str, limit: int, currency: str, pct: int | None, suffix: str
) -> tuple[str, bytes]:
    ident = alert_id(budget, period, suffix)
    record = AlertRecord(
        id=ident,
        kind=kind,  # type: ignore[arg-type]
        project=budget.project,
        budget_id=budget.id,
        budget_name=budget.name,
        scope=scope_labels(budget),
        period=period,
        threshold_pct=pct,
        amount=budget.amount,
        limit=money(limit),
        currency=currency,
    )
    return ident, msgspec.json.encode(record)


def threshold_checks(budget: Budget, period: str, currency: str) -> list[LimitCheck]:
    amount = amount_nano(budget)
    checks = []
    for pct in budget.thresholds:
        limit = threshold_limit(amount, pct)
        ident, body = _record(budget, "threshold", period, limit, currency, pct, f"t{pct}")
        checks.append(LimitCheck("c", limit, ident, body))
    return checks


async def budget_counters(
    store: Stores,
    project: str,
    budgets: Sequence[Budget],
    priced: Sequence[PricedEvent],
    currency: str,
    now: datetime,
) -> list[BudgetCounter]:
    """The counters one batch moves, with every limit that could be crossed by it."""
    if not budgets:
        return []
    counters: list[BudgetCounter] = []
    for (budget_id, period), (budget, bounds, delta) in counters_for(budgets, priced).items():
        if delta == 0:
            continue
        checks = threshold_checks(budget, period, currency)
        if budget.forecast is not None and bounds.start <= now < bounds.end:
            limit = forecast_limit(
                amount_nano(budget), bounds, now, budget.forecast.min_elapsed_pct
            )
            if limit is not None:
                ident, body = _record(budget, "forecast", period, limit, currency, None, "forecast")
                checks.append(LimitCheck("a", limit, ident, body))
        counters.append(BudgetCounter(False, spend_field(budget_id, period), delta, checks))

    daily = {k: v for k, v in daily_for(budgets, priced).items() if v}
    if daily:
        by_id = {b.id: b for b in budgets}
        wanted: list[str] = []
        for budget_id, day in daily:
            rule = by_id[budget_id].growth
            assert rule is not None
            wanted += [day_field(budget_id, day - k) for k in range(1, rule.trailing_days + 1)]
        _, values = await store.budgets.budget_counters(project, [], wanted)
        history = dict(zip(wanted, values, strict=True))
        for (budget_id, day), delta in daily.items():
            budget = by_id[budget_id]
            rule = budget.growth
            assert rule is not None
            # The batch's own spend on earlier days counts as history too, so a batch that
            # spans days raises the same growth alerts as its days posted one by one in order.
            trailing = [
                history[day_field(budget_id, day - k)] + daily.get((budget_id, day - k), 0)
                for k in range(1, rule.trailing_days + 1)
            ]
            limit = growth_limit(rule.multiple, trailing)
            checks = []
            if limit is not None:
                ident, body = _record(
                    budget, "growth", day_name(day), limit, currency, None, "growth"
                )
                checks.append(LimitCheck("a", limit, ident, body))
            counters.append(BudgetCounter(True, day_field(budget_id, day), delta, checks))
    return counters
