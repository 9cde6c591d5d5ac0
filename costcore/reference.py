"""Reference implementation of ``price_batch`` and ``price_segments`` in plain Python integers.

This module is the specification: it is written for clarity, not speed. The compiled kernel
(``costcore._kernel.price_batch``, ``price_segments``) must produce exactly the same outputs,
the same in-place updates of ``tier_cum`` and the same exceptions for every input.

Contract
--------
``price_batch(quantity_micro, rate_row, group, tier_slot, rates, tier_cum, n_groups)``

Inputs (buffers such as ``array.array``; ``'q'`` = int64, ``'i'`` = int32):

* ``quantity_micro`` ``'q'`` len n: quantity of each event in micro-units, >= 0.
* ``rate_row`` ``'i'`` len n: row of ``rates`` that prices the event.
* ``group`` ``'i'`` len n: aggregation key in ``[0, n_groups)``.
* ``tier_slot`` ``'i'`` len n: index into ``tier_cum`` of the cumulative counter the event
  advances when its row is tiered; must be -1 when its row is flat.
* ``rates``: a :class:`~costcore.rates.RateTable`.
* ``tier_cum`` ``'q'`` len s: cumulative micro-units per counter before the batch, >= 0;
  updated in place as events are applied, in order.
* ``n_groups``: number of groups.

Invalid inputs raise (``TypeError`` for wrong types / buffer formats, ``ValueError`` for bad
lengths, ranges or rate tables) before anything is computed or mutated.

Semantics, events processed strictly in order:

* flat row (``tier_count == 0``): ``cost = round_half_even(q * unit_price_nano / 10**6)``.
* tiered row: with ``c = tier_cum[slot]`` the event covers the cumulative interval
  ``(c, c + q]``; tier k covers ``(lo_k, upto_k]`` (``lo_0 = 0``, ``lo_k = upto_{k-1}``);
  ``portion_k = max(0, min(c + q, upto_k) - max(c, lo_k))`` (the parts
  ``price_segments_reference(rates, row, c, q)`` returns) and
  ``cost = round_half_even(sum_k(portion_k * price_k) / 10**6)``: one rounding of the exact
  sum. On success ``tier_cum[slot] = c + q``.
* an event gets status 1 (overflow) and is *not applied* (cost 0, no group update, counter not
  advanced) when ``c + q`` or its cost would exceed ``INT64_MAX``. Otherwise status 0 and the
  event is added to its group. Limits hold per event and per tier counter: a group's sums are
  exact integers of any size (lists of Python ints), so no event is refused for its neighbours.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from costcore._contract import check_events, check_segment_args, check_tier_cum, prepare_batch
from costcore.money import INT64_MAX, QUANTITY_SCALE, round_half_even_div
from costcore.rates import RateTable, check_rate_columns
from costcore.result import STATUS_OVERFLOW, STATUS_PRICED, BatchResult, PriceSegment

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["price_batch_reference", "price_segments_reference"]


def _split(rates: RateTable, row: int, cum_before: int, quantity: int) -> list[PriceSegment]:
    """The segment split (``price_segments``' contract) of checked arguments."""
    count = rates.tier_count[row]
    if count == 0:
        return [PriceSegment(quantity, rates.unit_price_nano[row], None, 0, None)]
    start = rates.tier_start[row]
    cum_after = cum_before + quantity
    out: list[PriceSegment] = []
    lower = 0
    for k in range(count):
        upper = rates.tier_upto_micro[start + k]
        portion = max(0, min(cum_after, upper) - max(cum_before, lower))
        if portion or (quantity == 0 and lower <= cum_before < upper):
            unbounded = upper == INT64_MAX
            price = rates.tier_price_nano[start + k]
            out.append(PriceSegment(portion, price, k, lower, None if unbounded else upper))
        lower = upper
    return out


def price_segments_reference(
    rates: RateTable, row: int, cum_before: int, quantity_micro: int
) -> list[PriceSegment]:
    """Split ``quantity_micro`` micro-units priced by rate row ``row`` into its priced parts.

    The pricing rule of every price the ledger charges, in one place: ``price_batch`` prices an
    event as the exact sum of its parts' ``quantity_micro * unit_price_nano``, rounded once.

    * flat row (``tier_count == 0``): one part, the whole quantity at ``unit_price_nano``
      (``tier`` None; ``cum_before`` plays no part).
    * tiered row: the quantity covers the cumulative micro-units ``[c, c + q)`` from
      ``c = cum_before``; tier k spans ``[lo_k, upto_k)`` (``lo_0 = 0``, ``lo_k = upto_{k-1}``)
      and its part is ``max(0, min(c + q, upto_k) - max(c, lo_k))``. The parts with a non-zero
      quantity, in tier order; a zero quantity gives the one tier the counter is in (a
      zero part, none when ``c`` is ``INT64_MAX``).

    Raises ``TypeError`` or ``ValueError`` (``costcore._contract.check_segment_args``) for bad
    arguments, ``c + q > INT64_MAX`` included (the event ``price_batch`` refuses).
    """
    check_segment_args(rates, row, cum_before, quantity_micro)
    return _split(rates, row, cum_before, quantity_micro)


def price_batch_reference(
    quantity_micro: Buffer,
    rate_row: Buffer,
    group: Buffer,
    tier_slot: Buffer,
    rates: RateTable,
    tier_cum: Buffer,
    n_groups: int,
) -> BatchResult:
    """Price a batch of usage events; see the module docstring for the full contract."""
    batch = prepare_batch(quantity_micro, rate_row, group, tier_slot, rates, tier_cum, n_groups)
    rates = batch.rates
    check_rate_columns(
        rates.unit_price_nano,
        rates.tier_start,
        rates.tier_count,
        rates.tier_upto_micro,
        rates.tier_price_nano,
    )
    quantities = batch.quantity_micro.tolist()
    rows = batch.rate_row.tolist()
    groups = batch.group.tolist()
    slots = batch.tier_slot.tolist()
    cum = batch.tier_cum  # memoryview: writes go straight to the caller's buffer
    check_tier_cum(cum.tolist())
    check_events(quantities, rows, groups, slots, rates.tier_count, batch.n_groups, len(cum))

    n = len(quantities)
    cost_nano = array("q", bytes(8 * n))
    status = array("b", bytes(n))
    group_cost = [0] * batch.n_groups
    group_quantity = [0] * batch.n_groups
    group_events = array("q", bytes(8 * batch.n_groups))
    accepted = 0

    for i in range(n):
        quantity = quantities[i]
        row = rows[i]
        key = groups[i]
        slot = slots[i]

        if rates.tier_count[row] == 0:
            amount = quantity * rates.unit_price_nano[row]
            new_cum = None
        else:
            cum_before = cum[slot]
            new_cum = cum_before + quantity
            if new_cum > INT64_MAX:
                status[i] = STATUS_OVERFLOW
                continue
            amount = sum(
                part.quantity_micro * part.unit_price_nano
                for part in _split(rates, row, cum_before, quantity)
            )

        cost = round_half_even_div(amount, QUANTITY_SCALE)
        if cost > INT64_MAX:
            status[i] = STATUS_OVERFLOW
            continue

        status[i] = STATUS_PRICED
        cost_nano[i] = cost
        group_cost[key] += cost
        group_quantity[key] += quantity
        group_events[key] += 1
        accepted += 1
        if new_cum is not None:
            cum[slot] = new_cum

    return BatchResult(cost_nano, status, group_cost, group_quantity, group_events, accepted)
