"""Strict input outside the ingest grammar, over real HTTP (issue 33.7): parameters named in
errors as they are on the wire, repeated parameters refused, booleans and times read strictly,
and no duplicate key in any JSON body."""

from __future__ import annotations

from tests.api.test_plans_http import plan_body
from tests.conftest import TEST_CARD, Api


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
