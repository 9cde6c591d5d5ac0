"""Which rate-table row prices each event, and why an event has none.

The per-catalog tables here are built once per catalog (kept by its identity) so that a batch
resolves its rows in one compiled pass.
"""

from __future__ import annotations

from array import array

from costcore import rate_rows

from ..events.model import EventIn
from ..ratecards.catalog import PricingCatalog
from ..ratecards.model import SKU_PATTERN, is_valid_sku
from .batches import PendingBatch, to_epoch_us

_VersionIndex = tuple[list[int], list[dict[str, int]]]
_version_cache: dict[int, tuple[PricingCatalog, _VersionIndex]] = {}


def _version_index(catalog: PricingCatalog) -> _VersionIndex:
    """Start (epoch µs) and SKU -> row table of every version (once per catalog)."""
    hit = _version_cache.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    versions = catalog.history.versions
    tables: list[dict[str, int]] = [{} for _ in versions]
    for (vi, code), row in catalog.row_of.items():
        tables[vi][code] = row
    index = ([to_epoch_us(v.effective_from) for v in versions], tables)
    if len(_version_cache) >= 64:
        _version_cache.clear()
    _version_cache[id(catalog)] = (catalog, index)
    return index


_RowFacts = tuple[list[bool], list[str], list[str], list[int]]
_row_facts_cache: dict[int, tuple[PricingCatalog, _RowFacts]] = {}


def row_facts(catalog: PricingCatalog) -> _RowFacts:
    """Per rate-table row: tiered, category, "f"/"e", version number (once per catalog)."""
    hit = _row_facts_cache.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    skus = catalog.sku_of_row
    version = [0] * len(skus)
    for (vi, _code), row in catalog.row_of.items():
        version[row] = catalog.history.versions[vi].version
    facts = (
        [s.cumulative for s in skus],
        [s.category for s in skus],
        ["f" if s.fixed else "e" for s in skus],
        version,
    )
    if len(_row_facts_cache) >= 64:
        _row_facts_cache.clear()
    _row_facts_cache[id(catalog)] = (catalog, facts)
    return facts


def resolve_rows(batch: PendingBatch, catalog: PricingCatalog) -> array[int]:
    """Rate-table row of every event, -1 where its time or SKU has no price (the same answer
    as `catalog.row_of[(catalog.history.index_at(time), sku)]`), in one compiled pass."""
    starts, tables = _version_index(catalog)
    return rate_rows([ev.sku for ev in batch.events], batch.epoch_us, starts, tables)


def usable_rows(catalog: PricingCatalog, currency: str | None) -> list[bool]:
    """Per rate-table row: whether its version is priced in the project's currency."""
    usable = [True] * len(catalog.sku_of_row)
    if currency:
        versions = catalog.history.versions
        for (vi, _code), row in catalog.row_of.items():
            usable[row] = versions[vi].currency == currency
    return usable


def unpriceable(
    ev: EventIn, catalog: PricingCatalog | None, card_name: str, currency: str | None
) -> tuple[str, str] | None:
    if not is_valid_sku(ev.sku):  # no rate card holds it: say why, without echoing it
        return f"must match {SKU_PATTERN}", "sku"
    if catalog is None:
        return f"no rate card named {card_name!r} exists for project {ev.project!r}", "sku"
    vi = catalog.history.index_at(ev.time)
    if vi < 0:
        return (
            f"no version of rate card {card_name!r} is in effect at {ev.time.isoformat()}",
            "time",
        )
    if (vi, ev.sku) not in catalog.row_of:
        version = catalog.history.versions[vi].version
        return f"unknown SKU {ev.sku!r} in rate card {card_name!r} version {version}", "sku"
    card_currency = catalog.history.versions[vi].currency
    if currency and card_currency != currency:
        return (
            f"rate card version is priced in {card_currency} but project {ev.project!r} "
            f"keeps its ledger in {currency}",
            "sku",
        )
    return None
