"""A project's lifetime bounds: which events of a priced batch its sums can still take."""

from __future__ import annotations

from ..storage.limbs import CAP_UNITS, bound_units
from .batches import PricedBatch

PAST_BOUNDS = (
    "the project's lifetime cost or quantity would pass what its totals can hold exactly "
    f"({CAP_UNITS} x 10^9 nano or micro-units)"
)


def past_bounds(priced: PricedBatch, bounds: tuple[int, int]) -> list[int]:
    """Positions in `priced.batch` of the events refused when the project's lifetime bounds
    (meta bound_c, bound_q) stand at `bounds`: in order, an event stays while the events kept
    before it and itself fit (service/storage/limbs.py, `bound_units`)."""
    room_cost, room_quantity = CAP_UNITS - bounds[0], CAP_UNITS - bounds[1]
    cost = quantity = 0
    refused = []
    for i, (c, q) in enumerate(zip(priced.costs, priced.batch.quantity_micro, strict=True)):
        if bound_units(cost + c) <= room_cost and bound_units(quantity + q) <= room_quantity:
            cost += c
            quantity += q
        else:
            refused.append(i)
    return refused
