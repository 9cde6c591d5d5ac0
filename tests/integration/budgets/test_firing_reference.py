"""The ingest script fires budget alerts exactly as the Python reference of the rule says
(`fire_batch` in service/budgets/firing.py): random budgets (amount, thresholds, a forecast
limit that moves from batch to batch), a random starting spend and fired set, and random
batches over two periods, posted through the real script one after another, some while the
project's budget decisions are held (a repricing queued); after each batch the alerts stream,
the fired set and the counters equal the reference's."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.budgets.firing import (
    BudgetCounter,
    FiredAlert,
    LimitCheck,
    fire_batch,
    spend_field,
    threshold_checks,
)
from trainledger.budgets.model import Budget, BudgetIn, alert_id, new_budget
from trainledger.ingest.store import IngestPlan
from trainledger.storage.keys import Keys, seen_shard
from trainledger.stores import Stores

from costcore.money import format_money

PERIODS = ("2026-01", "2026-02")
_names = itertools.count()


@dataclass(frozen=True)
class Case:
    amount: int  # nano
    thresholds: list[int]
    start_spend: list[int]  # per period: the spend before the first batch
    # Alerts already fired before the first batch (a budget created above some thresholds,
    # a batch before): (period index, threshold index or None for the forecast) -> spend.
    start_fired: dict[tuple[int, int | None], int]
    # Per batch, per counter: (period index, delta nano, forecast limit as a percentage of
    # the amount or None). The forecast's limit moves with time, so each batch has its own.
    batches: list[list[tuple[int, int, int | None]]]
    held: list[bool]  # per batch: whether the project's budget decisions are held


@st.composite
def cases(draw: st.DrawFn) -> Case:
    # Amounts in whole hundreds of nano as often as not: then a percentage of the amount is
    # exact, and spends land right on a limit (where "crossing" and "above" differ).
    amount = draw(st.integers(1, 10**13) | st.integers(1, 10**11).map(lambda x: 100 * x))
    thresholds = draw(st.lists(st.integers(1, 1000), max_size=10, unique=True))
    pct = st.integers(0, 1200)
    if thresholds:  # right on a threshold, or from one threshold to another
        steps = [a - b for a in thresholds for b in thresholds if a > b]
        pct = pct | st.sampled_from(thresholds) | st.sampled_from(steps or thresholds)
    around = pct.map(lambda p: amount * p // 100)
    start_spend = draw(st.lists(st.just(0) | around, min_size=len(PERIODS), max_size=len(PERIODS)))
    slots = [(p, i) for p in range(len(PERIODS)) for i in [*range(len(thresholds)), None]]
    start_fired = draw(st.dictionaries(st.sampled_from(slots), around, max_size=4))
    # Deltas around the amount (they cross thresholds), zero, and now and then huge ones
    # (beyond int64 over a few batches: the counters' high limbs).
    delta = st.one_of(around, st.integers(0, amount), st.just(0), st.integers(10**17, 4 * 10**18))
    counter = st.tuples(st.sampled_from(range(len(PERIODS))), delta, st.none() | pct)
    # One counter per period in a batch, as budget_counters makes them.
    batch = st.lists(counter, min_size=1, max_size=2, unique_by=lambda t: t[0])
    batches = draw(st.lists(batch, min_size=1, max_size=8))
    held = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return Case(amount, thresholds, start_spend, start_fired, batches, held)


def budget_for(project: str, case: Case) -> Budget:
    data = BudgetIn(
        project=project, name="b", amount=format_money(case.amount), thresholds=case.thresholds
    )
    return new_budget(data)


def forecast_id(budget: Budget, period: str) -> str:
    return alert_id(budget, period, "forecast")


def checks_for(
    budget: Budget, period: str, case: Case, forecast_pct: int | None
) -> list[LimitCheck]:
    checks = threshold_checks(budget, period, "USD")
    if forecast_pct is not None:
        ident = forecast_id(budget, period)
        limit = case.amount * forecast_pct // 100
        checks.append(LimitCheck("a", limit, ident, b'{"id":"%s"}' % ident.encode()))
    return checks


async def start_state(
    store: Stores, budget: Budget, case: Case
) -> tuple[dict[str, int], dict[str, int]]:
    """Put the case's starting spend (through the script: a batch with no checks) and fired
    set (written as the script writes it) in place; returns them."""
    counters = [
        BudgetCounter(False, spend_field(budget.id, period), spent, [])
        for period, spent in zip(PERIODS, case.start_spend, strict=True)
    ]
    assert (await store.ingest.apply_batch(plan(budget.project, "start", counters))).status == 0
    fired: dict[str, int] = {}
    for (period_index, threshold_index), spent in case.start_fired.items():
        period = PERIODS[period_index]
        if threshold_index is None:
            fired[forecast_id(budget, period)] = spent
        else:
            fired[threshold_checks(budget, period, "USD")[threshold_index].alert_id] = spent
    if fired:
        await store.connection.client.hset(Keys.budget_fired(budget.project), mapping=fired)
    spend = {spend_field(budget.id, p): s for p, s in zip(PERIODS, case.start_spend, strict=True)}
    return spend, fired


def plan(project: str, event_id: str, counters: list[BudgetCounter]) -> IngestPlan:
    return IngestPlan(
        project=project,
        event_ids=[event_id],
        seen_shards=[seen_shard(event_id)],
        expiry_days=[99_999],
        tier_checks=[],
        increments=[],
        log_blob=b"entry",
        currency="USD",
        rate_card="default",
        duplicates_seen=0,
        log_min_id="",
        counters=counters,
        budgets_rev="0",
    )


async def check_case(store: Stores, case: Case) -> None:
    budget = budget_for(f"firing-{next(_names)}", case)
    project = budget.project
    spend, fired = await start_state(store, budget, case)
    json_of = {}
    expected: list[FiredAlert] = []
    hold = Keys.budget_hold(project)
    for n, (batch, held) in enumerate(zip(case.batches, case.held, strict=True)):
        if held:
            await store.connection.client.hset(hold, "job_x", "1")
        else:
            await store.connection.client.delete(hold)
        counters = []
        for period_index, delta, forecast_pct in batch:
            period = PERIODS[period_index]
            checks = checks_for(budget, period, case, forecast_pct)
            json_of.update({c.alert_id: c.alert_json for c in checks})
            counters.append(BudgetCounter(False, spend_field(budget.id, period), delta, checks))
        alerts, spend, fired = fire_batch(spend, counters, fired, held)
        expected += alerts

        outcome = await store.ingest.apply_batch(plan(project, f"e{n}", counters))
        assert outcome.status == 0, outcome

        entries = await store.budgets.alerts(project, count=10_000)
        got = [(f["id"].decode(), int(f["s"]), f["a"]) for _, f in entries]
        assert got == [(a.alert_id, a.spent, json_of[a.alert_id]) for a in expected], (n, batch)
        assert await store.budgets.fired_alerts(project) == fired
        fields = sorted(spend)
        values, _ = await store.budgets.budget_counters(project, fields, [])
        assert dict(zip(fields, values, strict=True)) == spend


async def test_the_ingest_script_fires_as_the_reference_says(store: Stores) -> None:
    await store.ingest.learn_features()
    loop = asyncio.get_running_loop()

    # Hypothesis drives a plain function; each example runs on this test's loop (where the
    # store's connections live), from the thread the function runs in.
    @settings(max_examples=60, deadline=None, database=None)
    @given(cases())
    def agrees(case: Case) -> None:
        asyncio.run_coroutine_threadsafe(check_case(store, case), loop).result(timeout=60)

    await asyncio.to_thread(agrees)
