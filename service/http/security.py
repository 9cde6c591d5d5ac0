"""Authentication and authorization, in one place.

The middleware turns a bearer token into a `Principal`; guards check its role and, for
any request that names a project (path, query or body, exactly once: the rule below
`authorize`), its project scope. Ingestion checks the project of every event with the same
`Principal.can_access` rule. The model (roles x scope) is in docs/authorization.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import SerializationException
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import Scope

from ..auth.model import Principal
from ..auth.service import resolve_principal
from .problems import invalid, problem


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
        principal = await resolve_principal(
            state.store, token.strip(), state.settings.token_cache_seconds
        )
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


def requires(action: str) -> Any:
    """Guard: the token's role grants `action`, and it may touch the project the request
    names (path, query or body, named exactly once: the rule below)."""

    # async: Litestar runs a synchronous guard in a worker thread, for every request.
    async def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if connection.scope.get("method") == "OPTIONS":
            return  # Litestar's automatic OPTIONS answer (allowed methods) needs no token
        _check_role(connection.user, action)
        project, field = _url_project(connection), "project"
        facts = _facts(connection)
        if facts.reads_body:
            named = await _body_project(connection, facts)
            if named is not None:
                if project is not None:  # only where an operation takes it from two places
                    raise _named_twice()
                project, field = named, "$.project"
        # Resolved once, then authorized: the value checked is the value the handler binds.
        if project is not None:
            _check_scope(connection.user, project, field)

    guard.__name__ = f"requires_{action}"
    return guard


def authorize(connection: ASGIConnection[Any, Any, Any, Any], action: str) -> str | None:
    """The check of `requires(action)`, for a handler that makes it itself instead of through
    a guard (Litestar copies the handler object for every guard call: see `post_events`): the
    role, then the project the path or query names. Returns that project (None: none named).

    Such a handler must not take a JSON body (`data`): the body's project is checked by the
    guard only. `POST /v1/events` reads its body itself and the ingestor checks every event's
    project, the value it then writes to."""
    _check_role(connection.user, action)
    project = _url_project(connection)
    if project is not None:
        _check_scope(connection.user, project, "project")
    return project


def _check_role(principal: Principal, action: str) -> None:
    if not principal.may(action):
        raise problem(
            403,
            "Forbidden",
            f"a token with role {principal.role!r} may not {action}",
            kind="forbidden",
        )


# --- the project a request names ---------------------------------------------------------
#
# Rule: a request names its project at most once, in the one place its operation takes it
# from (the `{project}` path segment, the `project` query parameter, or the body's `project`
# field). A project named twice (a repeated `?project=`, or a path or body project together
# with a `?project=`), named where the operation does not take it, or named by anything but
# one string, is a 400 naming `project`; so is any other single-valued query parameter given
# twice. The one value left is what is authorized, and it is the value the handler binds:
# Litestar binds query parameters from the same parsed query (`connection.query_params`) and
# the body from the same decoded JSON (`Request.json()`, cached on the request) read here.


@dataclass(frozen=True)
class _RouteFacts:
    project_in: frozenset[str]  # "path", "query", "body": where the operation takes a project
    single_query: frozenset[str]  # query parameters (by their name on the wire) of one value
    reads_body: bool  # the handler takes a JSON body (`data`)


_facts_cache: dict[tuple[Any, tuple[str, ...]], _RouteFacts] = {}


def _facts(connection: ASGIConnection[Any, Any, Any, Any]) -> _RouteFacts:
    handler = connection.route_handler
    path_names = tuple(sorted(connection.path_params))
    key = (handler.fn, path_names)
    facts = _facts_cache.get(key)
    if facts is None:
        facts = _facts_cache[key] = _facts_of(handler, path_names)
    return facts


def _facts_of(handler: Any, path_names: tuple[str, ...]) -> _RouteFacts:
    """What the handler's signature takes, as Litestar's own kwargs model reads it."""
    model = handler.create_kwargs_model(path_parameters=dict.fromkeys(path_names))
    where: set[str] = set()
    if "project" in path_names:
        where.add("path")
    single: set[str] = set()
    for param in model.expected_query_params:
        if param.field_alias == "project":
            where.add("query")
        if not param.is_sequence:
            single.add(param.field_alias)
    data = handler.parsed_fn_signature.parameters.get("data")
    if data is not None and _struct_names_project(data.annotation):
        where.add("body")
    return _RouteFacts(frozenset(where), frozenset(single), data is not None)


def _struct_names_project(annotation: Any) -> bool:
    if not (isinstance(annotation, type) and issubclass(annotation, msgspec.Struct)):
        return False
    return any(f.encode_name == "project" for f in msgspec.structs.fields(annotation))


def _url_project(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The project the path or the query names, once; ambiguous naming is a 400."""
    path_project = connection.path_params.get("project")
    if not connection.scope["query_string"]:  # parsed only when there is one
        return None if path_project is None else str(path_project)
    facts = _facts(connection)
    seen: dict[str, int] = {}
    query_project: str | None = None
    for name, value in connection.query_params.multi_items():
        seen[name] = seen.get(name, 0) + 1
        if name == "project":
            query_project = str(value)
        elif seen[name] == 2 and name in facts.single_query:
            raise invalid(name, "give this parameter once", status=400)
    if query_project is None:
        return None if path_project is None else str(path_project)
    if "query" not in facts.project_in:
        raise _misplaced("the query", facts)
    if seen["project"] > 1 or path_project is not None:
        raise _named_twice()
    return query_project


