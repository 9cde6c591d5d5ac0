"""OpenAPI additions Litestar cannot infer: the raw multi-format body of `POST /v1/events`,
and the error answers, which are RFC 9457 problem details rather than Litestar's default shape."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Reference,
    Schema,
    SecurityScheme,
)

from ..events.model import EventIn


class _RawSchema(Schema):
    """A schema given as the JSON that msgspec generated for a Struct."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__()
        self._raw = raw

    def to_schema(self) -> dict[str, Any]:
        return self._raw


def security_components() -> Components:
    return Components(
        security_schemes={
            "bearer": SecurityScheme(type="http", scheme="bearer", description="trainledger token")
        }
    )


def add_wire_schemas(app: Litestar) -> None:
    """Put the event model into the app's OpenAPI document as `#/components/schemas/EventIn`."""
    _, components = msgspec.json.schema_components(
        [EventIn], ref_template="#/components/schemas/{name}"
    )
    schema = app.openapi_schema
    assert schema.components is not None
    registry = schema.components.schemas if schema.components.schemas is not None else {}
    for name, raw in components.items():
        registry[name] = _RawSchema(raw)
    schema.components.schemas = registry


PROBLEM_MEDIA_TYPE = "application/problem+json"

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; `errors` names each offending field and why.",
    "required": ["status", "title"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "reason"],
                "properties": {"field": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}

# Answers any operation can give, besides its own: bad parameters or body, missing or
# unknown token, a role or project the token lacks, the per-token rate limit, Redis away.
COMMON_ERRORS = {
    "400": "The request is malformed (the problem names the field and the reason), names its "
    "project more than once or where the operation does not take it, or repeats a parameter",
    "401": "No bearer token, or an unknown or revoked one",
    "403": "The token's role or projects do not allow this",
    "429": "Over the per-token rate limit; retry after `Retry-After` seconds",
    "503": (
        "The ledger's Redis cannot be reached, or a shard is failing over (or, for `busy`, "
        "too much contention). The outcome is unknown: all, part or none of the request may "
        "have been applied. Retry the same request after `Retry-After` seconds, events under "
        "the same ids (a retry never counts an event twice)"
    ),
}
PUBLIC_ERRORS = {"503": COMMON_ERRORS["503"]}
# Answers that depend on the operation's shape.
BODY_ERRORS = {
    "413": "The body is over the size limit, or the batch holds too many events",
    "422": "The body is well-formed but a value is not acceptable (field and reason named)",
}
LOOKUP_ERRORS = {"404": "No such resource (or project) to read or change"}


def document_problems(app: Litestar) -> None:
    """Declare every error answer as `application/problem+json` with the problem schema."""
    schema = app.openapi_schema
    assert schema.components is not None
    registry = schema.components.schemas if schema.components.schemas is not None else {}
    registry["ProblemDetails"] = _RawSchema(PROBLEM_SCHEMA)
    schema.components.schemas = registry
    problem_content = {
        PROBLEM_MEDIA_TYPE: OpenAPIMediaType(
            schema=Reference(ref="#/components/schemas/ProblemDetails")
        )
    }
    public_paths = {
        route.path
        for route in app.routes
        for handler in getattr(route, "route_handlers", [])
        if handler.opt.get("exclude_from_auth")
    }
    for path, path_item in (schema.paths or {}).items():
        public = path in public_paths
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(path_item, method)
            if operation is None:
                continue
            if public:
                operation.security = []  # no token needed: say so instead of inheriting bearer
            responses = operation.responses if operation.responses is not None else {}
            errors = dict(PUBLIC_ERRORS if public else COMMON_ERRORS)
            if operation.request_body is not None:
                errors.update(BODY_ERRORS)
            if (not public and method != "post") or "{" in path:
                errors.update(LOOKUP_ERRORS)
            for code, description in errors.items():
                responses.setdefault(code, OpenAPIResponse(description=description))
            for code, response in responses.items():
                if code.isdigit() and int(code) >= 400 and isinstance(response, OpenAPIResponse):
                    response.content = problem_content
            operation.responses = responses


def document_csv_answers(app: Litestar) -> None:
    """A GET whose handler has `opt={"csv_alternative": True}` also answers 200 as text/csv
    (asked for by `format=csv` or `Accept: text/csv`): say so beside its JSON answer."""
    paths = app.openapi_schema.paths or {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            item = paths.get(route.path)
            if not handler.opt.get("csv_alternative") or item is None or item.get is None:
                continue
            ok = (item.get.responses or {}).get("200")
            if isinstance(ok, OpenAPIResponse) and ok.content is not None:
                ok.content["text/csv"] = OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING))


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the app, as checked in at `openapi/openapi.json`."""
    from ..config import Settings
    from .app import create_app

    # No connection is made: the Redis client is created in the lifespan, which is not run.
    app = create_app(Settings(), redis_url="redis://127.0.0.1:1/0")
    return app.openapi_schema.to_schema()
