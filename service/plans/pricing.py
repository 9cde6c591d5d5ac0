"""Pricing a plan's lines against a rate card's SKUs, with tiers across stages.

**Tiers across stages.** Graduated tiers apply to the plan's cumulative quantity of each SKU,
taken in stage order, and within a stage in the order: model-derived hours, ``resources``,
``overheads``. This is the ledger's pricer itself (``costcore.price_batch`` prices the lines,
``costcore.price_segments`` shows a line's parts), without the monthly reset of a rate card's
tiers (see :mod:`service.plans.estimate`).
"""

from __future__ import annotations

from array import array
from typing import Literal

# Only costcore's public API (its package ``__all__``), not its submodules' layout.
from costcore import STATUS_OVERFLOW, RateTable, price_batch, price_segments

from ..ratecards.model import COST_CATEGORIES, PricedSku
from .model import PlanError, ResourceIn
from .numbers import parse_micro

__all__ = ["Item", "Sums", "is_hour_unit", "price_lines", "resource_items", "tier_segments"]

_HOUR_UNITS = frozenset({"h", "hr", "hrs"})

Item = tuple[Literal["model", "resource", "overhead"], str, str, int]
"""A line to price: (kind, JSON path, SKU code, quantity in micro-units)."""


def is_hour_unit(unit: str) -> bool:
    """Whether a SKU unit counts hours (``hour``, ``gpu_hour``, ``h``, ...)."""
    lowered = unit.lower()
    return "hour" in lowered or lowered in _HOUR_UNITS


def tier_segments(sku: PricedSku, start: int, quantity: int) -> list[tuple[int, int]]:
    """Split ``quantity`` micro-units, starting at cumulative ``start``, over the SKU's tiers.

    Returns ``(quantity_micro, unit_price_nano)`` pairs with a non-zero quantity (a single pair
    at the SKU's unit price when it has no tiers).
    """
    parts = price_segments(RateTable.build([sku.rate_row]), 0, start, quantity)
    return [
        (part.quantity_micro, part.unit_price_nano)
        for part in parts
        if part.quantity_micro or part.tier is None
    ]


class Sums:
    """Running money totals (nano) for a stage or the whole plan."""

    __slots__ = ("categories", "elastic", "fixed")

    def __init__(self) -> None:
        self.fixed = 0
        self.elastic = 0
        self.categories: dict[str, int] = dict.fromkeys(COST_CATEGORIES, 0)

    def add(self, sku: PricedSku, cost: int) -> None:
        if sku.fixed:
            self.fixed += cost
        else:
            self.elastic += cost
        self.categories[sku.category] = self.categories.get(sku.category, 0) + cost

    @property
    def subtotal(self) -> int:
        return self.fixed + self.elastic


def price_lines(items: list[Item], skus: dict[str, PricedSku]) -> list[int]:
    """Cost in nano of each line, priced in order by ``costcore.price_batch``.

    One rate row per SKU used and one tier counter per tiered SKU (starting at 0), so tiers
    apply to the plan's cumulative quantity of the SKU in line order.
    """
    rows: dict[str, int] = {}
    slots: dict[str, int] = {}
    for _, _, code, _ in items:
        if code not in rows:
            rows[code] = len(rows)
            if skus[code].cumulative:
                slots[code] = len(slots)
    table = RateTable.build([skus[code].rate_row for code in rows])
    result = price_batch(
        array("q", [qty for *_, qty in items]),
        array("i", [rows[code] for _, _, code, _ in items]),
        array("i", range(len(items))),
        array("i", [slots.get(code, -1) for _, _, code, _ in items]),
        table,
        array("q", bytes(8 * len(slots))),
        max(1, len(items)),
    )
    for (_, path, code, _), status in zip(items, result.status, strict=True):
        if status == STATUS_OVERFLOW:
            raise PlanError(
                path, f"cost or cumulative quantity of SKU {code!r} exceeds the ledger's range"
            )
    return list(result.cost_nano)


def resource_items(
    resources: list[ResourceIn],
    kind: Literal["resource", "overhead"],
    where: str,
    skus: dict[str, PricedSku],
) -> list[Item]:
    """The lines of a stage's `resources` or `overheads`; unknown SKUs are a `PlanError`."""
    out: list[Item] = []
    for j, res in enumerate(resources):
        path = f"{where}[{j}]"
        if res.sku not in skus:
            raise PlanError(f"{path}.sku", f"unknown SKU {res.sku!r} in the rate card")
        out.append((kind, path, res.sku, parse_micro(res.quantity, f"{path}.quantity")))
    return out