async def _body_project(
    connection: ASGIConnection[Any, Any, Any, Any], facts: _RouteFacts
) -> str | None:
    """The project a JSON object body names at its top level, if any: the decoded JSON the
    handler's `data` is then converted from (`Request.json()` caches it on the request)."""
    request = cast(Request[Any, Any, Any], connection)
    try:
        body = await request.json() if await request.body() else None
    except SerializationException as exc:
        raise invalid("$", str(exc), status=400) from exc
    if not isinstance(body, dict) or "project" not in body:
        return None
    if _names_project_twice(await request.body()):
        raise _named_twice()
    if "body" not in facts.project_in:
        raise _misplaced("the body", facts)
    named = body["project"]
    if not isinstance(named, str):
        raise invalid("$.project", "name one project, as a string", status=400)
    return named


class _TwiceNamed(Exception):
    pass


def _no_repeated_project(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if sum(1 for key, _ in pairs if key == "project") > 1:
        raise _TwiceNamed
    return dict(pairs)


def _names_project_twice(raw: bytes) -> bool:
    """Whether a JSON object of the body names `project` twice (`{"project": "pa", …,
    "project": "pb"}`): decoders keep the last silently, so such a body is ambiguous. The
    careful read runs only when the bytes could hold a second (or an escaped) key."""
    if raw.count(b'"project"') < 2 and b"\\u" not in raw:
        return False
    try:
        json.loads(raw, object_pairs_hook=_no_repeated_project)
    except _TwiceNamed:
        return True
    except ValueError:
        return False  # msgspec read it; the stricter stdlib reader need not
    return False


def _misplaced(where: str, facts: _RouteFacts) -> Exception:
    if facts.project_in:
        place = {"path": "its path", "query": "the `project` query parameter", "body": "its body"}
        takes = " or ".join(place[p] for p in sorted(facts.project_in))
        reason = f"this operation takes its project from {takes}, not from {where}"
    else:
        reason = f"this operation names no project; {where} must not name one"
    return invalid("project", reason, status=400)


def _named_twice() -> Exception:
    return invalid("project", "name the project once (path, query or body, not two)", status=400)


def _check_scope(principal: Principal, project: str, field: str) -> None:
    if not principal.can_access(project):
        raise problem(
            403,
            "Forbidden",
            f"this token may not access project {project!r}",
            kind="forbidden",
            field=field,
        )


async def scrape_principal(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal | None:
    """The principal of a `/metrics` scrape: None without an Authorization header (the page
    is public without its spend gauges), else the bearer token's, which must be able to read
    (401 unknown or malformed, 403 a role that may not read)."""
    header = _authorization(connection.scope)
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise unauthorized("send an 'Authorization: Bearer <token>' header, or none")
    state = connection.app.state
    principal = await resolve_principal(
        state.store, token.strip(), state.settings.token_cache_seconds
    )
    if principal is None:
        raise unauthorized("the bearer token is unknown or revoked")
    _check_role(principal, "read")
    return principal
