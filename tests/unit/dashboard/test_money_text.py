"""Money on the dashboard as people read it: the figure grouped and rounded to the currency,
the exact one kept in the element; axis ticks never finer than the currency's smallest unit."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from trainledger.dashboard.charts import burn_down, label_room, money_ticks, nice_ticks
from trainledger.dashboard.money_text import axis_label, money_html, people, tooltip


def test_money_html_shows_people_and_keeps_the_exact_figure() -> None:
    html = money_html("1562.680000400", "USD")
    assert html == (
        '<span class="money" title="1562.680000400 USD" data-exact="1562.680000400">'
        "1,562.68 USD</span>"
    )
    assert money_html("1562.5", "JPY").endswith(">1,562 JPY</span>")  # half to even
    assert ">&lt;0.01 USD<" in money_html("0.000000001", "USD")  # not a bare zero


def test_tooltip_adds_the_exact_figure_only_when_it_differs() -> None:
    assert tooltip("25.20", "USD") == "25.20 USD"
    assert tooltip("1234.5", "USD") == "1,234.50 USD (exactly 1234.5 USD)"
    assert people("-1234567.891", "KWD") == "-1,234,567.891 KWD"


def test_axis_labels_are_grouped_at_the_currency_precision() -> None:
    ticks, labels = money_ticks(12_345.0, "USD")
    assert ticks[-1] >= 12_345.0
    assert labels == ["0.00", "2,500.00", "5,000.00", "7,500.00", "10,000.00", "12,500.00"]
    assert axis_label(1250.0, "USD") == "1,250.00"  # not "1.2k": no digit cut off
    yen = ["0", "1,000", "2,000", "3,000"]
    assert money_ticks(3000.0, "JPY")[1] == yen


def test_ticks_are_never_finer_than_the_smallest_unit() -> None:
    for currency, top in (("USD", 0.003), ("USD", 0.04), ("JPY", 2.0), ("KWD", 0.0004)):
        _, labels = money_ticks(top, currency)
        assert len(set(labels)) == len(labels) >= 2, (currency, labels)
    assert nice_ticks(0.003, smallest=0.01) == [0.0, 0.01]
    assert nice_ticks(0.0) == [0.0, 1.0]


def test_axis_room_grows_with_the_longest_label() -> None:
    assert label_room(["0.00", "5.00"], 44.0) == 44.0
    assert label_room(["12,500,000.00"], 44.0) > 44.0 + 40
    chart = burn_down(
        "b", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2026, 11, 15, tzinfo=UTC), [(datetime(2026, 11, 10, tzinfo=UTC), "6000000")],
        "12000000", None, [], "USD",
    )  # fmt: skip
    labels = re.findall(r'text-anchor="end" font-size="11" fill="#666">([^<]*)<', chart)
    assert "15,000,000.00" in labels
    x = float(re.search(r'<text x="([\d.]+)"[^>]*>15,000,000.00<', chart)[1])  # type: ignore[index]
    assert x - len("15,000,000.00") * 11 * 0.55 > 0  # right-aligned at x, it starts inside
