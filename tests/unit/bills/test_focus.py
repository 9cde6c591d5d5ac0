"""FOCUS rows read exactly: amounts to nano units (half-even past nine decimals), times to UTC,
and every refusal naming its row and column."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from trainledger.bills.focus import REQUIRED, BillError, read_header, read_row

HEADER = [*REQUIRED, "ChargeClass", "ConsumedQuantity", "Tags"]


def _row(**cells: str) -> list[str]:
    base = {
        "BilledCost": "1.5",
        "EffectiveCost": "1.25",
        "BillingCurrency": "USD",
        "ChargePeriodStart": "2026-11-01T23:00:00-02:00",
        "ChargePeriodEnd": "2026-11-02T02:00:00Z",
        "BillingPeriodStart": "2026-11-01T00:00:00Z",
        "BillingPeriodEnd": "2026-12-01T00:00:00Z",
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "ConsumedQuantity": "",
        "Tags": "",
    }
    base.update(cells)
    return [base[name] for name in HEADER]


def test_versions_by_their_columns() -> None:
    assert read_header(HEADER).version == "1.0"
    assert read_header([*HEADER, "InvoiceId"]).version == "1.2"


def test_a_row_in_exact_units() -> None:
    header = read_header(HEADER)
    row = read_row(header, _row(BilledCost="-0.0000000015", ConsumedQuantity="2.5"), 7)
    assert row.billed_nano == -2  # -1.5 nano, half-even
    assert row.effective_nano == 1_250_000_000
    assert row.quantity_nano == 2_500_000_000
    # 23:00 at -02:00 is 01:00 UTC the next day: the row is that day's.
    assert row.day == date(2026, 11, 2)
    assert row.period_end == datetime(2026, 11, 2, 2, tzinfo=UTC)
    assert row.billing_period == "2026-11-01"
    assert not row.correction
    assert read_row(header, _row(ChargeClass="Correction"), 1).correction


def test_tags_read_as_sorted_pairs() -> None:
    row = read_row(read_header(HEADER), _row(Tags='{"b": "2", "a": 1}'), 1)
    assert row.tags == (("a", "1"), ("b", "2"))


@pytest.mark.parametrize(
    ("cells", "column"),
    [
        ({"BilledCost": "abc"}, "BilledCost"),
        ({"EffectiveCost": ""}, "EffectiveCost"),
        ({"ConsumedQuantity": "Infinity"}, "ConsumedQuantity"),
        ({"ChargePeriodStart": "yesterday"}, "ChargePeriodStart"),
        ({"ChargePeriodEnd": "2026-10-01T00:00:00Z"}, "ChargePeriodEnd"),
        ({"BillingCurrency": ""}, "BillingCurrency"),
        ({"Tags": "[1]"}, "Tags"),
        ({"BilledCost": "1e30"}, "BilledCost"),
    ],
)
def test_a_bad_cell_names_its_row_and_column(cells: dict[str, str], column: str) -> None:
    with pytest.raises(BillError) as caught:
        read_row(read_header(HEADER), _row(**cells), 12)
    assert (caught.value.row, caught.value.column) == (12, column)
    assert caught.value.problem_members() == {"row": 12, "column": column}


def test_a_header_without_a_required_column() -> None:
    with pytest.raises(BillError) as caught:
        read_header([c for c in HEADER if c != "ChargeCategory"])
    assert (caught.value.row, caught.value.column) == (0, "ChargeCategory")
    with pytest.raises(BillError, match="named twice"):
        read_header([*HEADER, "Tags"])
