"""The spend gauges' pure rules: opt-in dimensions, the cap, exact figures to floats once."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.budgets.model import Budget, linear_forecast, shown_period
from trainledger.spend_metrics.model import (
    NONE,
    OTHER,
    BudgetFigures,
    ProjectSpend,
    Snapshot,
    as_float,
    capped,
    cost_cells,
    month_of,
    spend_families,
)
from trainledger.spend_metrics.settings import SpendConfig, parse_dimensions


def test_dimensions_are_opt_in_from_a_fixed_set() -> None:
    assert parse_dimensions("") == ()
    assert parse_dimensions(" owner, category ") == ("category", "owner")
    with pytest.raises(ValueError, match="unknown dimension 'sku'"):
        parse_dimensions("sku")
    with pytest.raises(ValueError, match="twice"):
        parse_dimensions("owner,owner")


@given(st.dictionaries(st.text(max_size=4), st.integers(0, 10**15), max_size=60), st.integers(2, 9))
def test_the_cap_keeps_the_largest_and_the_sum(rows: dict[str, int], top: int) -> None:
    kept = capped(rows, top)
    assert len(kept) <= top
    assert sum(kept.values()) == sum(rows.values())  # exact: integers, summed before any float
    if len(rows) > top:
        smallest_kept = min(v for k, v in kept.items() if k != OTHER)
        dropped = [v for k, v in rows.items() if (k or NONE) not in kept]
        assert all(v <= smallest_kept for v in dropped)


def test_an_empty_name_is_shown_as_none() -> None:
    assert capped({"": 5, "a": 1}, 5) == {NONE: 5, "a": 1}


@given(st.integers(-(10**30), 10**30))
def test_a_figure_becomes_a_float_once_from_the_exact_value(nano: int) -> None:
    assert as_float(nano) == float(Decimal(nano) / Decimal(10**9))
    assert as_float(nano) == nano / 10**9  # Python's int division rounds correctly too


def test_cells_are_summed_as_integers_per_wanted_dims() -> None:
    # The "sku" roll-up's dims: stage, category, sku, fixed (service/ledger/rollups.py).
    dims = ("stage", "category", "sku", "fixed")
    month = {
        b"c|pretrain\x1fcompute\x1fgpu\x1fe": b"7500000000",
        b"q|pretrain\x1fcompute\x1fgpu\x1fe": b"3000000",
        b"n|pretrain\x1fcompute\x1fgpu\x1fe": b"1",
        b"c|pretrain\x1fnetwork\x1fnet\x1fe": b"14000000",
        b"c|eval\x1fcompute\x1fgpu\x1fe": b"3000000000",
    }
    assert cost_cells([month, month], dims, ("stage",)) == {
        ("pretrain",): 2 * 7_514_000_000,
        ("eval",): 6_000_000_000,
    }


def test_month_of_rolls_over_the_year() -> None:
    first, nxt = month_of(datetime(2026, 12, 31, 23, tzinfo=UTC))
    assert (first.isoformat(), nxt.isoformat()) == ("2026-12-01", "2027-01-01")


def test_budget_forecast_and_window_periods() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    monthly = Budget(
        id="b", created_at=created, project="p", name="n", amount="10", period="monthly"
    )
    now = datetime(2026, 4, 11, tzinfo=UTC)  # 10 of April's 30 days gone
    bounds = shown_period(monthly, now)
    assert bounds.name == "2026-04"
    assert linear_forecast(3_000_000_000, bounds.start, bounds.end, now) == 9_000_000_000
    window = Budget(
        id="w",
        created_at=created,
        project="p",
        name="n",
        amount="10",
        period="window",
        window_start=datetime(2026, 5, 1, tzinfo=UTC),
        window_end=datetime(2026, 6, 1, tzinfo=UTC),
    )
    before = shown_period(window, now)
    assert before.name == "window" and linear_forecast(0, before.start, before.end, now) is None
    after = datetime(2026, 7, 1, tzinfo=UTC)
    shown = shown_period(window, after)
    assert linear_forecast(5, shown.start, shown.end, after) == 5


def test_families_show_only_visible_projects_and_the_read_state() -> None:
    budget = BudgetFigures("b1", "all", "monthly", 40_000_000_000, 10_614_000_000, None)
    projects = [
        ProjectSpend("a", "USD", 5, {("pretrain",): 5}, budgets=[budget]),
        ProjectSpend("b", "EUR", 7, {("eval",): 7}),
    ]
    snapshot = Snapshot(projects, 1.0, 0.1, omitted=3)
    families = spend_families(snapshot, SpendConfig(), "a".__eq__, False)
    by_name = {f.name: f for f in families}
    assert by_name["trainledger_spend_read_ok"].samples[0].value == 0.0
    assert by_name["trainledger_spend_projects_shown"].samples[0].value == 1.0
    assert by_name["trainledger_spend_projects_omitted"].samples[0].value == 3.0
    assert [s.labels["project"] for s in by_name["trainledger_spend_to_date"].samples] == ["a"]
    (use,) = by_name["trainledger_budget_use_ratio"].samples
    assert use.value == float(Fraction(10_614, 40_000)) == 0.26535
    assert use.value != 10.614 / 40  # what dividing floats would have shown
    assert by_name["trainledger_budget_forecast"].samples == []  # before its period: none
    assert "trainledger_experiment_spend_month_to_date" not in by_name  # not opted in
    assert [f.name for f in spend_families(None, SpendConfig(), bool, True)] == [
        "trainledger_spend_read_ok"
    ]
