"""Rate cards in the form the pricing core reads, cached per card revision.

Every (version, SKU) pair of a card becomes one row of a `costcore.RateTable`, so a
batch whose events straddle several versions is priced in one kernel call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from costcore import RateTable
from costcore.rates import RateRow

from .model import PricedSku, RateCardHistory, RateCardIn, RateCardVersion

if TYPE_CHECKING:
    from ..stores import Stores

_version_decoder = msgspec.json.Decoder(RateCardVersion)


@dataclass(frozen=True)
class PricingCatalog:
    name: str
    revision: int
    history: RateCardHistory
    table: RateTable
    row_of: dict[tuple[int, str], int]  # (version index, sku) -> rate row
    sku_of_row: list[PricedSku]

    @property
    def currency(self) -> str | None:
        return self.history.currency


def build_catalog(name: str, revision: int, versions: list[RateCardVersion]) -> PricingCatalog:
    history = RateCardHistory(versions)
    rows: list[RateRow] = []
    row_of: dict[tuple[int, str], int] = {}
    skus: list[PricedSku] = []
    for vi in range(len(history.versions)):
        for code, sku in history.priced(vi).items():
            row_of[(vi, code)] = len(rows)
            rows.append(sku.rate_row)
            skus.append(sku)
    return PricingCatalog(name, revision, history, RateTable.build(rows), row_of, skus)


class RateCards:
    """Reads and writes rate cards; hands out pricing catalogs, rebuilt only on a new revision."""

    def __init__(self, store: Stores) -> None:
        self.store = store
        self._cache: dict[str, PricingCatalog] = {}

    async def put(self, name: str, card: RateCardIn) -> RateCardVersion:
        version = RateCardVersion(
            name=name,
            version=0,
            currency=card.currency,
            effective_from=card.effective_from.astimezone(UTC),
            created_at=datetime.now(UTC),
            skus=card.skus,
            description=card.description,
        )
        # The store numbers versions atomically; the number is the hash field, not in the JSON.
        version.version = await self.store.ratecards.put_rate_card_version(
            name, msgspec.json.encode(version)
        )
        return version

    async def versions(self, name: str) -> list[RateCardVersion]:
        versions = []
        for number, raw in await self.store.ratecards.rate_card_versions(name):
            version = _version_decoder.decode(raw)
            version.version = number
            versions.append(version)
        return versions

    async def catalog(self, name: str) -> PricingCatalog | None:
        revision = await self.store.ratecards.rate_card_revision(name)
        if revision == 0:
            return None
        cached = self._cache.get(name)
        if cached is not None and cached.revision == revision:
            return cached
        catalog = build_catalog(name, revision, await self.versions(name))
        self._cache[name] = catalog
        return catalog
