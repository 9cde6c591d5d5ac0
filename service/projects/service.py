"""Project use cases: list, read and change a project's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..auth.model import Principal
from ..errors import Conflict, Invalid
from ..ratecards.catalog import PricingCatalog, RateCards
from .model import ProjectIn, ProjectSettings, ProjectView, settings_fields

if TYPE_CHECKING:
    from ..stores import Stores


class UnknownRateCard(Invalid):
    def __init__(self, name: str) -> None:
        super().__init__("rate_card", f"no rate card named {name!r}")
        self.args = (name,)
        self.name = name


class CurrencyConflict(Conflict):
    """The project's ledger is kept in `currency`; the rate card is priced in another."""

    kind = "currency-conflict"

    def __init__(
        self, project: str, currency: str, rate_card: str, card_currency: str | None
    ) -> None:
        super().__init__(currency, rate_card, card_currency)
        self.project = project
        self.currency = currency
        self.rate_card = rate_card
        self.card_currency = card_currency

    def problem_detail(self) -> str:
        return (
            f"project {self.project!r} keeps its ledger in {self.currency}; rate card "
            f"{self.rate_card!r} is priced in {self.card_currency}"
        )

    def problem_members(self) -> dict[str, Any]:
        return {"field": "rate_card"}


class NothingToChange(Invalid):
    def __init__(self) -> None:
        super().__init__("$", "give rate_card and/or attribution_tags")
        self.args = ()


async def project_settings(store: Stores, project: str) -> ProjectSettings:
    return ProjectSettings.of(await store.projects.project_meta(project))


async def project_catalog(
    store: Stores, rate_cards: RateCards, project: str
) -> tuple[ProjectSettings, PricingCatalog | None]:
    """The project's settings and the catalog of the rate card it is priced by (None: gone)."""
    settings = await project_settings(store, project)
    return settings, await rate_cards.catalog(settings.rate_card)


async def project_currency(store: Stores, rate_cards: RateCards, project: str) -> str:
    """The currency the project's money is shown in ("" when none is known)."""
    settings = await project_settings(store, project)
    if settings.currency:
        return settings.currency  # no rate card read: the ledger's currency is fixed
    catalog = await rate_cards.catalog(settings.rate_card)
    return settings.ledger_currency(catalog.currency if catalog else None)


async def visible_projects(store: Stores, principal: Principal) -> list[str]:
    return [p for p in await store.projects.projects() if principal.can_access(p)]


async def project_view(store: Stores, project: str) -> ProjectView:
    return ProjectView.of(project, await project_settings(store, project))


async def change_settings(
    store: Stores, rate_cards: RateCards, project: str, change: ProjectIn
) -> ProjectView:
    """Choose the rate card and/or the attribution tags. Raises UnknownRateCard,
    CurrencyConflict (a ledger keeps its currency) or NothingToChange, before any write."""
    card_currency = None
    if change.rate_card is not None:
        catalog = await rate_cards.catalog(change.rate_card)
        if catalog is None:
            raise UnknownRateCard(change.rate_card)
        settings = await project_settings(store, project)
        if settings.conflicts_with(catalog.currency):
            assert settings.currency is not None
            raise CurrencyConflict(project, settings.currency, change.rate_card, catalog.currency)
        card_currency = catalog.currency
    fields = settings_fields(change.rate_card, card_currency, change.attribution_tags)
    if not fields:
        raise NothingToChange()
    await store.projects.set_project_fields(project, fields)
    return await project_view(store, project)
