"""Which alerts share one message (service.webhooks.delivery.deliveries.one_message_each) and
which of them the message is about (highest_first)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trainledger.budgets.service import AlertView
from trainledger.webhooks.delivery.deliveries import highest_first, one_message_each


def view(pct: int | None, budget: str = "b1", kind: str = "threshold", **extra: Any) -> AlertView:
    fields: dict[str, Any] = {
        "id": f"{budget}:2026-11:{kind}{pct}",
        "kind": kind,
        "project": "llm",
        "budget_id": budget,
        "budget_name": budget,
        "scope": {},
        "period": "2026-11",
        "threshold_pct": pct,
        "amount": "10.00",
        "limit": "5.00",
        "currency": "USD",
        "spent": "10.50",
        "over_by": "5.50",
        "occurred_at": datetime(2026, 11, 20, tzinfo=UTC),
        "cursor": "1-0",
        **extra,
    }
    return AlertView(**fields)


def test_one_batch_crossing_three_thresholds_is_one_message() -> None:
    views = [view(50), view(80), view(100)]
    assert one_message_each(views) == [[0, 1, 2]]
    assert [v.threshold_pct for v in highest_first(views)] == [100, 80, 50]


def test_other_budgets_periods_kinds_and_unreadable_alerts_stay_apart() -> None:
    views = [
        view(50),
        view(80),
        view(50, budget="b2"),
        view(80, budget="b2"),
        view(None, kind="forecast"),
        view(100),  # b1 again, but not next to its others: another message
        None,
        view(100, period="2026-12"),
    ]
    assert one_message_each(views) == [[0, 1], [2, 3], [4], [5], [6], [7]]
    assert one_message_each([]) == []
    assert one_message_each([None, None]) == [[0], [1]]
