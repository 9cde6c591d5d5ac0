"""The budget firing rule's Python reference (service/budgets/firing.py), by hand-worked cases.
tests/integration/budgets/test_firing_reference.py checks the ingest script against it."""

from __future__ import annotations

from trainledger.budgets.firing import (
    BudgetCounter,
    FiredAlert,
    LimitCheck,
    fire_batch,
    fire_limits,
)


def crossing(limit: int, ident: str) -> LimitCheck:
    return LimitCheck("c", limit, ident, b"{}")


def above(limit: int, ident: str) -> LimitCheck:
    return LimitCheck("a", limit, ident, b"{}")


THRESHOLDS = [crossing(50, "t50"), crossing(80, "t80"), crossing(100, "t100")]


def test_a_batch_crossing_several_thresholds_fires_each_in_order_with_one_spend() -> None:
    alerts, fired = fire_limits(40, 70, THRESHOLDS, {})
    assert alerts == [FiredAlert("t50", 110), FiredAlert("t80", 110), FiredAlert("t100", 110)]
    assert fired == {"t50": 110, "t80": 110, "t100": 110}


def test_reaching_the_limit_exactly_crosses_it() -> None:
    assert fire_limits(0, 50, THRESHOLDS, {})[0] == [FiredAlert("t50", 50)]


def test_a_crossing_fires_only_in_the_batch_that_crosses() -> None:
    # Already at or above 50 before the batch (e.g. its alert was fired and the fired set
    # lost, or the budget was created above it): nothing fires for 50.
    assert fire_limits(50, 10, THRESHOLDS, {})[0] == []
    assert fire_limits(60, 0, THRESHOLDS, {})[0] == []


def test_each_alert_id_fires_once() -> None:
    alerts, fired = fire_limits(0, 60, THRESHOLDS, {"t50": 55})
    assert alerts == [] and fired == {"t50": 55}  # the recorded spend stays the first one


def test_above_fires_whenever_the_counter_ends_strictly_above_until_fired() -> None:
    check = [above(100, "forecast")]
    assert fire_limits(0, 100, check, {})[0] == []  # at the limit: not above
    assert fire_limits(150, 0, check, {})[0] == [FiredAlert("forecast", 150)]  # no crossing
    assert fire_limits(150, 10, check, {"forecast": 150})[0] == []


def test_a_batch_reads_every_counter_before_it_moves_any() -> None:
    counters = [
        BudgetCounter(False, "b|2026-01", 60, [crossing(50, "b:2026-01:t50")]),
        BudgetCounter(False, "b|2026-02", 10, [crossing(50, "b:2026-02:t50")]),
    ]
    alerts, spend, fired = fire_batch({"b|2026-02": 45}, counters, {})
    assert alerts == [FiredAlert("b:2026-01:t50", 60), FiredAlert("b:2026-02:t50", 55)]
    assert spend == {"b|2026-01": 60, "b|2026-02": 55}
    assert fired == {"b:2026-01:t50": 60, "b:2026-02:t50": 55}
