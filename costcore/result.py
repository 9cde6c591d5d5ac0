"""The result types shared by the compiled kernel and the reference implementation."""

from __future__ import annotations

from array import array
from typing import NamedTuple

__all__ = ["STATUS_OVERFLOW", "STATUS_PRICED", "BatchResult", "PriceSegment"]

STATUS_PRICED = 0
"""The event was priced and applied to its group and tier counter."""
STATUS_OVERFLOW = 1
"""The event was not applied: its own cost or its tier counter's cumulative would exceed int64."""


class PriceSegment(NamedTuple):
    """The part of a quantity priced at one unit price: what ``price_segments`` returns.

    ``tier`` is the 0-based tier of a graduated row (``None`` for a flat price), which covers
    the cumulative micro-units ``[tier_from_micro, tier_upto_micro)`` (``None``: unbounded; a
    flat price spans ``[0, None)``). The part's exact amount is
    ``quantity_micro * unit_price_nano`` (micro-units x nano per unit).
    """

    quantity_micro: int
    unit_price_nano: int
    tier: int | None
    tier_from_micro: int
    tier_upto_micro: int | None


class BatchResult:
    """Output of ``price_batch``.

    Attributes:
        cost_nano: ``array('q')``, length n. Cost of each event in nano-currency; 0 when the
            event's status is ``STATUS_OVERFLOW``.
        status: ``array('b')``, length n. ``STATUS_PRICED`` (0) or ``STATUS_OVERFLOW`` (1).
        group_cost_nano: ``list[int]``, length n_groups. Sum of accepted costs per group
            (exact, of any size: a group's sum limits no event).
        group_quantity_micro: ``list[int]``, length n_groups. Sum of accepted quantities.
        group_events: ``array('q')``, length n_groups. Number of accepted events per group.
        accepted: number of events with status 0.
    """

    __slots__ = (
        "accepted",
        "cost_nano",
        "group_cost_nano",
        "group_events",
        "group_quantity_micro",
        "status",
    )

    def __init__(
        self,
        cost_nano: array[int],
        status: array[int],
        group_cost_nano: list[int],
        group_quantity_micro: list[int],
        group_events: array[int],
        accepted: int,
    ) -> None:
        self.cost_nano = cost_nano
        self.status = status
        self.group_cost_nano = group_cost_nano
        self.group_quantity_micro = group_quantity_micro
        self.group_events = group_events
        self.accepted = accepted

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchResult):
            return NotImplemented
        return (
            self.accepted == other.accepted
            and self.cost_nano == other.cost_nano
            and self.status == other.status
            and self.group_cost_nano == other.group_cost_nano
            and self.group_quantity_micro == other.group_quantity_micro
            and self.group_events == other.group_events
        )

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside

    def __repr__(self) -> str:
        return (
            f"BatchResult(cost_nano={self.cost_nano!r}, status={self.status!r}, "
            f"group_cost_nano={self.group_cost_nano!r}, "
            f"group_quantity_micro={self.group_quantity_micro!r}, "
            f"group_events={self.group_events!r}, accepted={self.accepted!r})"
        )
