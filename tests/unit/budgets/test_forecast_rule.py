"""The one forecast rule (service/budgets/model.py `forecast`, `forecast_limit`), pinned by hand.

A plan's stage budget over a 10-day window, read on day 2 (20 % of the window gone): a linear
projection would multiply the spend by 5, which is what made a finished stage look "forecast
over". By earned value a finished stage is forecast at its spend, a running one at spend over
the fraction done, one not started at its amount.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainledger.budgets.model import (
    Budget,
    PeriodBounds,
    forecast,
    forecast_limit,
    shown_period,
)

START = datetime(2026, 3, 1, tzinfo=UTC)
END = START + timedelta(days=10)
NOW = START + timedelta(days=2)
USD = 10**9  # nano per unit


def stage_budget(amount: str, earned: str | None, plan: bool = True) -> Budget:
    return Budget(
        id="bud_x",
        created_at=START,
        project="llm",
        name="plan p / stage",
        amount=amount,
        period="window",
        window_start=START,
        window_end=END,
        plan_id="pln_x" if plan else None,
        earned=earned,
    )


def bounds(b: Budget) -> PeriodBounds:
    return shown_period(b, NOW)


def over(b: Budget, spent: int) -> bool | None:
    limit = forecast_limit(b, bounds(b), NOW, 1)
    return None if limit is None else spent > limit


def test_a_finished_stage_is_forecast_at_its_spend() -> None:
    b = stage_budget("10000", "1.000000000")
    assert forecast(b, 8_000 * USD, bounds(b), NOW) == 8_000 * USD
    assert over(b, 8_000 * USD) is False
    # The linear projection would have said 40,000 and "over".
    plain = stage_budget("10000", None, plan=False)
    assert forecast(plain, 8_000 * USD, bounds(plain), NOW) == 40_000 * USD
    assert over(plain, 8_000 * USD) is True
    # Done over its amount: forecast is the spend, and it is over.
    assert forecast(b, 10_500 * USD, bounds(b), NOW) == 10_500 * USD
    assert over(b, 10_500 * USD) is True


def test_a_running_stage_is_forecast_at_spend_over_the_fraction_done() -> None:
    b = stage_budget("10000", "0.250000000")
    assert forecast(b, 3_000 * USD, bounds(b), NOW) == 12_000 * USD
    assert over(b, 3_000 * USD) is True
    assert forecast(b, 2_000 * USD, bounds(b), NOW) == 8_000 * USD
    assert over(b, 2_000 * USD) is False
    # The limit is exactly amount × done: 2,500.00 is at plan, a nano more is over.
    assert forecast_limit(b, bounds(b), NOW, 1) == 2_500 * USD
    assert over(b, 2_500 * USD) is False and over(b, 2_500 * USD + 1) is True
    # A third done: 1,000.00 spent forecasts 3,000.00 (rounded half-even to the nano).
    third = stage_budget("10000", "0.333333333")
    assert forecast(third, 1_000 * USD, bounds(third), NOW) == 3_000_000_003_000


def test_a_stage_not_started_is_forecast_at_its_amount() -> None:
    for earned in (None, "0.000000000"):
        b = stage_budget("10000", earned)
        assert forecast(b, 0, bounds(b), NOW) == 10_000 * USD
        assert over(b, 0) is False
        assert forecast(b, 400 * USD, bounds(b), NOW) == 10_000 * USD
        # Spend already past the amount: that spend is the forecast, and it is over.
        assert forecast(b, 12_000 * USD, bounds(b), NOW) == 12_000 * USD
        assert over(b, 12_000 * USD) is True


def test_the_forecast_alert_is_armed_only_after_its_share_of_the_window() -> None:
    b = stage_budget("10000", "1.000000000")
    assert forecast_limit(b, bounds(b), NOW, 10) == 10_000 * USD
    assert forecast_limit(b, bounds(b), NOW, 30) is None  # 20 % gone
