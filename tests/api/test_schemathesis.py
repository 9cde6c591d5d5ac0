"""Schemathesis against the committed OpenAPI document (`openapi/openapi.json`).

Every operation gets a bounded number of generated requests, sent over real HTTP to a live
server on the embedded Valkey, seeded with a rate card, events, a budget and a plan so the
read paths have data to walk. Two things must hold for every answer: no 5xx, and the answer
conforms to the document (status code declared, content type, body schema).

The admin token is sent with every request, so generation reaches the handlers instead of
stopping at 401; the auth tests cover the refusals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.transport.serialization import Binary
from trainledger.config import Settings

from tests.conftest import TEST_CARD, ServerThread, event, make_admin_token

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
schema = schemathesis.openapi.from_path(SPEC)

# `POST /v1/events` also takes NDJSON, msgpack and CloudEvents; teach the generator to send them.
schemathesis.serializer.alias(
    ["application/cloudevents+json", "application/cloudevents-batch+json"], "application/json"
)


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def _unwrapped(value: Any) -> Any:
    """The bytes Schemathesis generates for a `format: binary` body (NDJSON and msgpack are
    documented so), or the value itself."""
    return value.data if isinstance(value, Binary) else value


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> dict[str, Any]:
    value = _unwrapped(value)
    if isinstance(value, bytes):
        return {"data": value}
    if isinstance(value, str):  # the document's example: NDJSON text
        return {"data": value.encode()}
    items = value if isinstance(value, list) else [value]
    return {"data": b"\n".join(_as_bytes(item) for item in items)}


@schemathesis.serializer("application/msgpack")
def _msgpack(ctx: Any, value: Any) -> dict[str, Any]:
    value = _unwrapped(value)
    if isinstance(value, bytes):
        return {"data": value}
    try:
        return {"data": msgspec.msgpack.encode(value)}
    except OverflowError:  # an integer msgpack cannot carry: send it as JSON would (a 400)
        return {"data": _as_bytes(value)}


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


class Live:
    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"}


def _seed(base_url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as c:
        assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
        events: list[dict[str, object]] = [
            event(f"seed-{i}", i % 7 + 1, stage="pretrain", experiment=f"exp-{i % 3}")
            for i in range(40)
        ]
        events.append(event("seed-storage", "150", sku="storage.hot.gb_day", stage="data_prep"))
        events.append(event("seed-bad", "1", sku="no.such.sku"))  # a dead letter to list
        r = c.post("/v1/events", json=events)
        assert r.status_code in (200, 207), r.text
        budget = {"project": "llm", "name": "month", "amount": "500", "period": "monthly"}
        r = c.post("/v1/budgets", json=budget)
        assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def live(embedded_valkey: str) -> Iterator[Live]:
    client = redis.Redis.from_url(embedded_valkey)
    client.flushdb()
    client.close()
    server = ServerThread(embedded_valkey, Settings(redis_url=embedded_valkey)).start()
    try:
        token = asyncio.run(make_admin_token(embedded_valkey))
        _seed(server.base_url, token)
        yield Live(server.base_url, token)
    finally:
        server.stop()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_document(case: Any, live: Live) -> None:
    # What is checked is the answer, not its speed (no test asserts wall-clock time): the
    # client's default 10 s read timeout once ran out on a stalled 2-core CI machine.
    case.call_and_validate(base_url=live.base_url, headers=live.headers, checks=CHECKS, timeout=120)


def test_the_committed_document_has_operations() -> None:
    # Guards against a parametrisation that silently collects nothing.
    paths = json.loads(SPEC.read_text())["paths"]
    assert sum(len(ops) for ops in paths.values()) >= 30


# What Schemathesis found, pinned as plain regression tests (each was a 500 or an answer
# outside the document before it was fixed).
def test_found_cases_answer_with_problem_details(live: Live) -> None:
    with httpx.Client(base_url=live.base_url, headers=live.headers, timeout=30) as c:
        r = c.get("/v1/alerts", params={"project": "llm", "after": "null"})
        assert r.status_code == 400 and r.json()["errors"][0]["field"] == "after"
        r = c.get("/v1/alerts", params={"project": "llm", "to": "0510-10-02T12:21:14Z"})
        assert r.status_code == 200 and r.json() == []
        r = c.options("/v1/analysis/domain-mix")
        assert r.status_code == 204 and "POST" in r.headers["allow"]
        r = c.request(
            "DELETE",
            "/v1/events/rejected",
            params={"project": "llm"},
            content=b"0-0",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["errors"][0]["field"] == "$"
        r = c.post("/v1/events/rejected/replay", params={"project": "llm"}, json={"ids": []})
        assert r.status_code == 200
