"""Input checks shared by the compiled kernel and the reference implementation.

Both implementations run :func:`prepare_batch` (types, shapes, lengths), then
``check_rate_columns``, :func:`check_tier_cum` and :func:`check_events`, in that order, before
touching any output. The kernel performs the element-wise checks in C and, only when it finds a
violation, calls these Python functions to raise the exact same ``ValueError``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from costcore.rates import RateTable

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["PreparedBatch", "as_int_view", "check_events", "check_tier_cum", "prepare_batch"]

# Native-order signed integer struct codes, by item size.
_SIGNED_CODES = frozenset("bhilqn")


class PreparedBatch(NamedTuple):
    """Validated 1-D C-contiguous memoryviews with exact formats ``'q'`` / ``'i'``."""

    quantity_micro: memoryview
    rate_row: memoryview
    group: memoryview
    tier_slot: memoryview
    tier_cum: memoryview
    rates: RateTable
    n_groups: int


def as_int_view(
    obj: Buffer, name: str, typecode: Literal["q", "i"], *, writable: bool = False
) -> memoryview:
    """Return ``obj`` as a 1-D C-contiguous memoryview of format ``typecode`` ('q' or 'i').

    Any native signed integer buffer with the right item size is accepted (e.g. ``array('l')``
    or a NumPy ``int64`` array on LP64 platforms for ``'q'``). Raises ``TypeError`` otherwise.
    """
    expected = "array('q') / int64" if typecode == "q" else "array('i') / int32"
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{name} must support the buffer protocol ({expected}), not {type(obj).__name__}"
        ) from None
    itemsize = 8 if typecode == "q" else 4
    fmt = view.format[1:] if view.format.startswith("@") else view.format
    if view.ndim != 1 or fmt not in _SIGNED_CODES or view.itemsize != itemsize:
        raise TypeError(
            f"{name} must be a 1-D buffer of {expected}, "
            f"got format {view.format!r} with itemsize {view.itemsize} and ndim {view.ndim}"
        )
    if not view.c_contiguous:
        raise TypeError(f"{name} must be C-contiguous")
    if writable and view.readonly:
        raise TypeError(f"{name} must be a writable buffer (it is updated in place)")
    if view.format != typecode:
        view = view.cast("B").cast(typecode)
    return view


def prepare_batch(
    quantity_micro: Buffer,
    rate_row: Buffer,
    group: Buffer,
    tier_slot: Buffer,
    rates: RateTable,
    tier_cum: Buffer,
    n_groups: int,
) -> PreparedBatch:
    """Check argument types, buffer formats and lengths; return normalised views."""
    if not isinstance(rates, RateTable):
        raise TypeError(f"rates must be a RateTable, not {type(rates).__name__}")
    if isinstance(n_groups, bool):
        raise TypeError("n_groups must be an int, not bool")
    n_groups = operator.index(n_groups)
    if n_groups < 0:
        raise ValueError(f"n_groups must be >= 0, got {n_groups}")
    quantity_v = as_int_view(quantity_micro, "quantity_micro", "q")
    rate_row_v = as_int_view(rate_row, "rate_row", "i")
    group_v = as_int_view(group, "group", "i")
    tier_slot_v = as_int_view(tier_slot, "tier_slot", "i")
    tier_cum_v = as_int_view(tier_cum, "tier_cum", "q", writable=True)
    n = len(quantity_v)
    if not len(rate_row_v) == len(group_v) == len(tier_slot_v) == n:
        raise ValueError(
            "event arrays differ in length: "
            f"quantity_micro={n}, rate_row={len(rate_row_v)}, group={len(group_v)}, "
            f"tier_slot={len(tier_slot_v)}"
        )
    return PreparedBatch(quantity_v, rate_row_v, group_v, tier_slot_v, tier_cum_v, rates, n_groups)


def check_tier_cum(tier_cum: Sequence[int]) -> None:
    """Every cumulative counter must be >= 0."""
    for slot, value in enumerate(tier_cum):
        if value < 0:
            raise ValueError(f"tier_cum[{slot}] is negative ({value})")


def check_events(
    quantity_micro: Sequence[int],
    rate_row: Sequence[int],
    group: Sequence[int],
    tier_slot: Sequence[int],
    tier_count: Sequence[int],
    n_groups: int,
    n_slots: int,
) -> None:
    """Raise ``ValueError`` for the first invalid event (checks per event in this order)."""
    n_rows = len(tier_count)
    for i in range(len(quantity_micro)):
        quantity = quantity_micro[i]
        if quantity < 0:
            raise ValueError(f"quantity_micro[{i}] is negative ({quantity})")
        row = rate_row[i]
        if not 0 <= row < n_rows:
            raise ValueError(f"rate_row[{i}] = {row} is out of range [0, {n_rows})")
        key = group[i]
        if not 0 <= key < n_groups:
            raise ValueError(f"group[{i}] = {key} is out of range [0, {n_groups})")
        slot = tier_slot[i]
        if tier_count[row] > 0:
            if not 0 <= slot < n_slots:
                raise ValueError(
                    f"tier_slot[{i}] = {slot}: rate row {row} is tiered, so the slot must be "
                    f"in [0, {n_slots})"
                )
        elif slot != -1:
            raise ValueError(
                f"tier_slot[{i}] = {slot}: rate row {row} is flat, so the slot must be -1"
            )
