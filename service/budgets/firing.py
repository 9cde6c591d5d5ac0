"""When a budget alert fires, and from a priced batch to the counters and limit checks that
decide it.

The decision itself is made inside the ingest script (``INGEST_LUA`` in
``service/storage/scripts/ingest.lua``), atomically with the batch. `fire_limits` and `fire_batch`
are its Python reference: the same rule, written to be read and checked
(tests/integration/budgets/test_firing_reference.py drives the script and compares). The rule:

- A counter's spend *before* the batch is read first; *after* is before plus the batch's delta.
- A check of mode ``"c"`` (a threshold: "crossing") fires when the batch takes the counter from
  below its limit to at or above it (``before < limit <= after``). A batch that starts at or
  above the limit does not fire it, even if it never fired: only the batch that crosses does.
- A check of mode ``"a"`` (forecast, growth: "above") fires whenever the counter ends strictly
  above its limit (``limit < after``), whatever it was before: its limit moves (with the
  elapsed part of the period, with the trailing days' spend).
- Either fires at most once per alert id (``HSETNX`` on the fired hash). An alert id names the
  budget, the period and the limit (``bud_x:2026-01:t80``), so a threshold fires once per
  period, and a new period starts with none fired. The fired hash records *after*.
- While the project's budget decisions are held (a reprice job is queued or running for it,
  service/jobs; the ingest script reads the hold, ``Keys.budget_hold``), the counters move
  and nothing fires: the figures mix two prices until the job's rebuild, whose settling
  (`settle_budget_alerts`, service/rebuild) fires each threshold the repriced spend reached.
- Checks are tried in the order given: a budget's thresholds ascending (`new_budget` sorts
  them), then its forecast. One batch crossing several thresholds fires each, in that order,
  every one of them with the same *after*.

A budget created after spend was recorded is set up by another script (``INIT_BUDGET_LUA``,
through `BudgetStore.init_budget_counters`): there each threshold its period's spend has already
reached (``limit <= spent``) fires once, as a crossing at creation would have, unless the
project's decisions are held (then the repricing's settling fires them). That rule is not part
of this reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

# The ingest store needs the counters but not this module (which needs `Stores`): they live
# below both, in counters.py, and are re-exported here.
from .counters import BudgetCounter as BudgetCounter
from .counters import LimitCheck as LimitCheck
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

if TYPE_CHECKING:
    from ..stores import Stores


@dataclass(frozen=True)
class FiredAlert:
    """An alert the rule fires: its id, and the counter's spend after the batch (what the
    alerts stream entry carries as ``s`` and the fired hash records)."""

    alert_id: str
    spent: int


def limit_reached(check: LimitCheck, before: int, after: int) -> bool:
    """Whether a counter moving from `before` to `after` meets the check (fired or not)."""
    if check.mode == "c":
        return before < check.limit <= after
    return check.limit < after


def fire_limits(
    before: int, delta: int, checks: Sequence[LimitCheck], fired: Mapping[str, int]
) -> tuple[list[FiredAlert], dict[str, int]]:
    """The reference of the firing rule for one counter: from its spend before the batch, the
    batch's `delta` and the alerts already fired (id -> spend when fired), the alerts this
    batch fires, in order, and the fired set after it."""
    after = before + delta
    now_fired = dict(fired)
    alerts: list[FiredAlert] = []
    for check in checks:
        if limit_reached(check, before, after) and check.alert_id not in now_fired:
            now_fired[check.alert_id] = after
            alerts.append(FiredAlert(check.alert_id, after))
    return alerts, now_fired


def fire_batch(
    spend: Mapping[str, int],
    counters: Sequence[BudgetCounter],
    fired: Mapping[str, int],
    held: bool = False,
) -> tuple[list[FiredAlert], dict[str, int], dict[str, int]]:
    """The reference for a whole batch: every counter's spend before is read before any
    moves (as the script does), then each counter's checks in order. Returns the alerts
    fired, the spend after (field -> spend) and the fired set after; when `held` (the
    project's decisions are held), nothing fires. Per-period and per-day
    fields live in two hashes but never share a name ("2026-11", "2026-W48", "window" against
    "20261130"), so one mapping holds both."""
    befores = [spend.get(counter.field, 0) for counter in counters]
    new_spend = dict(spend)
    for counter in counters:
        new_spend[counter.field] = new_spend.get(counter.field, 0) + counter.delta
    alerts: list[FiredAlert] = []
    now_fired = dict(fired)
    if held:
        return alerts, new_spend, now_fired
    for counter, before in zip(counters, befores, strict=True):
        fired_now, now_fired = fire_limits(before, counter.delta, counter.checks, now_fired)
        alerts += fired_now
    return alerts, new_spend, now_fired


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
            limit = forecast_limit(budget, bounds, now, budget.forecast.min_elapsed_pct)
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
