"""Pricing a logged event again for the export: its priced SKU in the rate-card version
recorded with it, and its parts at each unit price (`costcore.price_segments`, the split the
pricing kernel applies: graduated tiers split an event; the month's tier counters are replayed
from the log in the order it was applied).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# Only costcore's public API: the compiled segment split is the one pricing rule.
from costcore import RateTable, price_segments, round_half_even_div

from ..errors import Conflict
from ..ledger.eventlog import LoggedEvent
from ..ratecards.catalog import PricingCatalog
from ..ratecards.model import PricedSku, RateCardVersion

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

SplitParts = tuple[RateTable, int] | None
"""The rate row an event was priced by, ``(table, row)``, for ``segments``."""


class ExportError(Conflict):
    """The log cannot be exported as it stands (e.g. its rate card is gone)."""

    title = "Cannot export"


@dataclass(frozen=True)
class Segment:
    """The part of one event priced at one unit price (the whole event for a flat price)."""

    quantity_micro: int
    unit_price_nano: int
    billed_nano: int
    tier: int | None = None  # 0-based tier index for a graduated price
    tier_from_micro: int = 0
    tier_upto_micro: int | None = None  # None: unbounded


def month_of(epoch_us: int) -> str:
    """``YYYYMM`` (UTC), the key graduated tiers accumulate under, as ingestion computes it."""
    return (_EPOCH + timedelta(microseconds=epoch_us)).strftime("%Y%m")


def segments(
    sku: PricedSku, quantity_micro: int, cost_nano: int, cum_before: int, split: SplitParts = None
) -> list[Segment]:
    """The event's parts as the pricing kernel splits it, sharing its ledger cost among them.

    ``cum_before`` is the project's cumulative quantity of the SKU that month before the
    event (ignored for a flat price); ``split`` is the rate row that priced it (``(table,
    row)`` of the catalog), else a one-row table is built from ``sku``. Each part's billed
    cost is its share of ``cost_nano`` in proportion to its exact list amount, rounded
    half-to-even cumulatively so the parts add up to ``cost_nano`` exactly.
    """
    table, row = split if split is not None else (RateTable.build([sku.rate_row]), 0)
    try:
        parts = price_segments(table, row, cum_before, quantity_micro)
    except ValueError:  # past INT64_MAX, which ingestion never accepts
        raise ExportError(f"SKU {sku.code!r}: quantity beyond the last tier") from None
    if not parts:
        raise ExportError(f"SKU {sku.code!r}: quantity beyond the last tier")
    if len(parts) == 1:  # the whole cost (what sharing by one amount gives, exactly)
        (p,) = parts
        return [
            Segment(
                p.quantity_micro,
                p.unit_price_nano,
                cost_nano,
                p.tier,
                p.tier_from_micro,
                p.tier_upto_micro,
            )
        ]
    amounts = [part.quantity_micro * part.unit_price_nano for part in parts]
    total = sum(amounts)
    billed: list[int] = []
    running = shared = 0
    for i, amount in enumerate(amounts):
        running += amount
        if total:
            upto_here = round_half_even_div(cost_nano * running, total)
        else:  # nothing to share by: the last part carries the cost
            upto_here = cost_nano if i == len(amounts) - 1 else 0
        billed.append(upto_here - shared)
        shared = upto_here
    return [
        Segment(
            p.quantity_micro,
            p.unit_price_nano,
            b,
            p.tier,
            p.tier_from_micro,
            p.tier_upto_micro,
        )
        for p, b in zip(parts, billed, strict=True)
    ]


class LogPricing:
    """Finds the priced SKU of a logged event and replays the graduated-tier counters."""

    def __init__(self, catalog: PricingCatalog | None) -> None:
        self.catalog = catalog
        self._index: dict[int, int] = {}
        if catalog is not None:
            for i, v in enumerate(catalog.history.versions):
                self._index[v.version] = i
        self._cumulative: dict[tuple[str, str], int] = {}

    def _version_index(self, row: LoggedEvent) -> int:
        vi = self._index.get(row.version)
        if vi is None and self.catalog is not None:  # not expected: versions are never deleted
            vi = self.catalog.history.index_at(_EPOCH + timedelta(microseconds=row.epoch_us))
        return -1 if vi is None else vi

    def sku_of(self, row: LoggedEvent) -> tuple[RateCardVersion, PricedSku]:
        if self.catalog is None:
            raise ExportError("the project's rate card no longer exists")
        history = self.catalog.history
        vi = self._version_index(row)
        sku = history.priced(vi).get(row.sku) if vi >= 0 else None
        if sku is None:
            raise ExportError(
                f"event {row.id!r}: SKU {row.sku!r} is not in rate card "
                f"{self.catalog.name!r} version {row.version}"
            )
        return history.versions[vi], sku

    def counts(self, version: int, sku: str) -> bool:
        """Whether events of this rate-card version and SKU move a tier counter (`segments`)."""
        vi = self._index.get(version)
        if self.catalog is None or vi is None:
            return False
        priced = self.catalog.history.priced(vi).get(sku)
        return priced is not None and priced.cumulative

    def set_counters(self, cumulative: dict[tuple[str, str], int]) -> None:
        """Take the counters (month, SKU) -> quantity as they stand before the next event."""
        self._cumulative.update(cumulative)

    def segments(self, row: LoggedEvent, sku: PricedSku) -> list[Segment]:
        """The event's priced parts; advances the tier counter exactly as ingestion did."""
        split: SplitParts = None
        if self.catalog is not None:
            rate_row = self.catalog.row_of.get((self._version_index(row), row.sku))
            if rate_row is not None:
                split = (self.catalog.table, rate_row)
        if not sku.cumulative:
            return segments(sku, row.quantity_micro, row.cost_nano, 0, split)
        key = (month_of(row.epoch_us), row.sku)
        before = self._cumulative.get(key, 0)
        self._cumulative[key] = before + row.quantity_micro
        return segments(sku, row.quantity_micro, row.cost_nano, before, split)
