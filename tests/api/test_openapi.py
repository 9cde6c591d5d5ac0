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


def test_events_body_documents_every_content_type() -> None:
    spec = json.loads(SPEC.read_text())
    content = spec["paths"]["/v1/events"]["post"]["requestBody"]["content"]
    assert set(content) == {
        "application/json",
        "application/x-ndjson",
        "application/msgpack",
        "application/cloudevents+json",
        "application/cloudevents-batch+json",
    }
    assert "EventIn" in spec["components"]["schemas"]


async def test_api_reference_is_served_without_a_token(api: Api) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=api.base_url) as c:
        served = await c.get("/docs/openapi.json")
        assert served.status_code == 200
        assert served.json()["paths"].keys() == json.loads(SPEC.read_text())["paths"].keys()
        assert (await c.get("/v1/projects")).status_code == 401
