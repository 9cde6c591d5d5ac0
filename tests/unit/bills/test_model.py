"""The reconciliation's rules: which project a bill key is, which SKU, and each status at the
edges of the tolerance and of the pending window."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from trainledger.bills.model import (
    UNMAPPED_SKU,
    BillKey,
    BillMapping,
    BillSums,
    ProjectMatch,
    SkuMatch,
    check_mapping,
    owner_of,
    pending_from,
    sku_of,
    status_of,
    unit_price,
)
from trainledger.errors import Invalid

KEY = BillKey("H100", "H100-OD", "GPU Compute", "i-0001", "acct-1", "Hours", {"team": "nlp"})


def test_the_bill_key_round_trips() -> None:
    assert BillKey.decode(KEY.encode()) == KEY


def test_the_first_project_by_name_whose_mapping_matches_owns_a_row() -> None:
    by_tag = BillMapping([ProjectMatch(tag_key="team", tag_value="nlp")])
    by_account = BillMapping([ProjectMatch(sub_account_id="acct-1")])
    by_prefix = BillMapping([ProjectMatch(resource_id_prefix="i-00")])
    other_tag = BillMapping([ProjectMatch(tag_key="team", tag_value="cv")])
    assert owner_of(KEY, [("b", by_account), ("a", by_tag)]) == "a"
    assert owner_of(KEY, [("z", by_prefix)]) == "z"
    assert owner_of(KEY, [("a", other_tag)]) is None
    # Every condition of one rule must hold.
    both = BillMapping([ProjectMatch(sub_account_id="acct-1", resource_id_prefix="x-")])
    assert owner_of(KEY, [("a", both)]) is None
    assert owner_of(KEY, [("a", BillMapping([ProjectMatch(tag_key="team")]))]) == "a"


def test_the_first_sku_rule_that_matches_names_the_sku() -> None:
    mapping = BillMapping(
        [ProjectMatch(tag_key="team")],
        [
            SkuMatch(sku="wrong", sku_id="H100", consumed_unit="Seconds"),
            SkuMatch(sku="gpu.h100.hour", sku_price_id="H100-OD", quantity_factor="0.5"),
            SkuMatch(sku="later", service_name="GPU Compute"),
        ],
    )
    assert sku_of(KEY, mapping) == ("gpu.h100.hour", Decimal("0.5"))
    assert sku_of(KEY, BillMapping([ProjectMatch(tag_key="t")])) == (UNMAPPED_SKU, Decimal(1))


def test_a_rule_that_matches_anything_is_refused() -> None:
    with pytest.raises(Invalid, match=r"\$\.match\[0\]"):
        check_mapping(BillMapping([ProjectMatch(tag_value="x")]))
    with pytest.raises(Invalid, match=r"\$\.skus\[0\]"):
        check_mapping(BillMapping([ProjectMatch(tag_key="t")], [SkuMatch(sku="s")]))


DAY = date(2026, 11, 1)


@pytest.mark.parametrize(
    ("ledger", "effective", "status"),
    [
        (1_000_000_000, 1_010_000_000, "reconciled"),  # 0.01 apart: the absolute bound
        (1_000_000_000, 1_010_000_001, "over"),
        (1_000_000_000, 989_999_999, "under"),
        # 0.5 % of 10 000 is 50: the relative bound is the larger.
        (10_000_000_000_000, 10_050_000_000_000, "reconciled"),
        (10_000_000_000_000, 10_051_000_000_000, "over"),
        (None, 1, "billed_not_metered"),
    ],
)
def test_status_at_the_tolerance(ledger: int | None, effective: int, status: str) -> None:
    assert status_of(DAY, ledger, BillSums(effective=effective), None) == status


def test_pending_and_metered_not_billed() -> None:
    first = pending_from(datetime(2026, 11, 7, tzinfo=UTC))
    assert first == date(2026, 11, 5)
    assert status_of(date(2026, 11, 4), 5, None, first) == "metered_not_billed"
    assert status_of(date(2026, 11, 5), 5, None, first) == "pending"
    assert status_of(date(2026, 11, 9), None, BillSums(effective=1), first) == "pending"
    # A bill ending mid-day: the day 48 h before it is still open.
    assert pending_from(datetime(2026, 11, 7, 13, tzinfo=UTC)) == date(2026, 11, 5)
    assert pending_from(None) is None


def test_unit_price_is_exact_to_nine_decimals() -> None:
    assert unit_price(10_000_000_000, Decimal(3_000_000_000)) == "3.333333333"
    assert unit_price(5, Decimal(0)) is None
