"""Budget lifecycle over storage: create (counting what was already spent), status, alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec

from costcore.money import format_money

from ..errors import NotFound, Unavailable
from ..projects.service import project_currency
from ..ratecards.catalog import RateCards
from .firing import spend_field, threshold_checks
from .model import (
    REGRESSION_KIND,
    AlertRecord,
    Budget,
    BudgetIn,
    amount_nano,
    forecast,
    forecast_limit,
    new_budget,
    shown_period,
)
from .spend import counters_now

if TYPE_CHECKING:
    from ..stores import Stores

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_budget_decoder = msgspec.json.Decoder(Budget)
_alert_decoder = msgspec.json.Decoder(AlertRecord)


class BudgetConflict(Unavailable):
    """Too much contention on the budget's counters: a 503 to retry."""


async def create_budget(store: Stores, data: BudgetIn, currency: str) -> Budget:
    """Stores a budget and set its counters from everything already accepted in its scope
    (from the kept totals: `spend.counters_now`).

    Thresholds the spend has already passed are recorded as alerts at once (they were crossed,
    before the budget existed to watch them).
    """
    budget = new_budget(data)
    await store.budgets.put_budget(budget.project, budget.id, msgspec.json.encode(budget))
    for _ in range(10):
        counted = await counters_now(store, budget)
        if counted is None:  # a batch came while the totals were read
            continue
        last, spend, days = counted
        checks = []
        for field in spend:
            period = field.split("|", 1)[1]
            for check in threshold_checks(budget, period, currency):
                checks.append((field, check.limit, check.alert_id, check.alert_json))
        if await store.budgets.init_budget_counters(budget.project, last, spend, days, checks):
            return budget
    raise BudgetConflict("events kept arriving while the budget's counters were being set")


async def list_budgets(store: Stores, project: str) -> list[Budget]:
    return [_budget_decoder.decode(raw) for raw in await store.budgets.budgets(project)]


async def find_budget(store: Stores, project: str, budget_id: str) -> Budget | None:
    for budget in await list_budgets(store, project):
        if budget.id == budget_id:
            return budget
    return None


async def set_earned(store: Stores, project: str, earned: dict[str, str | None]) -> None:
    """Record how much of their scope is done for plan budgets (budget id -> fraction done):
    their forecasts read it. A budget no longer there is left out (a delete that lands between
    this read and the write below would be undone: plans' budgets are not deleted while the
    plan reports progress)."""
    for budget in await list_budgets(store, project):
        if budget.id in earned and budget.earned != earned[budget.id]:
            updated = msgspec.structs.replace(budget, earned=earned[budget.id])
            await store.budgets.put_budget(project, budget.id, msgspec.json.encode(updated))


class BudgetStatus(msgspec.Struct, kw_only=True):
    """Answer of `GET /v1/budgets/{budget_id}`: the spend in the current period, what remains, the
    forecast and the alerts fired."""

    budget: Budget
    period: str | None
    period_start: datetime | None
    period_end: datetime | None
    spent: str
    remaining: str
    used_pct: str
    forecast: str | None
    forecast_over_budget: bool | None
    currency: str | None
    fired: list[str]


async def budget_status(
    store: Stores, budget: Budget, currency: str | None, now: datetime | None = None
) -> BudgetStatus:
    now = now or datetime.now(UTC)
    bounds = shown_period(budget, now)
    (spent,), _ = await store.budgets.budget_counters(
        budget.project, [spend_field(budget.id, bounds.name)], []
    )
    amount = amount_nano(budget)
    expected = forecast(budget, spent, bounds, now)
    limit = forecast_limit(budget, bounds, now, 1)
    fired = sorted(
        k for k in await store.budgets.fired_alerts(budget.project) if k.startswith(budget.id + ":")
    )
    used_bp = spent * 10_000 // amount
    return BudgetStatus(
        budget=budget,
        period=bounds.name,
        period_start=bounds.start,
        period_end=bounds.end,
        spent=format_money(spent),
        remaining=format_money(max(amount - spent, 0)),
        used_pct=f"{used_bp // 100}.{used_bp % 100:02d}",
        forecast=format_money(expected) if expected is not None else None,
        forecast_over_budget=(spent > limit) if limit is not None else None,
        currency=currency,
        fired=fired,
    )


class AlertView(AlertRecord, kw_only=True, omit_defaults=True):
    """An alert as recorded, and its stream cursor. A budget alert (threshold, forecast,
    growth) has the budget fields and the spend when it fired (`spent`, `over_by`); an
    `evaluation_regression` alert has `regression` instead, its scope naming the experiment
    and the benchmark."""

    spent: str | None = None
    over_by: str | None = None
    occurred_at: datetime
    cursor: str


def alert_view(entry_id: str, fields: dict[str, bytes]) -> AlertView:
    record = _alert_decoder.decode(fields["a"])
    ms = int(entry_id.split("-", 1)[0])
    data: dict[str, Any] = msgspec.structs.asdict(record)
    data.update(occurred_at=_EPOCH + timedelta(milliseconds=ms), cursor=entry_id)
    if record.kind != REGRESSION_KIND:  # a budget alert: the spend when it fired
        if record.limit is None:
            raise ValueError(f"budget alert {record.id!r} has no limit")
        spent = int(fields["s"])
        limit = int(Decimal(record.limit).scaleb(9))
        data.update(spent=format_money(spent), over_by=format_money(max(spent - limit, 0)))
    elif record.regression is None:
        raise ValueError(f"regression alert {record.id!r} has no regression facts")
    return msgspec.convert(data, AlertView)


def _stream_ms(when: datetime) -> str:
    return str(max(0, int(when.timestamp() * 1000)))


async def list_alerts(
    store: Stores,
    project: str,
    kind: str | None,
    since: datetime | None,
    until: datetime | None,
    after: str | None,
    limit: int,
) -> list[AlertView]:
    # Stream ids are milliseconds since the epoch: earlier bounds mean "from the start".
    start = "(" + after if after else (_stream_ms(since) if since else "-")
    end = _stream_ms(until) if until else "+"
    views: list[AlertView] = []
    while len(views) < limit:
        entries = await store.budgets.alerts(project, start, end, count=max(limit, 100))
        if not entries:
            break
        for entry_id, fields in entries:
            view = alert_view(entry_id, fields)
            if kind is None or view.kind == kind:
                views.append(view)
                if len(views) == limit:
                    break
        start = "(" + entries[-1][0]
    return views


class BudgetNotFound(NotFound):
    def __init__(self, project: str, budget_id: str) -> None:
        super().__init__(project, budget_id)
        self.project = project
        self.budget_id = budget_id

    def problem_detail(self) -> str:
        return f"no budget {self.budget_id!r} in {self.project!r}"


async def create_project_budget(store: Stores, rate_cards: RateCards, data: BudgetIn) -> Budget:
    """`create_budget` in the currency of the budget's project."""
    currency = await project_currency(store, rate_cards, data.project)
    return await create_budget(store, data, currency)


async def project_budget_status(
    store: Stores, rate_cards: RateCards, project: str, budget_id: str
) -> BudgetStatus:
    """Spend against one of the project's budgets now. Raises BudgetNotFound."""
    budget = await find_budget(store, project, budget_id)
    if budget is None:
        raise BudgetNotFound(project, budget_id)
    return await budget_status(store, budget, await project_currency(store, rate_cards, project))


async def delete_budget(store: Stores, project: str, budget_id: str) -> None:
    """Raises BudgetNotFound."""
    if not await store.budgets.delete_budget(project, budget_id):
        raise BudgetNotFound(project, budget_id)
