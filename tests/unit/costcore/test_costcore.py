"""Tests for costcore: compiled kernel vs. reference vs. a Decimal oracle, plus money helpers."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from decimal import (
    ROUND_HALF_EVEN,
    Decimal,
    Inexact,
    Rounded,
    localcontext,
)
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import costcore
from costcore import (
    INT64_MAX,
    BatchResult,
    RateRow,
    RateTable,
    format_money,
    format_quantity,
    parse_price,
    parse_quantity,
    price_batch_reference,
    round_half_even_div,
)

PriceFn = Callable[..., BatchResult]

try:
    from costcore import price_batch as _kernel_price_batch
except ImportError as _exc:  # pragma: no cover - exercised only when the build is missing
    _KERNEL_ERROR: str | None = str(_exc)
else:
    _KERNEL_ERROR = None


def kernel() -> PriceFn:
    """The compiled kernel; a missing build is a test failure, never a silent skip."""
    if _KERNEL_ERROR is not None:
        pytest.fail(f"compiled kernel unavailable: {_KERNEL_ERROR}")
    return _kernel_price_batch


IMPLS = pytest.mark.parametrize("impl", ["kernel", "reference"])


def get_impl(name: str) -> PriceFn:
    return kernel() if name == "kernel" else price_batch_reference


UNIT = 10**6  # micro-units per unit
NANO = 10**9  # nano-currency per currency unit


# --------------------------------------------------------------------------------------------
# Batch model used by tests
# --------------------------------------------------------------------------------------------


@dataclass
class Batch:
    rows: list[RateRow]
    quantity: list[int]
    rate_row: list[int]
    group: list[int]
    tier_slot: list[int]
    tier_cum: list[int]
    n_groups: int

    def table(self) -> RateTable:
        return RateTable.build(self.rows)

    def run(self, fn: PriceFn, table: RateTable | None = None) -> tuple[BatchResult, array[int]]:
        cum = array("q", self.tier_cum)
        result = fn(
            array("q", self.quantity),
            array("i", self.rate_row),
            array("i", self.group),
            array("i", self.tier_slot),
            table if table is not None else self.table(),
            cum,
            self.n_groups,
        )
        return result, cum


def run_both(batch: Batch) -> tuple[BatchResult, array[int], BatchResult, array[int]]:
    table = batch.table()
    k_result, k_cum = batch.run(kernel(), table)
    r_result, r_cum = batch.run(price_batch_reference, table)
    return k_result, k_cum, r_result, r_cum


def assert_same(k: BatchResult, r: BatchResult) -> None:
    # Field by field for readable failures, then the whole object.
    assert k.status == r.status
    assert k.cost_nano == r.cost_nano
    assert k.group_cost_nano == r.group_cost_nano
    assert k.group_quantity_micro == r.group_quantity_micro
    assert k.group_events == r.group_events
    assert k.accepted == r.accepted
    assert k == r


def check_result_shapes(result: BatchResult, n: int, n_groups: int) -> None:
    assert result.cost_nano.typecode == "q" and len(result.cost_nano) == n
    assert result.status.typecode == "b" and len(result.status) == n
    for column in (result.group_cost_nano, result.group_quantity_micro):
        assert isinstance(column, list) and len(column) == n_groups
        assert all(type(v) is int and v >= 0 for v in column)
    assert result.group_events.typecode == "q" and len(result.group_events) == n_groups
    assert result.accepted == sum(1 for s in result.status if s == 0)


# --------------------------------------------------------------------------------------------
# Decimal oracle: an independent formulation of the pricing contract
# --------------------------------------------------------------------------------------------


def oracle(batch: Batch) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]]:
    """Expected (cost, status, group_cost, group_qty, group_events, cum_after).

    Works in currency units with Decimal. A tiered cost is computed as F(c + q) - F(c), where
    F(x) is the total graduated price of the first x micro-units; the implementations instead
    sum per-tier portions. One half-even quantize to 1E-9 per event.
    """
    nano = Decimal("1E-9")
    cum = list(batch.tier_cum)
    costs = [0] * len(batch.quantity)
    status = [0] * len(batch.quantity)
    g_cost = [0] * batch.n_groups
    g_qty = [0] * batch.n_groups
    g_events = [0] * batch.n_groups
    with localcontext() as ctx:
        ctx.prec = 120
        ctx.traps[Inexact] = True  # every intermediate must be exact
        ctx.traps[Rounded] = True

        def units(micro: int) -> Decimal:
            return Decimal(micro).scaleb(-6)

        def currency_per_unit(price_nano: int) -> Decimal:
            return Decimal(price_nano).scaleb(-9)

        def graduated_total(row: RateRow, x: int) -> Decimal:
            total = Decimal(0)
            lo = 0
            for upto, price in row.tiers:
                hi = INT64_MAX if upto is None else upto
                filled = min(max(x - lo, 0), hi - lo)
                total += units(filled) * currency_per_unit(price)
                lo = hi
            return total

        for i, q in enumerate(batch.quantity):
            row = batch.rows[batch.rate_row[i]]
            slot = batch.tier_slot[i]
            if row.tiers:
                c = cum[slot]
                if c + q > INT64_MAX:
                    status[i] = 1
                    continue
                exact = graduated_total(row, c + q) - graduated_total(row, c)
            else:
                exact = units(q) * currency_per_unit(row.unit_price_nano)
            ctx.traps[Inexact] = False
            ctx.traps[Rounded] = False
            rounded = exact.quantize(nano, rounding=ROUND_HALF_EVEN)
            ctx.traps[Inexact] = True
            ctx.traps[Rounded] = True
            cost = int(rounded.scaleb(9))
            g = batch.group[i]
            if cost > INT64_MAX:  # per event only: a group's sums never refuse an event
                status[i] = 1
                continue
            costs[i] = cost
            g_cost[g] += cost
            g_qty[g] += q
            g_events[g] += 1
            if row.tiers:
                cum[slot] = c + q
    return costs, status, g_cost, g_qty, g_events, cum


# --------------------------------------------------------------------------------------------
# Hypothesis strategies
# --------------------------------------------------------------------------------------------

NEAR_MAX = st.integers(INT64_MAX - 2**20, INT64_MAX)

PRICES = st.one_of(
    st.just(0),
    st.integers(0, 3_000_000),  # sub-nano costs for small quantities: exercises rounding
    st.sampled_from([500_000, 1_500_000, 2_500_000, 3_500_000, NANO, 2 * NANO, 1_500_000_000]),
    st.integers(0, 10 * NANO),
    st.integers(0, INT64_MAX),
    NEAR_MAX,
)


def uptos_for(scale: str) -> st.SearchStrategy[int]:
    if scale == "tiny":
        return st.integers(1, 40)
    if scale == "unit":
        return st.one_of(st.integers(1, 50).map(lambda u: u * UNIT), st.integers(1, 10**9))
    return st.one_of(st.integers(1, INT64_MAX - 1), st.integers(INT64_MAX - 2**20, INT64_MAX - 1))


def quantities_for(scale: str) -> st.SearchStrategy[int]:
    if scale == "tiny":
        return st.integers(0, 15)
    if scale == "unit":
        return st.one_of(st.integers(0, 20).map(lambda u: u * UNIT), st.integers(0, 10**9))
    return st.one_of(st.integers(0, INT64_MAX), NEAR_MAX, st.integers(0, 2**40))


@st.composite
def batches(draw: st.DrawFn, max_events: int = 40) -> Batch:
    scale = draw(st.sampled_from(["tiny", "unit", "huge"]))
    n_rows = draw(st.integers(1, 5))
    rows: list[RateRow] = []
    boundaries: set[int] = set()
    for _ in range(n_rows):
        unit_price = draw(PRICES)
        if draw(st.booleans()):
            n_bounded = draw(st.integers(0, 3))
            uptos = sorted(draw(st.sets(uptos_for(scale), min_size=n_bounded, max_size=n_bounded)))
            boundaries.update(uptos)
            tiers: tuple[tuple[int | None, int], ...] = tuple(
                (upto, draw(PRICES)) for upto in uptos
            )
            tiers += ((None, draw(PRICES)),)
            rows.append(RateRow(unit_price, tiers))
        else:
            rows.append(RateRow(unit_price))
    n_slots = draw(st.integers(1, 5))
    n_groups = draw(st.integers(1, 30))

    # Interesting quantities: the tier boundaries themselves and their differences, so that
    # events land exactly on (and start exactly at) tier bounds.
    special = sorted(boundaries | {b - a for a in boundaries for b in boundaries if b > a})
    special_q = st.sampled_from(special) if special else st.just(1)
    cum_values = st.one_of(
        st.just(0),
        special_q,
        special_q.map(lambda b: max(0, b - 1)),
        quantities_for(scale),
        NEAR_MAX,
    )
    tier_cum = draw(st.lists(cum_values, min_size=n_slots, max_size=n_slots))
    q_values = st.one_of(st.just(0), st.just(1), special_q, quantities_for(scale))

    n = draw(st.integers(0, max_events))
    quantity = draw(st.lists(q_values, min_size=n, max_size=n))
    rate_row = draw(st.lists(st.integers(0, n_rows - 1), min_size=n, max_size=n))
    group = draw(st.lists(st.integers(0, n_groups - 1), min_size=n, max_size=n))
    slot_choice = draw(st.lists(st.integers(0, n_slots - 1), min_size=n, max_size=n))
    tier_slot = [s if rows[r].tiers else -1 for s, r in zip(slot_choice, rate_row, strict=True)]
    return Batch(rows, quantity, rate_row, group, tier_slot, tier_cum, n_groups)


PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@PROPERTY
@given(batches())
def test_kernel_matches_reference(batch: Batch) -> None:
    k_result, k_cum, r_result, r_cum = run_both(batch)
    check_result_shapes(k_result, len(batch.quantity), batch.n_groups)
    check_result_shapes(r_result, len(batch.quantity), batch.n_groups)
    assert_same(k_result, r_result)
    assert k_cum == r_cum


@PROPERTY
@given(batches())
def test_matches_decimal_oracle(batch: Batch) -> None:
    costs, status, g_cost, g_qty, g_events, cum = oracle(batch)
    for impl in (kernel(), price_batch_reference):
        result, cum_after = batch.run(impl)
        assert list(result.status) == status
        assert list(result.cost_nano) == costs
        assert list(result.group_cost_nano) == g_cost
        assert list(result.group_quantity_micro) == g_qty
        assert list(result.group_events) == g_events
        assert list(cum_after) == cum


def _invalidate(batch: Batch, kind: str, where: int) -> None:
    n = len(batch.quantity)
    i = where % n if n else 0
    if kind == "negative_quantity":
        batch.quantity[i] = -1 - where
    elif kind == "row_high":
        batch.rate_row[i] = len(batch.rows) + where
    elif kind == "row_negative":
        batch.rate_row[i] = -1 - where
    elif kind == "group_high":
        batch.group[i] = batch.n_groups + where
    elif kind == "group_negative":
        batch.group[i] = -1
    elif kind == "slot_high":
        batch.tier_slot[i] = len(batch.tier_cum) + where
    elif kind == "slot_minus_one":
        batch.tier_slot[i] = -1
    elif kind == "slot_on_flat":
        batch.tier_slot[i] = 0
    elif kind == "negative_cum":
        batch.tier_cum[where % len(batch.tier_cum)] = -1 - where
    else:  # pragma: no cover
        raise AssertionError(kind)


INVALID_KINDS = [
    "negative_quantity",
    "row_high",
    "row_negative",
    "group_high",
    "group_negative",
    "slot_high",
    "slot_minus_one",
    "slot_on_flat",
    "negative_cum",
]


@settings(max_examples=200, deadline=None)
@given(
    batches(max_events=12),
    st.lists(st.tuples(st.sampled_from(INVALID_KINDS), st.integers(0, 50)), min_size=1, max_size=3),
)
def test_invalid_inputs_raise_identically(batch: Batch, corruptions: list[tuple[str, int]]) -> None:
    for kind, where in corruptions:
        if kind != "negative_cum" and not batch.quantity:
            continue
        _invalidate(batch, kind, where)
    table = batch.table()
    outcomes: list[tuple[str, object, list[int]]] = []
    for impl in (kernel(), price_batch_reference):
        cum = array("q", batch.tier_cum)
        try:
            result: object = impl(
                array("q", batch.quantity),
                array("i", batch.rate_row),
                array("i", batch.group),
                array("i", batch.tier_slot),
                table,
                cum,
                batch.n_groups,
            )
            outcomes.append(("ok", result, list(cum)))
        except ValueError as exc:
            # Nothing was mutated when the batch was rejected.
            assert list(cum) == batch.tier_cum
            outcomes.append(("ValueError", str(exc), list(cum)))
    assert outcomes[0] == outcomes[1]


# --------------------------------------------------------------------------------------------
# Hand-worked examples
# --------------------------------------------------------------------------------------------

TWO_TIER = RateRow(0, ((100 * UNIT, 2 * NANO), (None, 1_500_000_000)))  # 2.00 then 1.50


def price_one(
    impl: PriceFn,
    row: RateRow,
    quantity: int,
    cum_before: int = 0,
) -> tuple[int, int, int]:
    """(cost_nano, status, cum_after) of a single event priced by ``row``."""
    tiered = bool(row.tiers)
    cum = array("q", [cum_before])
    result = impl(
        array("q", [quantity]),
        array("i", [0]),
        array("i", [0]),
        array("i", [0 if tiered else -1]),
        RateTable.build([row]),
        cum,
        1,
    )
    return result.cost_nano[0], result.status[0], cum[0]


@IMPLS
def test_tier_crossing_example(impl: str) -> None:
    # cumulative 90 units, event of 20: 10 x 2.00 + 10 x 1.50 = 35.00
    cost, status, cum = price_one(get_impl(impl), TWO_TIER, 20 * UNIT, 90 * UNIT)
    assert (cost, status, cum) == (35 * NANO, 0, 110 * UNIT)
    assert format_money(cost) == "35.00"


@IMPLS
@pytest.mark.parametrize(
    ("cum_before", "quantity", "expected"),
    [
        (0, 100 * UNIT, 200 * NANO),  # ends exactly on the bound: all first tier
        (100 * UNIT, 1, 1_500),  # starts exactly on the bound: 1 micro at 1.50
        (99 * UNIT, UNIT, 2 * NANO),  # last unit of tier 1
        (100 * UNIT - 1, 2, 2_000 + 1_500),  # one micro on each side of the bound
        (0, 0, 0),
        (500 * UNIT, 4 * UNIT, 6 * NANO),
        (0, 300 * UNIT, 200 * NANO + 300 * NANO),
    ],
)
def test_tier_boundaries(impl: str, cum_before: int, quantity: int, expected: int) -> None:
    cost, status, cum = price_one(get_impl(impl), TWO_TIER, quantity, cum_before)
    assert (cost, status, cum) == (expected, 0, cum_before + quantity)


@IMPLS
@pytest.mark.parametrize(
    ("price_nano", "expected"),
    [
        (500_000, 0),  # 0.5 nano -> 0
        (1_500_000, 2),  # 1.5 nano -> 2
        (2_500_000, 2),  # 2.5 nano -> 2
        (3_500_000, 4),
        (500_001, 1),  # just above half
        (1_499_999, 1),  # just below half
        (999_999, 1),
        (1, 0),
    ],
)
def test_flat_half_even(impl: str, price_nano: int, expected: int) -> None:
    cost, status, _ = price_one(get_impl(impl), RateRow(price_nano), 1)
    assert (cost, status) == (expected, 0)


@IMPLS
def test_tiered_rounds_the_sum_once(impl: str) -> None:
    # Each 1-micro portion costs 0.5 nano; rounding per portion would give 0, the sum is 1.
    row = RateRow(0, ((1, 500_000), (None, 500_000)))
    assert price_one(get_impl(impl), row, 2) == (1, 0, 2)
    # 1.5 + 1.5 = 3 nano exactly; per-portion rounding would give 2 + 2 = 4.
    row = RateRow(0, ((1, 1_500_000), (None, 1_500_000)))
    assert price_one(get_impl(impl), row, 2) == (3, 0, 2)
    # 0.5 + 2.0 = 2.5 -> 2 (half even on the exact sum).
    row = RateRow(0, ((1, 500_000), (None, 2_000_000)))
    assert price_one(get_impl(impl), row, 2) == (2, 0, 2)


@IMPLS
def test_many_tiers_single_event(impl: str) -> None:
    row = RateRow(
        0,
        ((10 * UNIT, 4 * NANO), (20 * UNIT, 3 * NANO), (30 * UNIT, 2 * NANO), (None, NANO)),
    )
    # from 5 to 35 units: 5x4 + 10x3 + 10x2 + 5x1 = 75
    assert price_one(get_impl(impl), row, 30 * UNIT, 5 * UNIT) == (75 * NANO, 0, 35 * UNIT)


@IMPLS
def test_flat_cost_exactly_int64_max_is_accepted(impl: str) -> None:
    # INT64_MAX micro at 0.001/unit (10**6 nano) costs exactly INT64_MAX nano.
    assert price_one(get_impl(impl), RateRow(10**6), INT64_MAX) == (INT64_MAX, 0, 0)


@IMPLS
def test_rounding_up_past_int64_max_overflows(impl: str) -> None:
    # q * p = INT64_MAX * 10**6 + 500_000 = 500_000 * (2**64 - 1): the exact cost is
    # INT64_MAX + 0.5 nano, and INT64_MAX is odd so half-even rounds up to 2**63: overflow.
    q = 65537 * 6700417
    p = 500_000 * 3 * 5 * 17 * 257 * 641
    assert q * p == INT64_MAX * 10**6 + 500_000
    assert price_one(get_impl(impl), RateRow(p), q) == (0, 1, 0)
    # One micro less: cost is far below the limit and is priced normally.
    cost, status, _ = price_one(get_impl(impl), RateRow(p), q - 1)
    assert status == 0 and cost == round_half_even_div((q - 1) * p, 10**6)


@IMPLS
def test_overflow_paths(impl: str) -> None:
    fn = get_impl(impl)
    table = RateTable.build(
        [
            RateRow(10**7),  # 0: flat 0.01/unit
            TWO_TIER,  # 1
            RateRow(0),  # 2: free
            RateRow(4 * 10**15),  # 3: flat 4_000_000/unit
        ]
    )
    quantity = array(
        "q",
        [
            INT64_MAX,  # 0: flat cost overflow (10x INT64_MAX nano)
            5,  # 1: tiered, c + q > INT64_MAX -> overflow, counter untouched
            3,  # 2: tiered, fine
            INT64_MAX,  # 3: free, group 1 quantity = INT64_MAX
            1,  # 4: free, group 1 quantity passes int64: accepted (limits are per event)
            1,  # 5: free, group 2: fine
            1_000_000,  # 6: 4e15 nano, group 3
            2_305_843_009,  # 7: 9.223372036e18 nano fits int64; group 3's sum passes it: fine
            0,  # 8: zero quantity still counts as an event
        ],
    )
    rate_row = array("i", [0, 1, 1, 2, 2, 2, 3, 3, 1])
    group = array("i", [0, 0, 0, 1, 1, 2, 3, 3, 0])
    tier_slot = array("i", [-1, 0, 1, -1, -1, -1, -1, -1, 1])
    cum = array("q", [INT64_MAX - 4, 100 * UNIT])
    result = fn(quantity, rate_row, group, tier_slot, table, cum, 4)
    big = 2_305_843_009 * 4 * 10**15 // 10**6
    assert list(result.status) == [1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert list(result.cost_nano) == [0, 0, 4_500, 0, 0, 0, 4 * 10**15, big, 0]
    assert result.group_cost_nano == [4_500, 0, 0, 4 * 10**15 + big]
    assert result.group_cost_nano[3] > INT64_MAX
    assert result.group_quantity_micro == [3, INT64_MAX + 1, 1, 1_000_000 + 2_305_843_009]
    assert list(result.group_events) == [2, 2, 1, 2]
    assert result.accepted == 7
    assert list(cum) == [INT64_MAX - 4, 100 * UNIT + 3]


@IMPLS
def test_tier_counter_is_shared_in_order(impl: str) -> None:
    fn = get_impl(impl)
    table = RateTable.build([TWO_TIER])
    cum = array("q", [0, 0])
    result = fn(
        array("q", [60 * UNIT, 60 * UNIT, 60 * UNIT]),
        array("i", [0, 0, 0]),
        array("i", [0, 1, 0]),
        array("i", [0, 0, 1]),
        table,
        cum,
        2,
    )
    # slot 0: 60 @2 = 120, then 40 @2 + 20 @1.5 = 110; slot 1: 60 @2 = 120
    assert list(result.cost_nano) == [120 * NANO, 110 * NANO, 120 * NANO]
    assert list(result.group_cost_nano) == [240 * NANO, 110 * NANO]
    assert list(cum) == [120 * UNIT, 60 * UNIT]


@IMPLS
def test_empty_batch(impl: str) -> None:
    cum = array("q", [7])
    result = get_impl(impl)(
        array("q"), array("i"), array("i"), array("i"), RateTable.build([TWO_TIER]), cum, 3
    )
    assert result == BatchResult(
        array("q"),
        array("b"),
        [0, 0, 0],
        [0, 0, 0],
        array("q", [0, 0, 0]),
        0,
    )
    assert list(cum) == [7]


@IMPLS
def test_accepts_other_int64_buffers(impl: str) -> None:
    fn = get_impl(impl)
    table = RateTable.build([RateRow(NANO), TWO_TIER])
    quantity = array("q", [UNIT, 20 * UNIT])
    cum_l = array("l" if array("l").itemsize == 8 else "q", [90 * UNIT])
    result = fn(
        memoryview(quantity.tobytes()).cast("q"),  # read-only input buffer
        array("i", [0, 1]),
        memoryview(bytearray(array("i", [0, 0]).tobytes())).cast("i"),
        array("i", [-1, 0]),
        table,
        cum_l,  # array('l') on LP64: same width, updated in place through a cast view
        1,
    )
    assert list(result.cost_nano) == [NANO, 35 * NANO]
    assert list(cum_l) == [110 * UNIT]


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def _valid_args() -> dict[str, Any]:
    return {
        "quantity_micro": array("q", [UNIT, UNIT]),
        "rate_row": array("i", [0, 1]),
        "group": array("i", [0, 1]),
        "tier_slot": array("i", [-1, 0]),
        "rates": RateTable.build([RateRow(NANO), TWO_TIER]),
        "tier_cum": array("q", [0]),
        "n_groups": 2,
    }


VALIDATION_CASES: list[tuple[dict[str, Any], type[Exception], str]] = [
    (
        {"quantity_micro": array("q", [UNIT, -5])},
        ValueError,
        r"quantity_micro\[1\] is negative \(-5\)",
    ),
    ({"rate_row": array("i", [0, 2])}, ValueError, r"rate_row\[1\] = 2 is out of range \[0, 2\)"),
    ({"rate_row": array("i", [-1, 1])}, ValueError, r"rate_row\[0\] = -1 is out of range"),
    ({"group": array("i", [0, 2])}, ValueError, r"group\[1\] = 2 is out of range \[0, 2\)"),
    ({"tier_slot": array("i", [-1, -1])}, ValueError, r"tier_slot\[1\] = -1: rate row 1 is tiered"),
    ({"tier_slot": array("i", [-1, 1])}, ValueError, r"tier_slot\[1\] = 1: rate row 1 is tiered"),
    ({"tier_slot": array("i", [0, 0])}, ValueError, r"tier_slot\[0\] = 0: rate row 0 is flat"),
    ({"tier_cum": array("q", [-1])}, ValueError, r"tier_cum\[0\] is negative"),
    ({"group": array("i", [0])}, ValueError, r"event arrays differ in length"),
    ({"n_groups": -1}, ValueError, r"n_groups must be >= 0"),
    ({"n_groups": 1}, ValueError, r"group\[1\] = 1 is out of range \[0, 1\)"),
    ({"n_groups": True}, TypeError, r"n_groups must be an int"),
    ({"quantity_micro": [UNIT, UNIT]}, TypeError, r"quantity_micro must support the buffer"),
    ({"quantity_micro": array("d", [1.0, 1.0])}, TypeError, r"quantity_micro must be a 1-D"),
    ({"quantity_micro": array("i", [1, 1])}, TypeError, r"quantity_micro must be a 1-D"),
    ({"group": bytearray(8)}, TypeError, r"group must be a 1-D"),
    ({"rate_row": array("q", [0, 1])}, TypeError, r"rate_row must be a 1-D"),
    ({"tier_cum": memoryview(bytes(8)).cast("q")}, TypeError, r"tier_cum must be a writable"),
    ({"rates": object()}, TypeError, r"rates must be a RateTable"),
]


@IMPLS
@pytest.mark.parametrize(("override", "error", "match"), VALIDATION_CASES)
def test_validation(
    impl: str, override: dict[str, Any], error: type[Exception], match: str
) -> None:
    args = _valid_args() | override
    cum_before = bytes(args["tier_cum"])
    with pytest.raises(error, match=match):
        get_impl(impl)(**args)
    assert bytes(args["tier_cum"]) == cum_before


@IMPLS
def test_validation_happens_before_any_mutation(impl: str) -> None:
    args = _valid_args()
    args["quantity_micro"] = array("q", [UNIT] * 5 + [-1])
    args["rate_row"] = array("i", [1] * 6)
    args["group"] = array("i", [0] * 6)
    args["tier_slot"] = array("i", [0] * 6)
    with pytest.raises(ValueError, match=r"quantity_micro\[5\]"):
        get_impl(impl)(**args)
    assert list(args["tier_cum"]) == [0]


@IMPLS
def test_corrupted_rate_table_is_rejected(impl: str) -> None:
    table = RateTable.build([RateRow(NANO), TWO_TIER])
    table.tier_price_nano[1] = -7  # the columns are mutable arrays: price_batch re-checks
    args = _valid_args() | {"rates": table}
    with pytest.raises(ValueError, match=r"rate row 1, tier 1: price is negative \(-7\)"):
        get_impl(impl)(**args)
    table.tier_price_nano[1] = 1
    table.tier_upto_micro[1] = 5
    with pytest.raises(ValueError, match=r"rate row 1, tier 1: upto_micro 5 must be greater"):
        get_impl(impl)(**args)
    table.tier_upto_micro[1] = INT64_MAX
    table.tier_count[1] = 3
    with pytest.raises(ValueError, match=r"rate row 1: tiers \[0, 3\) are outside"):
        get_impl(impl)(**args)


def test_validation_messages_identical() -> None:
    for override, _, _ in VALIDATION_CASES:
        messages = []
        for impl in (kernel(), price_batch_reference):
            args = _valid_args() | override
            with pytest.raises(Exception) as info:
                impl(**args)
            messages.append((type(info.value), str(info.value)))
        assert messages[0] == messages[1]


# --------------------------------------------------------------------------------------------
# RateTable
# --------------------------------------------------------------------------------------------


def test_rate_table_layout_and_roundtrip() -> None:
    rows = [RateRow(5), TWO_TIER, RateRow(7, ((1, 3), (2, 2), (None, 1)))]
    table = RateTable.build(rows)
    assert table.unit_price_nano == array("q", [5, 0, 7])
    assert table.tier_start == array("i", [0, 0, 2])
    assert table.tier_count == array("i", [0, 2, 3])
    assert table.tier_upto_micro == array("q", [100 * UNIT, INT64_MAX, 1, 2, INT64_MAX])
    assert table.tier_price_nano == array("q", [2 * NANO, 1_500_000_000, 3, 2, 1])
    assert [table.row(i) for i in range(3)] == rows
    assert table == RateTable.build(rows)
    assert len(table) == table.n_rows == 3 and table.n_tiers == 5
    with pytest.raises(AttributeError):
        table.unit_price_nano = array("q")


@pytest.mark.parametrize(
    ("row", "error", "match"),
    [
        (RateRow(-1), ValueError, "unit_price_nano must be in"),
        (RateRow(2**63), ValueError, "unit_price_nano must be in"),
        (RateRow(1.5), TypeError, "must be an int"),  # type: ignore[arg-type]
        (RateRow(0, ((10, 1), (10, 2), (None, 3))), ValueError, "must be greater than 10"),
        (RateRow(0, ((10, 1), (5, 2), (None, 3))), ValueError, "must be greater than 10"),
        (RateRow(0, ((0, 1), (None, 3))), ValueError, "must be greater than 0"),
        (RateRow(0, ((None, 1), (None, 3))), ValueError, "only the last tier"),
        (RateRow(0, ((10, 1), (20, 3))), ValueError, "last tier must be unbounded"),
        (RateRow(0, ((10, -1), (None, 3))), ValueError, "price_nano must be in"),
        (RateRow(0, ((10, True), (None, 3))), TypeError, "must be an int"),
        (RateRow(0, ((10,), (None, 3))), ValueError, "expected"),  # type: ignore[arg-type]
    ],
)
def test_rate_table_build_validation(row: RateRow, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RateTable.build([RateRow(1), row])


def test_rate_table_constructor_validates_columns() -> None:
    with pytest.raises(ValueError, match="last tier must be unbounded"):
        RateTable([0], [0], [1], [10], [1])
    with pytest.raises(ValueError, match="row columns differ in length"):
        RateTable([0, 0], [0], [0], [], [])
    with pytest.raises(ValueError, match="outside its integer range"):
        RateTable([0], [2**31], [0], [], [])
    # explicit INT64_MAX as the last bound is the same as None
    assert RateTable([0], [0], [1], [INT64_MAX], [9]) == RateTable.build([RateRow(0, ((None, 9),))])


# --------------------------------------------------------------------------------------------
# Package wiring
# --------------------------------------------------------------------------------------------


def test_kernel_build_info() -> None:
    kernel()
    info = costcore.kernel_build_info()
    assert info["kernel_version"] == costcore.KERNEL_VERSION
    assert info["cython_version"].startswith("3.")
    assert info["int128"] is True and info["nogil"] is True
    from costcore import _kernel

    assert _kernel.KERNEL_VERSION == costcore.KERNEL_VERSION
    assert costcore.price_batch is _kernel.price_batch


def test_missing_kernel_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(costcore.__dict__, "price_batch", raising=False)
    monkeypatch.delitem(costcore.__dict__, "_kernel", raising=False)
    monkeypatch.setitem(sys.modules, "costcore._kernel", None)
    with pytest.raises(ImportError, match="no automatic pure-Python fallback"):
        costcore.price_batch  # noqa: B018
    with pytest.raises(ImportError, match="build_ext --inplace"):
        costcore.kernel_build_info()


def test_stale_kernel_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel()
    monkeypatch.delitem(costcore.__dict__, "price_batch", raising=False)
    monkeypatch.setattr(costcore, "KERNEL_VERSION", "0.0.0-test")
    with pytest.raises(ImportError, match="stale"):
        costcore.price_batch  # noqa: B018


# --------------------------------------------------------------------------------------------
# Money helpers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "micro"),
    [
        ("3", 3 * UNIT),
        ("0.5", 500_000),
        ("0.000001", 1),
        ("1.500000000", 1_500_000),  # trailing zeros beyond 6 places are fine
        ("0", 0),
        ("-0", 0),
        ("0E-30", 0),
        ("1E+3", 1000 * UNIT),
        ("9223372036854.775807", INT64_MAX),
        ("007.5", 7_500_000),  # ASCII decimal text (event quantities: JSON's, no "007")
    ],
)
def test_parse_quantity(text: str, micro: int) -> None:
    assert parse_quantity(Decimal(text)) == micro
    assert parse_quantity(text) == micro


@pytest.mark.parametrize(
    "text", [" 2.25 ", "2.25\n", "1_000", "+1", ".5", "5.", "\uff11", "\u0661", "0x10", "1e"]
)
def test_parse_reads_ascii_decimal_text_only(text: str) -> None:
    """What `Decimal(str)` reads but no caller means (it read " 2.25 " as 2.25)."""
    for parse in (parse_quantity, parse_price):
        with pytest.raises(ValueError, match="not a decimal number"):
            parse(text)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("NaN", "NaN"),
        ("sNaN", "NaN"),
        ("Infinity", "finite"),
        ("-Infinity", "finite"),
        ("-1", "negative"),
        ("-0.000001", "negative"),
        ("0.0000001", "more than 6 decimal places"),
        ("1E-100", "more than 6 decimal places"),
        ("9223372036854.775808", "too large"),
        ("1E+100", "too large"),
        ("1E+999999999", "too large"),
        ("abc", "not a decimal number"),
        ("", "not a decimal number"),
    ],
)
def test_parse_quantity_errors(value: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_quantity(Decimal(value) if value not in {"abc", ""} else value)


def test_parse_rejects_float_and_bool() -> None:
    with pytest.raises(TypeError):
        parse_quantity(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse_price(True)


@pytest.mark.parametrize(
    ("text", "nano"),
    [
        ("2.00", 2 * NANO),
        ("0.000000001", 1),
        ("1.5", 1_500_000_000),
        ("9223372036.854775807", INT64_MAX),
    ],
)
def test_parse_price(text: str, nano: int) -> None:
    assert parse_price(text) == nano
    assert parse_price(Decimal(text)) == nano


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("0.0000000001", "more than 9 decimal places"),
        ("9223372036.854775808", "too large"),
        ("-0.5", "negative"),
        ("NaN", "NaN"),
    ],
)
def test_parse_price_errors(value: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_price(value)


@pytest.mark.parametrize(
    ("nano", "text"),
    [
        (12_500_000_000, "12.50"),
        (1, "0.000000001"),
        (-1_500_000_000, "-1.50"),
        (0, "0.00"),
        (-1, "-0.000000001"),
        (35 * NANO, "35.00"),
        (1_234_567_890, "1.23456789"),
        (100_000_000, "0.10"),
        (INT64_MAX, "9223372036.854775807"),
    ],
)
def test_format_money(nano: int, text: str) -> None:
    assert format_money(nano) == text


@pytest.mark.parametrize(
    ("micro", "text"),
    [(3 * UNIT, "3"), (500_000, "0.5"), (1, "0.000001"), (0, "0"), (-2_500_000, "-2.5")],
)
def test_format_quantity(micro: int, text: str) -> None:
    assert format_quantity(micro) == text


@given(st.integers(-(2**70), 2**70))
def test_money_format_parse_roundtrip(value: int) -> None:
    assert Decimal(format_money(value)) == Decimal(value).scaleb(-9)
    assert Decimal(format_quantity(value)) == Decimal(value).scaleb(-6)
    if 0 <= value <= INT64_MAX:
        assert parse_quantity(format_quantity(value)) == value
        assert parse_price(format_money(value)) == value


@pytest.mark.parametrize(
    ("numerator", "divisor", "expected"),
    [
        (1, 2, 0),
        (3, 2, 2),
        (5, 2, 2),
        (-1, 2, 0),
        (-3, 2, -2),
        (-5, 2, -2),
        (7, -2, -4),
        (500_000, 10**6, 0),
        (1_500_000, 10**6, 2),
        (1_500_001, 10**6, 2),
        (2_499_999, 10**6, 2),
        (10, 3, 3),
        (-10, 3, -3),
        (0, 5, 0),
    ],
)
def test_round_half_even_div(numerator: int, divisor: int, expected: int) -> None:
    assert round_half_even_div(numerator, divisor) == expected


@given(st.integers(-(2**130), 2**130), st.integers(-(2**70), 2**70).filter(bool))
def test_round_half_even_div_matches_fraction(numerator: int, divisor: int) -> None:
    # round() on a Fraction rounds half to even, exactly.
    assert round_half_even_div(numerator, divisor) == round(Fraction(numerator, divisor))


def test_round_half_even_div_zero() -> None:
    with pytest.raises(ZeroDivisionError):
        round_half_even_div(1, 0)


@IMPLS
def test_group_sums_are_exact_past_int64_and_refuse_no_event(impl: str) -> None:
    """Limits hold per event: a group's sums (past int64, past 2**64) refuse nothing."""
    table = RateTable.build([RateRow(10**6)])  # INT64_MAX micro costs exactly INT64_MAX nano
    n = 5
    result = get_impl(impl)(
        array("q", [INT64_MAX] * n),
        array("i", [0] * n),
        array("i", [0] * n),
        array("i", [-1] * n),
        table,
        array("q"),
        1,
    )
    assert list(result.status) == [0] * n and result.accepted == n
    assert result.group_cost_nano == [n * INT64_MAX]
    assert result.group_quantity_micro == [n * INT64_MAX]
    assert n * INT64_MAX > 2**64
