from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, Request, Response, get, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import JSONBody, PathParameter

from ..auth.model import Principal
from ..http.deps import Services
from ..http.security import requires
from ..jobs.model import RepricingAccepted
from ..jobs.reprice import put_version
from .model import (
    NAME_PATTERN,
    RateCardIn,
    RateCardVersion,
    RateCardView,
)
from .service import (
    rate_card_names,
    rate_card_view,
)

CardName = Annotated[str, PathParameter(pattern=NAME_PATTERN, description="rate-card name")]


class RateCardList(msgspec.Struct):
    """Answer of `GET /v1/rate-cards`: the names of every rate card."""

    names: list[str]


class RateCardController(Controller):
    path = "/v1/rate-cards"
    tags = ["rate cards"]

    @get(
        "/",
        guards=[requires("read")],
        summary="List rate-card names",
        operation_id="getRateCards",
        description="The names of every rate card.",
    )
    async def list_cards(self, services: NamedDependency[Services]) -> RateCardList:
        return RateCardList(await rate_card_names(services.store))

    @put(
        "/{name:str}",
        guards=[requires("admin")],
        status_code=201,
        summary="Add a version to a rate card",
        description="Each PUT adds an immutable version that takes effect at `effective_from`. "
        "Rate cards are global (every project that picks one is priced by it): only an admin "
        "token for every project may add a version. A version effective before events already "
        "priced by the card (a past-dated price) would leave them at the old price beside new "
        "ones at the new: it is refused (409, naming the projects and days it affects) unless "
        "the body has `reprice: true`; then it is stored and each affected project is "
        "repriced by a job (202, the jobs to poll at `GET /v1/jobs/{job_id}`).",
        responses={
            201: ResponseSpec(RateCardVersion, description="The version, stored"),
            202: ResponseSpec(
                RepricingAccepted,
                description="Stored; the affected projects are being repriced by the jobs listed",
            ),
            409: ResponseSpec(
                None,
                description="The version changes figures already priced: `affected` lists the "
                "projects and days; send it again with `reprice: true`",
            ),
        },
        operation_id="putRateCard",
        request_example={
            "currency": "USD",
            "effective_from": "2026-01-01T00:00:00Z",
            "skus": [
                {
                    "code": "gpu.h100.hour",
                    "category": "compute",
                    "unit": "hour",
                    "unit_price": "2.50",
                }
            ],
        },
    )
    async def put_card(
        self,
        name: CardName,
        data: JSONBody[RateCardIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> Response[RateCardVersion | RepricingAccepted]:
        added = await put_version(services.store, services.rate_cards, request.user, name, data)
        if not added.jobs:
            return Response(added.version, status_code=201)
        accepted = RepricingAccepted(added.version, added.affected, added.jobs)
        return Response(accepted, status_code=202)

    @get(
        "/{name:str}",
        guards=[requires("read")],
        summary="Current version and history",
        operation_id="getRateCard",
        description=(
            "The rate card's current version and every earlier version with its effective date."
        ),
    )
    async def get_card(self, name: CardName, services: NamedDependency[Services]) -> RateCardView:
        return await rate_card_view(services.rate_cards, name)
