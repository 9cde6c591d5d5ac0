"""Rate-card use cases: list the cards, add a version, show one with its history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..auth.model import Principal
from ..errors import Forbidden, NotFound
from .catalog import RateCards
from .model import RateCardIn, RateCardVersion, RateCardView, validate_rate_card

if TYPE_CHECKING:
    from ..stores import Stores


class SharedCardForbidden(Forbidden):
    """Only an admin token for every project may change a rate card."""

    def problem_detail(self) -> str:
        return "rate cards are global: only an admin token for every project may change one"


class RateCardNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def problem_detail(self) -> str:
        return f"no rate card named {self.name!r}"


async def rate_card_names(store: Stores) -> list[str]:
    return await store.ratecards.rate_card_names()


async def add_version(
    rate_cards: RateCards, principal: Principal, name: str, card: RateCardIn
) -> RateCardVersion:
    """Add an immutable version to a card. Raises SharedCardForbidden, or RateCardError for
    a card that cannot be, before anything is written."""
    check_version(principal, card)
    return await rate_cards.put(name, card)


def check_version(principal: Principal, card: RateCardIn) -> None:
    """Whether `principal` may add `card` as a version, and the card is valid. Raises
    SharedCardForbidden or RateCardError."""
    if not principal.unscoped:
        # A card is shared by every project that picks it: a new version reprices them all.
        raise SharedCardForbidden()
    validate_rate_card(card)


async def rate_card_view(rate_cards: RateCards, name: str) -> RateCardView:
    """The card's version in effect now and its history. Raises RateCardNotFound."""
    versions = await rate_cards.versions(name)
    if not versions:
        raise RateCardNotFound(name)
    catalog = await rate_cards.catalog(name)
    current = catalog.history.version_at(datetime.now(UTC)) if catalog else None
    return RateCardView(name=name, current=current, history=versions)
