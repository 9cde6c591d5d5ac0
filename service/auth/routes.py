from __future__ import annotations

from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, JSONBody

from ..http.deps import Services
from ..http.security import requires
from .model import Principal, TokenIn, TokenView
from .service import (
    create_token,
    revoke_token,
)
from .service import (
    list_tokens as tokens_visible,
)


class TokenController(Controller):
    """Tokens. An admin token for every project manages every token. An admin token limited
    to some projects mints tokens limited to some of its projects (any role: none is higher
    than admin), and lists and revokes only tokens limited to its projects. The last admin
    token for every project cannot be revoked (409). See docs/authorization.md."""

    path = "/v1/tokens"
    tags = ["tokens"]
    guards = [requires("admin")]

    @post(
        "/",
        summary="Create a token (shown once)",
        description="An admin token limited to some projects mints only tokens limited to a "
        "subset of them (`projects` must be given); an admin token for every project mints any.",
        operation_id="postToken",
        request_example={"role": "ingest", "projects": ["llm-7b"], "name": "slurm hook"},
    )
    async def create(
        self,
        data: JSONBody[TokenIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> TokenView:
        return await create_token(services.store, request.user, data)

    @get(
        "/",
        summary="List tokens (without their secrets)",
        description="An admin token limited to some projects sees only tokens limited to them.",
        operation_id="getTokens",
    )
    async def list_tokens(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> list[TokenView]:
        return await tokens_visible(services.store, request.user)

    @delete(
        "/{token_id:str}",
        summary="Revoke a token",
        description="An admin token limited to some projects revokes only tokens limited to "
        "them (others are a 404). The last admin token for every project is never revoked.",
        status_code=204,
        responses={
            409: ResponseSpec(
                None, description="The last admin token for every project: mint another first"
            )
        },
        operation_id="deleteToken",
    )
    async def revoke(
        self,
        token_id: FromPath[str],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> None:
        await revoke_token(services.store, request.user, token_id)
