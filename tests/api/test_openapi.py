"""The checked-in OpenAPI document is what the app serves, and it is valid OpenAPI."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate
from trainledger.cli import openapi_json

from tests.conftest import Api

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_checked_in_spec_is_current() -> None:
    assert SPEC.read_text() == openapi_json(), (
        "openapi/openapi.json is stale: run `python3 dev.py openapi` and commit the result"
    )


def test_spec_is_valid_openapi() -> None:
    validate(json.loads(SPEC.read_text()))


def test_each_ingest_format_has_its_own_operation_with_one_body() -> None:
    """One request body per operation (a generated client gets one function per format:
    tests/system/test_generated_client.py), and every content type the ingest reads has one."""
    spec = json.loads(SPEC.read_text())
    ingest = {
        path: list(spec["paths"][path]["post"]["requestBody"]["content"])
        for path in (
            "/v1/events",
            "/v1/events/cloudevents",
            "/v1/events/cloudevent",
            "/v1/events/ndjson",
            "/v1/events/msgpack",
        )
    }
    assert ingest == {
        "/v1/events": ["application/json"],
        "/v1/events/cloudevents": ["application/cloudevents-batch+json"],
        "/v1/events/cloudevent": ["application/cloudevents+json"],
        "/v1/events/ndjson": ["application/x-ndjson"],
        "/v1/events/msgpack": ["application/msgpack"],
    }
    several = [
        f"{method.upper()} {path}"
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if len(op.get("requestBody", {}).get("content", {})) > 1
    ]
    assert several == []
    assert "EventIn" in spec["components"]["schemas"]


def test_event_bodies_give_their_defaults_in_words_not_as_default() -> None:
    """A `default` would make openapi-typescript type the field as required
    (tests/system/test_generated_ts_client.py leaves them out of its events)."""
    schemas = json.loads(SPEC.read_text())["components"]["schemas"]
    said = {
        (name, field): prop.get("description", "").split(";", 1)[0]
        for name in ("EventIn", "CloudEventData")
        for field, prop in schemas[name]["properties"].items()
        if "default" in prop or prop.get("description", "").startswith("optional")
    }
    assert said == {
        (name, field): f"optional, default {value}"
        for name in ("EventIn", "CloudEventData")
        for field, value in (
            ("experiment", '""'),
            ("owner", '""'),
            ("stage", '"other"'),
            ("tags", "{}"),
        )
    }


async def test_api_reference_is_served_without_a_token(api: Api) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=api.base_url) as c:
        served = await c.get("/docs/openapi.json")
        assert served.status_code == 200
        assert served.json()["paths"].keys() == json.loads(SPEC.read_text())["paths"].keys()
        assert (await c.get("/v1/projects")).status_code == 401
