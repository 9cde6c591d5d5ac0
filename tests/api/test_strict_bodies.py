"""Strict input outside the ingest grammar, over real HTTP (issue 33.7): parameters named in
errors as they are on the wire, repeated parameters refused, booleans and times read strictly,
and no duplicate key in any JSON body."""

from __future__ import annotations

import json
from typing import Any

import msgpack

from tests.api.test_plans_http import plan_body
from tests.conftest import TEST_CARD, Api, event

JSON_T, NDJSON, CE = "application/json", "application/x-ndjson", "application/cloudevents+json"
MSGPACK = "application/msgpack"


def _msgpack_twice(events: list[dict[str, Any]], which: int) -> bytes:
    """A msgpack array of `events` whose event `which` names `quantity` twice, the second
    time "1000000" (a map written pair by pair: msgpack's packer takes only dicts)."""
    out = [bytes([0x90 | len(events)])]
    for i, ev in enumerate(events):
        pairs = list(ev.items()) + ([("quantity", "1000000")] if i == which else [])
        out.append(bytes([0x80 | len(pairs)]))
        out += [msgpack.packb(k) + msgpack.packb(v) for k, v in pairs]
    return b"".join(out)


async def test_focus_export_errors_name_from_and_to(api: Api) -> None:
    async with api.client() as c:
        for name in ("from", "to"):
            r = await c.get("/v1/export/focus", params={"project": "llm", name: "not-a-time"})
            assert r.status_code == 400, r.text
            fields = [e["field"] for e in r.json()["errors"]]
            assert fields == [name], r.text
            assert "_time" not in r.text, r.text


async def test_a_repeated_dashboard_token_is_a_400(api: Api) -> None:
    reader = await api.token("read", ["pa"])
    async with api.client() as c:
        for path in ("/ui/pa", "/ui"):
            r = await c.get(path, params=[("token", reader), ("token", api.admin_token)])
            assert r.status_code == 400, (path, r.status_code, r.text[:300])
            assert r.json()["errors"] == [
                {"field": "token", "reason": "give this parameter once"}
            ], r.text
        r = await c.get("/ui/pa", params={"token": reader})
        assert r.status_code == 303, r.text


async def test_booleans_and_times_are_read_strictly(api: Api) -> None:
    """`fixed: 0` was a boolean false, `window_start: 0` the time 1970-01-01."""
    card = dict(TEST_CARD)
    card["skus"] = [dict(TEST_CARD["skus"][0], fixed=0)]  # type: ignore[index]
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/strict", json=card)
        assert r.status_code == 400, r.text
        assert r.json()["errors"][0]["field"] == "$.skus[0].fixed", r.text
        for value in (0, 1, "true", None):
            r = await c.put(
                "/v1/reports/waste/policy",
                params={"project": "llm"},
                json={"check_unreported": value},
            )
            assert r.status_code == 400, (value, r.text)
            assert r.json()["errors"][0]["field"] == "$.check_unreported", r.text
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text
        for value in (0, 1.5, 253402300799):
            r = await c.post("/v1/plans/estimate", json=plan_body(window_start=value))
            assert r.status_code == 400, (value, r.text)
            assert r.json()["errors"][0]["field"] == "$.window_start", r.text
        r = await c.post("/v1/plans/estimate", json=plan_body())
        assert r.status_code == 200, r.text


async def test_a_key_given_twice_in_any_json_body_is_a_400_naming_it(api: Api) -> None:
    async with api.client() as c:
        bodies = [
            ("POST", "/v1/budgets", '{"project":"llm","name":"b","amount":"1","amount":"1000000"}'),
            (
                "POST",
                "/v1/evaluations",
                '{"project":"llm","results":[{"id":"a","experiment":"e","benchmark":"b",'
                '"value":"1","value":"99"}]}',
            ),
            ("PUT", "/v1/reports/waste/policy?project=llm", '{"idle_days":1,"idle_days":9}'),
            ("POST", "/v1/tokens", '{"role":"read","projects":["llm"],"name":"a","name":"b"}'),
        ]
        for method, path, body in bodies:
            r = await c.request(
                method, path, content=body, headers={"content-type": "application/json"}
            )
            assert r.status_code == 400, (path, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            key = body.rsplit(',"', 1)[1].split('"', 1)[0]
            assert r.json()["errors"][0]["field"] == key, (path, r.text)
        budgets = await c.get("/v1/budgets", params={"project": "llm"})
        assert budgets.status_code == 200 and budgets.json() == [], budgets.text


def _twice(ev: dict[str, Any], key: str, value: str, spaced: bool = False) -> str:
    """The event as compact JSON (or as `json.dumps` writes it) with `key` given again."""
    text = json.dumps(ev) if spaced else json.dumps(ev, separators=(",", ":"))
    return text[:-1] + f',"{key}":"{value}"' + "}"


async def test_an_event_naming_a_key_twice_is_rejected_on_every_path(api: Api) -> None:
    """`"quantity":"1","quantity":"1000000"` was priced 6,880,000 (the last one won)."""
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text
        good = event("good-1", "1")
        twice = _twice(event("dup-1", "1"), "quantity", "1000000")
        ce = {
            "specversion": "1.0",
            "id": "ce-1",
            "source": "t",
            "type": "usage",
            "subject": "llm",
            "time": good["time"],
            "data": {"sku": "gpu.h100.hour", "quantity": "1"},
        }
        ce_twice = json.dumps(ce).replace('"quantity": "1"', '"quantity": "1", "quantity": "9"')
        cases = [
            (JSON_T, f"[{json.dumps(good)},{twice}]", 200, "$[1].quantity"),  # the fast path
            (JSON_T, f"[{_twice(event('dup-2', '1'), 'quantity', '9', spaced=True)}]", 422, None),
            (JSON_T, twice, 422, "$.quantity"),  # one event: the exact path
            (JSON_T, f"[{_twice(event('dup-3', '1'), 'project', 'other')}]", 422, None),
            (NDJSON, json.dumps(good) + "\n" + twice + "\n", 200, "$[1].quantity"),
            (CE, ce_twice, 400, "quantity"),
            (MSGPACK, _msgpack_twice([good, event("dup-4", "1")], 1), 200, "$[1].quantity"),
            (MSGPACK, _msgpack_twice([event("dup-5", "1")], 0)[1:], 422, "$.quantity"),
        ]
        for media, body, status, field in cases:
            r = await c.post("/v1/events", content=body, headers={"content-type": media})
            assert r.status_code == status, (media, body, r.text)
            answer = r.json()
            errors = answer.get("errors") or answer.get("rejected") or []
            fields = [e["field"] for e in errors]
            assert len(fields) == 1 and (field is None or fields == [field]), (media, r.text)
        # The good events of those batches counted once, the repeated ones never.
        r = await c.get("/v1/costs", params={"project": "llm"})
        assert r.status_code == 200 and r.json()["total_events"] == 1, r.text
        assert r.json()["total_cost"] == "2.50", r.text
