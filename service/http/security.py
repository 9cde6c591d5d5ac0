"""Authentication and authorization, in one place.

The middleware turns a bearer token into a `Principal`; guards check its role and,
for any route that names a project (path or query), its project scope. Ingestion
checks the project of every event with the same `Principal.can_access` rule.
"""

from __future__ import annotations

import time
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import Scope

from service.domain.auth import Principal, digest, principal_from_record
from service.http.problems import problem
from service.storage.redis_store import Store

_cache: dict[str, tuple[float, Principal | None]] = {}


def unauthorized(detail: str) -> Exception:
    return problem(
        401,
        "Unauthorized",
        detail,
        kind="unauthorized",
        headers={"WWW-Authenticate": 'Bearer realm="trainledger"'},
    )


class BearerTokenMiddleware(AbstractAuthenticationMiddleware):
    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        scheme, _, token = _authorization(connection.scope).partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("send an 'Authorization: Bearer <token>' header")
        state = connection.app.state
        principal = await _resolve(state.store, token.strip(), state.settings.token_cache_seconds)
        if principal is None:
            raise unauthorized("the bearer token is unknown or revoked")
        return AuthenticationResult(user=principal, auth=token)


def _authorization(scope: Scope) -> str:
    """The first Authorization header, read from the raw headers: building Litestar's
    `Headers` for it cost more than the rest of the check."""
    for name, value in scope["headers"]:
        if name.lower() == b"authorization":
            return value.decode("latin-1")
    return ""


async def _resolve(store: Store, token: str, ttl: float) -> Principal | None:
    key = digest(token)
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    record = await store.token_record(key)
    principal = principal_from_record(record) if record else None
    if len(_cache) > 10_000:
        _cache.clear()
    _cache[key] = (now + ttl, principal)
    return principal


def forget_cached_tokens() -> None:
    _cache.clear()


def requires(action: str) -> Any:
    """Guard: the token's role grants `action`, and it may touch the project the route names."""

    # async: Litestar runs a synchronous guard in a worker thread, for every request.
    async def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if connection.scope.get("method") == "OPTIONS":
            return  # Litestar's automatic OPTIONS answer (allowed methods) needs no token
        authorize(connection, action)

    guard.__name__ = f"requires_{action}"
    return guard


def authorize(connection: ASGIConnection[Any, Any, Any, Any], action: str) -> None:
    """The check of `requires(action)`, for a handler that makes it itself instead of through
    a guard (Litestar copies the handler object for every guard call: see `post_events`)."""
    principal: Principal = connection.user
    if not principal.may(action):
        raise problem(
            403,
            "Forbidden",
            f"a token with role {principal.role!r} may not {action}",
            kind="forbidden",
        )
    query = connection.scope["query_string"]  # parsed only when there is one
    project = connection.path_params.get("project") or (
        connection.query_params.get("project") if query else None
    )
    if project is not None and not principal.can_access(str(project)):
        raise problem(
            403,
            "Forbidden",
            f"this token may not access project {project!r}",
            kind="forbidden",
            field="project",
        )
