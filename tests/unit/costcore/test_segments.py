"""``price_segments``: the one pricing rule (a quantity split into priced parts), compiled
against its reference, and the batch kernel held to it: an event's cost is its parts' exact
amount rounded once."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import costcore
from costcore import (
    INT64_MAX,
    QUANTITY_SCALE,
    PriceSegment,
    RateRow,
    RateTable,
    price_batch_reference,
    price_segments_reference,
    round_half_even_div,
)
from tests.unit.costcore.test_costcore import PROPERTY, Batch, batches, kernel

SegmentFn = Callable[[RateTable, int, int, int], list[PriceSegment]]


def compiled() -> SegmentFn:
    kernel()  # a missing build is a failure, never a skip
    function: SegmentFn = costcore.price_segments
    return function


IMPLS = pytest.mark.parametrize("impl", ["kernel", "reference"])


def get_impl(name: str) -> SegmentFn:
    return compiled() if name == "kernel" else price_segments_reference


def _outcome(fn: SegmentFn, *args: object) -> object:
    try:
        return fn(*args)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)


@PROPERTY
@given(batches())
def test_kernel_matches_reference(batch: Batch) -> None:
    """Every event of the batch split at every counter the batch draws: the same parts, or the
    same error (past INT64_MAX)."""
    table = batch.table()
    for q, row in zip(batch.quantity, batch.rate_row, strict=True):
        for cum in batch.tier_cum:
            assert _outcome(compiled(), table, row, cum, q) == _outcome(
                price_segments_reference, table, row, cum, q
            )


@PROPERTY
@given(batches())
def test_batch_prices_each_event_as_its_parts(batch: Batch) -> None:
    """``price_batch`` (both implementations) costs an event at the exact sum of the parts
    ``price_segments`` gives at its tier counter, rounded once; the parts of a tiered event
    cover its quantity, each inside its tier, in tier order."""
    table = batch.table()
    for impl in (kernel(), price_batch_reference):
        cum = list(batch.tier_cum)
        result, _ = batch.run(impl, table)
        for i, (q, row) in enumerate(zip(batch.quantity, batch.rate_row, strict=True)):
            slot = batch.tier_slot[i]
            before = cum[slot] if slot >= 0 else 0
            if before + q > INT64_MAX:
                assert result.status[i] == 1
                continue
            parts = compiled()(table, row, before, q)
            amount = sum(p.quantity_micro * p.unit_price_nano for p in parts)
            cost = round_half_even_div(amount, QUANTITY_SCALE)
            if cost > INT64_MAX:
                assert result.status[i] == 1
                continue
            assert result.status[i] == 0
            assert result.cost_nano[i] == cost
            if slot >= 0:
                cum[slot] = before + q
                assert sum(p.quantity_micro for p in parts) == q
                assert [p.tier for p in parts] == sorted({p.tier for p in parts})
                for p in parts:
                    upto = INT64_MAX if p.tier_upto_micro is None else p.tier_upto_micro
                    inside = min(before + q, upto) - max(before, p.tier_from_micro)
                    assert p.quantity_micro == inside
                    assert inside > 0 or (q == 0 and p.tier_from_micro <= before < upto)
            else:
                assert parts == [PriceSegment(q, batch.rows[row].unit_price_nano, None, 0, None)]


TIERED = RateTable.build([RateRow(7), RateRow(0, ((100, 2_000), (300, 1_000), (None, 500)))])


@IMPLS
def test_split_examples(impl: str) -> None:
    split = get_impl(impl)
    # Flat: the whole quantity at the unit price, whatever the counter.
    assert split(TIERED, 0, 123, 5) == [PriceSegment(5, 7, None, 0, None)]
    # Across all three tiers from 50: 50 + 200 + 10.
    assert split(TIERED, 1, 50, 260) == [
        PriceSegment(50, 2_000, 0, 0, 100),
        PriceSegment(200, 1_000, 1, 100, 300),
        PriceSegment(10, 500, 2, 300, None),
    ]
    # Ending exactly on a bound, starting exactly on one.
    assert split(TIERED, 1, 0, 100) == [PriceSegment(100, 2_000, 0, 0, 100)]
    assert split(TIERED, 1, 100, 1) == [PriceSegment(1, 1_000, 1, 100, 300)]
    # A zero quantity sits in the tier the counter is in (tiers hold [from, upto)).
    assert split(TIERED, 1, 99, 0) == [PriceSegment(0, 2_000, 0, 0, 100)]
    assert split(TIERED, 1, 100, 0) == [PriceSegment(0, 1_000, 1, 100, 300)]
    # Up to INT64_MAX exactly; at INT64_MAX no tier holds the counter.
    assert split(TIERED, 1, INT64_MAX - 1, 1) == [PriceSegment(1, 500, 2, 300, None)]
    assert split(TIERED, 1, INT64_MAX, 0) == []


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("table", 0, 0, 1), TypeError, "rates must be a RateTable"),
        ((TIERED, True, 0, 1), TypeError, "row must be an int"),
        ((TIERED, 0, 1.0, 1), TypeError, "cum_before must be an int"),
        ((TIERED, 0, 0, "1"), TypeError, "quantity_micro must be an int"),
        ((TIERED, 2, 0, 1), ValueError, r"row 2 is out of range \[0, 2\)"),
        ((TIERED, -1, 0, 1), ValueError, "out of range"),
        ((TIERED, 1, -1, 1), ValueError, "cum_before is negative"),
        ((TIERED, 1, 0, -1), ValueError, "quantity_micro is negative"),
        ((TIERED, 1, INT64_MAX, 1), ValueError, "exceeds INT64_MAX"),
        ((TIERED, 1, 2**70, 0), ValueError, "exceeds INT64_MAX"),
        ((TIERED, 0, 2**64, 2**64), ValueError, "exceeds INT64_MAX"),
    ],
)
def test_bad_arguments_raise_identically(args: tuple[object, ...], error: type, match: str) -> None:
    outcomes = [_outcome(fn, *args) for fn in (compiled(), price_segments_reference)]
    assert outcomes[0] == outcomes[1]
    with pytest.raises(error, match=match):
        compiled()(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("column", "index", "value", "match"),
    [
        ("tier_upto_micro", 1, 50, "upto_micro 50 must be greater than 100"),
        ("tier_upto_micro", 2, 10**6, "the last tier must be unbounded"),
        ("tier_price_nano", 0, -1, "price is negative"),
        ("tier_start", 1, 2, r"tiers \[2, 5\) are outside the 3 tier entries"),
        ("tier_count", 1, -1, "tier_count is negative"),
        ("unit_price_nano", 1, -5, "unit_price_nano is negative"),
    ],
)
def test_corrupted_row_is_refused_identically(
    column: str, index: int, value: int, match: str
) -> None:
    """The columns are mutable arrays: the split checks the row it reads, as the batch does."""
    table = RateTable.build([RateRow(7), RateRow(0, ((100, 2_000), (300, 1_000), (None, 500)))])
    column_array: array[int] = getattr(table, column)
    column_array[index] = value
    outcomes = [_outcome(fn, table, 1, 0, 10) for fn in (compiled(), price_segments_reference)]
    assert outcomes[0] == outcomes[1]
    with pytest.raises(ValueError, match=match):
        compiled()(table, 1, 0, 10)
    # Row 0 (flat) is untouched by a corrupted tier: it still splits.
    if column not in ("unit_price_nano", "tier_count", "tier_start"):
        assert compiled()(table, 0, 0, 3) == [PriceSegment(3, 7, None, 0, None)]


def test_mismatched_columns_are_refused_identically() -> None:
    table = RateTable.build([RateRow(7)])
    table.tier_price_nano.append(1)
    outcomes = [_outcome(fn, table, 0, 0, 1) for fn in (compiled(), price_segments_reference)]
    assert outcomes[0] == outcomes[1]
    with pytest.raises(ValueError, match="rate table tier columns differ in length"):
        compiled()(table, 0, 0, 1)


@given(st.integers(0, 2**63 - 1), st.integers(0, 10**6))
def test_int_subclasses_are_accepted_alike(cum: int, q: int) -> None:
    class Micro(int):
        pass

    assume(cum + q <= INT64_MAX)
    assert compiled()(TIERED, Micro(1), Micro(cum), Micro(q)) == price_segments_reference(
        TIERED, 1, cum, q
    )
