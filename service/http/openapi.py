"""OpenAPI additions Litestar cannot infer: the raw multi-format body of `POST /v1/events`."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi.spec import Components, Schema, SecurityScheme

from service.domain.events import EventIn


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


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the app, as checked in at `openapi/openapi.json`."""
    from service.config import Settings
    from service.http.app import create_app

    # No connection is made: the Redis client is created in the lifespan, which is not run.
    app = create_app(Settings(), redis_url="redis://127.0.0.1:1/0")
    return app.openapi_schema.to_schema()
