from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec
from litestar import Controller, Request, get, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import JSONBody, PathParameter

from ..auth.model import Principal
from ..http.deps import Services
from ..http.problems import invalid, problem
from ..http.security import requires
from .model import (
    NAME_PATTERN,
    RateCardError,
    RateCardIn,
    RateCardVersion,
    RateCardView,
    validate_rate_card,
)

CardName = Annotated[str, PathParameter(pattern=NAME_PATTERN, description="rate-card name")]


class RateCardList(msgspec.Struct):
    names: list[str]


class RateCardController(Controller):
    path = "/v1/rate-cards"
    tags = ["rate cards"]

    @get("/", guards=[requires("read")], summary="List rate-card names")
    async def list_cards(self, services: NamedDependency[Services]) -> RateCardList:
        return RateCardList(await services.store.ratecards.rate_card_names())

    @put(
        "/{name:str}",
        guards=[requires("admin")],
        status_code=201,
        summary="Add a version to a rate card",
        description="Each PUT adds an immutable version that takes effect at `effective_from`. "
        "Rate cards are global (every project that picks one is priced by it): only an admin "
        "token for every project may add a version.",
    )
    async def put_card(
        self,
        name: CardName,
        data: JSONBody[RateCardIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> RateCardVersion:
        if not request.user.unscoped:
            # A card is shared by every project that picks it: a new version reprices them all.
            raise problem(
                403,
                "Forbidden",
                "rate cards are global: only an admin token for every project may change one",
                kind="forbidden",
            )
        try:
            validate_rate_card(data)
        except RateCardError as exc:
            raise invalid(exc.field, exc.reason) from exc
        return await services.rate_cards.put(name, data)

    @get("/{name:str}", guards=[requires("read")], summary="Current version and history")
    async def get_card(self, name: CardName, services: NamedDependency[Services]) -> RateCardView:
        versions = await services.rate_cards.versions(name)
        if not versions:
            raise problem(404, "Not found", f"no rate card named {name!r}", kind="not-found")
        catalog = await services.rate_cards.catalog(name)
        current = catalog.history.version_at(datetime.now(UTC)) if catalog else None
        return RateCardView(name=name, current=current, history=versions)
