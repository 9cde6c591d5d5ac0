"""What a worker keeps of a project between batches: its settings, its rate card's pricing
catalog and its budgets.

A stale settings or catalog entry can cost a retry but never a wrong total: the ingest script
refuses a batch priced with settings that moved (then they are read again), and events are
only ever rejected as unpriceable on freshly read ones. Budgets are read again when their
revision moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ..budgets.model import Budget
from ..projects.model import ProjectSettings
from ..ratecards.catalog import PricingCatalog, RateCards

if TYPE_CHECKING:
    from ..stores import Stores

_CACHE_LIMIT = 10_000  # projects whose settings a worker keeps
_budget_decoder = msgspec.json.Decoder(Budget)


class ProjectCaches:
    def __init__(self, store: Stores, rate_cards: RateCards) -> None:
        self.store = store
        self.rate_cards = rate_cards
        self._settings: dict[str, ProjectSettings] = {}
        self._catalogs: dict[str, PricingCatalog] = {}
        self._budgets: dict[str, tuple[str, list[Budget]]] = {}

    async def settings_of(self, project: str, fresh: bool) -> ProjectSettings:
        """The project's settings, from this worker's cache unless `fresh`."""
        settings = None if fresh else self._settings.get(project)
        if settings is None:
            if len(self._settings) >= _CACHE_LIMIT:
                self._settings.clear()
            settings = self._settings[project] = ProjectSettings.of(
                await self.store.projects.project_meta(project)
            )
        return settings

    async def catalog_of(self, name: str, fresh: bool) -> PricingCatalog | None:
        """The rate card's pricing catalog, from this worker's cache unless `fresh`."""
        catalog = None if fresh else self._catalogs.get(name)
        if catalog is None:
            catalog = await self.rate_cards.catalog(name)
            if catalog is not None:
                self._catalogs[name] = catalog
        return catalog

    async def budgets_of(self, project: str, revision: str) -> list[Budget]:
        """The project's budgets, read again only when their revision moved."""
        cached = self._budgets.get(project)
        if cached is not None and cached[0] == revision:
            return cached[1]
        budgets = [_budget_decoder.decode(raw) for raw in await self.store.budgets.budgets(project)]
        self._budgets[project] = (revision, budgets)
        return budgets
