"""Strict input outside the ingest grammar, over real HTTP (issue 33.7): parameters named in
errors as they are on the wire, repeated parameters refused, booleans and times read strictly,
and no duplicate key in any JSON body."""

from __future__ import annotations

from tests.conftest import Api


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
