"""Columnar rate tables: flat unit prices and graduated (tiered) prices.

A ``RateTable`` has one *row* per priced thing (e.g. a SKU at a point in time) and stores five
``array.array`` columns:

* ``unit_price_nano`` ``'q'`` (len r): flat price per unit in nano-currency. Ignored for
  tiered rows (it may hold a list price for display).
* ``tier_start`` ``'i'`` (len r): index of the row's first tier in the tier columns.
* ``tier_count`` ``'i'`` (len r): number of tiers; 0 means the row has a flat price.
* ``tier_upto_micro`` ``'q'`` (len t): cumulative upper bound of each tier in micro-units.
  Tier k of a row covers the cumulative-quantity interval ``(lo_k, upto_k]`` with ``lo_0 = 0``
  and ``lo_k = upto_{k-1}``; equivalently it holds the micro-units numbered
  ``lo_k .. upto_k - 1`` (``upto`` is the exclusive bound on the unit index). The last tier of
  a row has ``upto = INT64_MAX``, meaning unbounded.
* ``tier_price_nano`` ``'q'`` (len t): price per unit in nano-currency within the tier.

Invariants (checked on construction and again by every ``price_batch`` call, because the
columns are mutable arrays): all prices >= 0; tier counts >= 0; a tiered row's tiers lie inside
the tier columns; ``upto`` strictly increases within a row starting above 0; the last ``upto``
is ``INT64_MAX``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import NamedTuple, NoReturn

from costcore.money import INT64_MAX

__all__ = ["INT32_MAX", "RateRow", "RateTable", "check_rate_columns", "check_rate_row"]

INT32_MAX = 2**31 - 1

Tier = tuple[int | None, int]


class RateRow(NamedTuple):
    """One rate row for :meth:`RateTable.build`.

    ``tiers`` is empty for a flat price, otherwise ``(upto_micro, price_nano)`` pairs with
    strictly increasing ``upto_micro`` and ``None`` (unbounded) as the last ``upto_micro``.
    """

    unit_price_nano: int
    tiers: tuple[Tier, ...] = ()


def check_rate_columns(
    unit_price_nano: Sequence[int],
    tier_start: Sequence[int],
    tier_count: Sequence[int],
    tier_upto_micro: Sequence[int],
    tier_price_nano: Sequence[int],
) -> None:
    """Raise ``ValueError`` describing the first violated rate-table invariant, if any.

    This is the single source of truth for rate-table validity; the compiled kernel performs
    the same checks in C and calls this function to produce the identical message.
    """
    n_rows = len(unit_price_nano)
    n_tiers = len(tier_upto_micro)
    if len(tier_start) != n_rows or len(tier_count) != n_rows:
        raise ValueError(
            "rate table row columns differ in length: "
            f"unit_price_nano={n_rows}, tier_start={len(tier_start)}, "
            f"tier_count={len(tier_count)}"
        )
    if len(tier_price_nano) != n_tiers:
        raise ValueError(
            "rate table tier columns differ in length: "
            f"tier_upto_micro={n_tiers}, tier_price_nano={len(tier_price_nano)}"
        )
    for row in range(n_rows):
        check_rate_row(
            row, unit_price_nano, tier_start, tier_count, tier_upto_micro, tier_price_nano
        )


def check_rate_row(
    row: int,
    unit_price_nano: Sequence[int],
    tier_start: Sequence[int],
    tier_count: Sequence[int],
    tier_upto_micro: Sequence[int],
    tier_price_nano: Sequence[int],
) -> None:
    """``check_rate_columns`` for one row (in range) of columns of matching lengths."""
    n_tiers = len(tier_upto_micro)
    price = unit_price_nano[row]
    if price < 0:
        raise ValueError(f"rate row {row}: unit_price_nano is negative ({price})")
    count = tier_count[row]
    if count < 0:
        raise ValueError(f"rate row {row}: tier_count is negative ({count})")
    if count == 0:
        return
    start = tier_start[row]
    if start < 0 or start + count > n_tiers:
        raise ValueError(
            f"rate row {row}: tiers [{start}, {start + count}) are outside the "
            f"{n_tiers} tier entries"
        )
    previous = 0
    for k in range(start, start + count):
        tier_price = tier_price_nano[k]
        if tier_price < 0:
            raise ValueError(f"rate row {row}, tier {k - start}: price is negative ({tier_price})")
        upto = tier_upto_micro[k]
        if upto <= previous:
            raise ValueError(
                f"rate row {row}, tier {k - start}: upto_micro {upto} must be greater "
                f"than {previous}"
            )
        previous = upto
    if previous != INT64_MAX:
        raise ValueError(
            f"rate row {row}: the last tier must be unbounded (upto_micro = INT64_MAX), "
            f"got {previous}"
        )


def _int_column(values: Iterable[int], typecode: str, name: str) -> array[int]:
    try:
        return array(typecode, values)
    except OverflowError:
        raise ValueError(
            f"rate table column {name} has a value outside its integer range"
        ) from None


class RateTable:
    """Immutable-by-attribute columnar rate table (see the module docstring for the layout).

    The constructor copies its inputs into fresh ``array.array`` columns and validates them.
    The arrays themselves are mutable objects: do not modify them; ``price_batch``
    re-validates the columns on every call and raises ``ValueError`` if they were corrupted.
    """

    __slots__ = (
        "tier_count",
        "tier_price_nano",
        "tier_start",
        "tier_upto_micro",
        "unit_price_nano",
    )

    unit_price_nano: array[int]
    tier_start: array[int]
    tier_count: array[int]
    tier_upto_micro: array[int]
    tier_price_nano: array[int]

    def __init__(
        self,
        unit_price_nano: Iterable[int],
        tier_start: Iterable[int],
        tier_count: Iterable[int],
        tier_upto_micro: Iterable[int],
        tier_price_nano: Iterable[int],
    ) -> None:
        columns = {
            "unit_price_nano": _int_column(unit_price_nano, "q", "unit_price_nano"),
            "tier_start": _int_column(tier_start, "i", "tier_start"),
            "tier_count": _int_column(tier_count, "i", "tier_count"),
            "tier_upto_micro": _int_column(tier_upto_micro, "q", "tier_upto_micro"),
            "tier_price_nano": _int_column(tier_price_nano, "q", "tier_price_nano"),
        }
        check_rate_columns(
            columns["unit_price_nano"],
            columns["tier_start"],
            columns["tier_count"],
            columns["tier_upto_micro"],
            columns["tier_price_nano"],
        )
        for name, column in columns.items():
            object.__setattr__(self, name, column)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"RateTable is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"RateTable is immutable (cannot delete {name!r})")

    @classmethod
    def build(cls, rows: Sequence[RateRow]) -> RateTable:
        """Build a table from rows, validating each row's tiers (raises ``ValueError``)."""
        unit_price: list[int] = []
        starts: list[int] = []
        counts: list[int] = []
        uptos: list[int] = []
        prices: list[int] = []
        for index, raw in enumerate(rows):
            row = RateRow(*raw)
            _check_int(row.unit_price_nano, f"rate row {index}: unit_price_nano")
            unit_price.append(row.unit_price_nano)
            starts.append(len(uptos) if row.tiers else 0)
            counts.append(len(row.tiers))
            previous = 0
            for k, tier in enumerate(row.tiers):
                if len(tier) != 2:
                    raise ValueError(
                        f"rate row {index}, tier {k}: expected (upto_micro, price_nano), "
                        f"got {tier!r}"
                    )
                upto, price = tier
                _check_int(price, f"rate row {index}, tier {k}: price_nano")
                last = k == len(row.tiers) - 1
                if upto is None:
                    if not last:
                        raise ValueError(
                            f"rate row {index}, tier {k}: only the last tier may be "
                            "unbounded (upto_micro None)"
                        )
                    upto = INT64_MAX
                else:
                    _check_int(upto, f"rate row {index}, tier {k}: upto_micro")
                    if upto <= previous:
                        raise ValueError(
                            f"rate row {index}, tier {k}: upto_micro {upto} must be greater "
                            f"than {previous}"
                        )
                    if last and upto != INT64_MAX:
                        raise ValueError(
                            f"rate row {index}: the last tier must be unbounded "
                            f"(upto_micro None), got {upto}"
                        )
                previous = upto
                uptos.append(upto)
                prices.append(price)
        if len(uptos) > INT32_MAX:
            raise ValueError("rate table has too many tiers for int32 tier_start")
        return cls(unit_price, starts, counts, uptos, prices)

    @property
    def n_rows(self) -> int:
        return len(self.unit_price_nano)

    @property
    def n_tiers(self) -> int:
        return len(self.tier_upto_micro)

    def row(self, index: int) -> RateRow:
        """The row at ``index`` as a :class:`RateRow` (inverse of :meth:`build`)."""
        count = self.tier_count[index]
        start = self.tier_start[index]
        tiers: list[Tier] = []
        for k in range(start, start + count):
            upto = self.tier_upto_micro[k]
            tiers.append((None if upto == INT64_MAX else upto, self.tier_price_nano[k]))
        return RateRow(self.unit_price_nano[index], tuple(tiers))

    def __len__(self) -> int:
        return self.n_rows

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateTable):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RateTable.build({[self.row(i) for i in range(self.n_rows)]!r})"


def _check_int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value <= INT64_MAX:
        raise ValueError(f"{what} must be in [0, INT64_MAX], got {value}")
