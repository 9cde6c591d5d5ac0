"""The command line's figures for people (service/cli/figures.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from trainledger.cli.figures import count, grouped, money, when


def test_counts_have_their_plural_right() -> None:
    assert [count(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert count(1, "job") == "1 job" and count(1_500, "job") == "1,500 jobs"
    assert count(1, "delivery", "deliveries") == "1 delivery"
    assert count(3, "delivery", "deliveries") == "3 deliveries"


def test_money_is_grouped_to_the_currencys_minor_units() -> None:
    assert money("846855.311564552", "USD") == "846,855.31 USD"
    assert money("846855.311564552", "USD", code=False) == "846,855.31"
    assert money("17719.8", "JPY") == "17,720 JPY"


def test_quantities_are_grouped_and_exact() -> None:
    assert grouped("58982.136839") == "58,982.136839"
    assert grouped("84000000000000000000000") == "84,000,000,000,000,000,000,000"
    assert grouped("0.004833333") == "0.004833333"
    assert grouped("n/a") == "n/a"


def test_times_are_read_in_utc() -> None:
    moment = datetime(2026, 12, 3, 15, 42, 13, tzinfo=UTC)
    assert when(int(moment.timestamp())) == "2026-12-03 15:42 UTC"
    assert when("2026-12-03T15:42:13Z") == "2026-12-03 15:42 UTC"
    assert when("soon") == "soon"
