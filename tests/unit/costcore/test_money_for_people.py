"""Money shown to people (costcore.money.format_money_for_people): grouped, rounded half to
even to the currency's ISO 4217 minor units, the code after; never a bare zero for a
non-zero amount."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costcore.money import format_money_for_people, minor_units, parse_money


@pytest.mark.parametrize(
    ("exact", "currency", "shown"),
    [
        ("1562.6800004", "USD", "1,562.68 USD"),  # the raw figure
        ("1562.6800004", "JPY", "1,563 JPY"),  # ISO 4217 exponent 0
        ("1562.6800004", "KWD", "1,562.680 KWD"),  # exponent 3
        ("1562.6800004", "CLF", "1,562.6800 CLF"),  # exponent 4
        ("1234567.5", "XAU", "1,234,567.50 XAU"),  # no minor unit in ISO: cents
        ("1234567.5", "ZZZ", "1,234,567.50 ZZZ"),  # unknown code: cents
        ("0", "EUR", "0.00 EUR"),
        ("0.000000001", "USD", "<0.01 USD"),  # not zero, so never shown as zero
        ("0.005", "USD", "<0.01 USD"),  # half to even: 0.00
        ("0.015", "USD", "0.02 USD"),  # half to even: 0.02
        ("0.025", "USD", "0.02 USD"),
        ("999.995", "USD", "1,000.00 USD"),  # rounding carries into the grouping
        ("12", "USD", "12.00 USD"),
    ],
)
def test_hand_worked_amounts(exact: str, currency: str, shown: str) -> None:
    assert format_money_for_people(parse_money(Decimal(exact)), currency) == shown


def test_minor_units_follow_iso_4217() -> None:
    assert [minor_units(c) for c in ("USD", "EUR", "CNY", "JPY", "KRW", "BHD", "CLF")] == [
        2,
        2,
        2,
        0,
        0,
        3,
        4,
    ]


@given(st.integers(min_value=0, max_value=10**30), st.sampled_from(["USD", "JPY", "KWD"]))
def test_the_shown_figure_is_the_exact_one_rounded(nano: int, currency: str) -> None:
    text = format_money_for_people(nano, currency)
    number, code = text.split(" ")
    assert code == currency
    places = minor_units(currency)
    if number.startswith("<"):
        assert 0 < nano * 10**places < 10**9 // 2 + 1
        return
    shown = Decimal(number.replace(",", ""))
    assert abs(shown - Decimal(nano).scaleb(-9)) <= Decimal(1).scaleb(-places) / 2
    whole = number.split(".")[0]
    assert whole == f"{int(whole.replace(',', '')):,}"  # grouped by thousands
    assert len(number.partition(".")[2]) == places
