"""A new budget's counters and the dashboard's burn-down come from the kept totals
(service/budgets/spend.py), and equal what reading the whole log gave, on randomized events:
every kind of period (a window with edges inside days), scopes on each label and on tags,
growth rules."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import msgspec
from trainledger.budgets.firing import day_field, spend_field
from trainledger.budgets.model import Budget, BudgetIn, counters_for, daily_for, new_budget
from trainledger.budgets.spend import counters_now, spend_by_day
from trainledger.dashboard.series import burn_down_of_days, burn_down_points
from trainledger.ledger.eventlog import read_log
from trainledger.stores import Stores

from tests.conftest import event
from tests.integration.export.test_focus import ingest

START = datetime(2025, 2, 24, tzinfo=UTC)
SKUS = ["gpu.h100.hour", "storage.hot.gb_day", "network.cross_region.gb"]


async def _fill(store: Stores, rng: random.Random, batches: int) -> None:
    k = 0
    for _ in range(batches):
        base = START + timedelta(hours=rng.randrange(0, 24 * 40))
        batch = []
        for _ in range(rng.randint(1, 10)):
            k += 1
            when = base + timedelta(minutes=rng.randrange(0, 60 * rng.choice([1, 1, 48])))
            batch.append(
                event(
                    f"e{k}",
                    f"{rng.randint(0, 50)}.{rng.randint(0, 99):02d}",
                    rng.choice(SKUS),
                    time=when.isoformat(),
                    stage=rng.choice(["pretrain", "post_train", "eval"]),
                    experiment=rng.choice(["a", "b", ""]),
                    owner=rng.choice(["ann", "bo"]),
                    tags=rng.choice([{}, {"team": "x"}, {"team": "y", "run": "1"}]),
                )
            )
        await ingest(store, batch)


def _budgets() -> list[Budget]:
    window = {
        "period": "window",
        "window_start": "2025-03-03T07:30:00Z",
        "window_end": "2025-03-19T16:00:00Z",
    }
    same_day = {
        "period": "window",
        "window_start": "2025-03-05T01:00:00Z",
        "window_end": "2025-03-05T13:00:00Z",
    }
    shapes: list[dict[str, object]] = [
        {},
        {"period": "weekly", "scope": {"stage": "post_train"}, "growth": {}},
        {"scope": {"experiment": "a", "owner": "bo"}},
        {"scope": {"category": "storage", "stage": "pretrain"}, "growth": {}},
        {"scope": {"experiment": ""}},
        {"scope": {"tags": {"team": "y"}}},
        {**window, "scope": {"owner": "ann"}, "growth": {}},
        {**window, "scope": {"tags": {"team": "x"}}},
        same_day,
    ]
    return [
        new_budget(msgspec.convert({"project": "llm", "name": "b", "amount": "5", **s}, BudgetIn))
        for s in shapes
    ]


async def _reference(store: Stores, budget: Budget) -> tuple[dict[str, int], dict[str, int]]:
    """The counters as create_budget counted them before: every logged event."""
    last = await store.ledger.last_log_entry("llm")
    spend: dict[str, int] = {}
    days: dict[str, int] = {}
    async for _, rows in read_log(store, "llm", last):
        batch = [(row.event("llm"), row.epoch_us, row.category, row.cost_nano) for row in rows]
        for (_, period), (_, _, delta) in counters_for([budget], batch).items():
            field = spend_field(budget.id, period)
            spend[field] = spend.get(field, 0) + delta
        for (_, day), delta in daily_for([budget], batch).items():
            field = day_field(budget.id, day)
            days[field] = days.get(field, 0) + delta
    return spend, days


async def test_budget_counters_from_totals_equal_the_log_count(store: Stores) -> None:
    rng = random.Random(26)
    await _fill(store, rng, 30)
    periods = 0
    for budget in _budgets():
        counted = await counters_now(store, budget)
        assert counted is not None
        last, spend, days = counted
        assert last == await store.ledger.last_log_entry("llm")
        assert (spend, days) == await _reference(store, budget), budget.scope
        periods += sum(1 for v in spend.values() if v)
        if budget.growth is not None:
            assert days
    assert periods > 10


async def test_burn_down_from_totals_equals_the_log_one(store: Stores) -> None:
    rng = random.Random(5)
    await _fill(store, rng, 20)
    last = await store.ledger.last_log_entry("llm")
    priced = [
        (row.event("llm"), row.category, row.cost_nano)
        async for _, rows in read_log(store, "llm", last)
        for row in rows
    ]
    now = datetime(2025, 3, 17, 9, tzinfo=UTC)
    for budget in _budgets():
        if budget.period == "window":
            assert budget.window_start is not None and budget.window_end is not None
            start, end = budget.window_start, budget.window_end
        else:
            start = datetime(2025, 3, 1, tzinfo=UTC) if budget.period == "monthly" else now
            start = start - timedelta(days=start.weekday()) if budget.period == "weekly" else start
            end = start + timedelta(days=31 if budget.period == "monthly" else 7)
        by_day = await spend_by_day(store, budget, start, end)
        got = burn_down_of_days(start, end, now, by_day)
        assert got == burn_down_points(budget, start, end, now, priced), budget.scope
