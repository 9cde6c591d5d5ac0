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

from costcore.money import INT64_MAX
from costcore.rates import RateTable, check_rate_columns, check_rate_row

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "PreparedBatch",
    "as_int_view",
    "check_events",
    "check_segment_args",
    "check_tier_cum",
    "prepare_batch",
]

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


def _int_arg(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return int(value)


def check_segment_args(rates: RateTable, row: int, cum_before: int, quantity_micro: int) -> None:
    """Raise for the first bad argument of ``price_segments``, checked in this order: types,
    the row (in range, its own columns valid as ``check_rate_columns`` says: the columns are
    mutable arrays), ``cum_before`` and ``quantity_micro`` (>= 0) and their sum (<= INT64_MAX,
    the limit a tier counter has in ``price_batch``)."""
    if not isinstance(rates, RateTable):
        raise TypeError(f"rates must be a RateTable, not {type(rates).__name__}")
    row = _int_arg(row, "row")
    cum_before = _int_arg(cum_before, "cum_before")
    quantity_micro = _int_arg(quantity_micro, "quantity_micro")
    n_rows = len(rates.unit_price_nano)
    if (
        len(rates.tier_start) != n_rows
        or len(rates.tier_count) != n_rows
        or len(rates.tier_price_nano) != len(rates.tier_upto_micro)
    ):
        check_rate_columns(  # raises the message naming the lengths
            rates.unit_price_nano,
            rates.tier_start,
            rates.tier_count,
            rates.tier_upto_micro,
            rates.tier_price_nano,
        )
    if not 0 <= row < n_rows:
        raise ValueError(f"row {row} is out of range [0, {n_rows})")
    check_rate_row(
        row,
        rates.unit_price_nano,
        rates.tier_start,
        rates.tier_count,
        rates.tier_upto_micro,
        rates.tier_price_nano,
    )
    if cum_before < 0:
        raise ValueError(f"cum_before is negative ({cum_before})")
    if quantity_micro < 0:
        raise ValueError(f"quantity_micro is negative ({quantity_micro})")
    if cum_before + quantity_micro > INT64_MAX:
        raise ValueError(
            f"cum_before + quantity_micro = {cum_before + quantity_micro} exceeds INT64_MAX"
        )
