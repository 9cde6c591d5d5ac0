"""Bearer tokens over real HTTP: roles, project scopes, revocation, and hashed storage."""

from __future__ import annotations

from decimal import Decimal

import httpx
from trainledger.auth.model import digest

from tests.conftest import TEST_CARD, Api, event, sync_client


def client(api: Api, token: str | None = None, *, anonymous: bool = False) -> httpx.AsyncClient:
    """Like `api.client`, without loading a CA bundle per client (plain HTTP; ~0.1 s each)."""
    headers = {} if anonymous else {"Authorization": f"Bearer {token or api.admin_token}"}
    return httpx.AsyncClient(base_url=api.base_url, headers=headers, timeout=60, verify=False)


async def new_token(api: Api, role: str, projects: list[str] | None = None) -> str:
    async with client(api) as admin:
        r = await admin.post("/v1/tokens", json={"role": role, "projects": projects})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])


def assert_problem(r: httpx.Response, status: int) -> dict[str, object]:
    """An RFC 9457 problem answer with the given status; returns its body."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body = r.json()
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    return dict(body)


async def put_default_card(api: Api) -> None:
    async with client(api) as admin:
        r = await admin.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text


async def test_healthz_needs_no_token(api: Api) -> None:
    async with client(api, anonymous=True) as anon:
        r = await anon.get("/healthz")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "ok"
        # ...while an API route next to it does.
        assert_problem(await anon.get("/v1/rate-cards"), 401)


async def test_missing_or_malformed_header_is_401(api: Api) -> None:
    async with client(api, anonymous=True) as anon:
        r = await anon.get("/v1/costs", params={"project": "llm"})
        assert_problem(r, 401)
        assert r.headers["www-authenticate"].lower().startswith("bearer")
        # A valid token under another scheme, or an empty bearer, is no credential either.
        r = await anon.get("/v1/projects", headers={"Authorization": f"Basic {api.admin_token}"})
        assert_problem(r, 401)
        r = await anon.get("/v1/projects", headers={"Authorization": "Bearer"})
        assert_problem(r, 401)
        # The same request with the token is answered.
        r = await anon.get("/v1/projects", headers={"Authorization": f"Bearer {api.admin_token}"})
        assert r.status_code == 200, r.text


async def test_unknown_token_is_401(api: Api) -> None:
    async with client(api, "tl_" + "x" * 43) as c:
        assert_problem(await c.get("/v1/projects"), 401)
        assert_problem(await c.post("/v1/events", json=event("e1")), 401)


async def test_revoked_token_is_401(api: Api) -> None:
    async with client(api) as admin:
        r = await admin.post("/v1/tokens", json={"role": "read", "name": "to revoke"})
        assert r.status_code == 201, r.text
        created = r.json()
        token, token_id = created["token"], created["id"]
        async with client(api, token) as c:
            # Used once, so the server has it cached when it is revoked.
            assert (await c.get("/v1/projects")).status_code == 200
            r = await admin.delete(f"/v1/tokens/{token_id}")
            assert r.status_code == 204, r.text
            assert_problem(await c.get("/v1/projects"), 401)
        listed = (await admin.get("/v1/tokens")).json()
        assert token_id not in {t["id"] for t in listed}
        assert all("token" not in t for t in listed)  # listing never shows a secret
        # Revoking it again: nothing to revoke.
        assert_problem(await admin.delete(f"/v1/tokens/{token_id}"), 404)


async def test_read_token_reads_but_cannot_write(api: Api) -> None:
    await put_default_card(api)
    async with client(api) as admin:
        r = await admin.post("/v1/events", json=[event("r1", "4"), event("r2", "2")])
        assert r.json()["accepted"] == 2, r.text
    token = await new_token(api, "read")
    async with client(api, token) as c:
        r = await c.get("/v1/costs", params={"project": "llm"})
        assert r.status_code == 200, r.text
        assert Decimal(r.json()["total_cost"]) == Decimal("2.50") * 6
        assert (await c.get("/v1/rate-cards/default")).status_code == 200

        body = assert_problem(await c.post("/v1/events", json=event("r3")), 403)
        assert "read" in str(body["detail"])
        assert_problem(await c.put("/v1/rate-cards/x", json=TEST_CARD), 403)
        assert_problem(await c.post("/v1/tokens", json={"role": "read"}), 403)
    async with client(api) as admin:
        # The refused writes changed nothing.
        assert (await admin.get("/v1/rate-cards/x")).status_code == 404
        r = await admin.get("/v1/costs", params={"project": "llm"})
        assert r.json()["total_events"] == 2


async def test_ingest_token_ingests_but_cannot_administer(api: Api) -> None:
    await put_default_card(api)
    token = await new_token(api, "ingest")
    async with client(api, token) as c:
        r = await c.post("/v1/events", json=event("i1", "2"))
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == 1
        assert_problem(await c.put("/v1/rate-cards/x", json=TEST_CARD), 403)
        assert_problem(await c.post("/v1/tokens", json={"role": "admin"}), 403)
        assert_problem(await c.get("/v1/tokens"), 403)
        assert_problem(await c.put("/v1/projects/llm", json={"rate_card": "default"}), 403)
        # Ingest does not include read.
        assert_problem(await c.get("/v1/costs", params={"project": "llm"}), 403)
    async with client(api) as admin:
        r = await admin.get("/v1/costs", params={"project": "llm"})
        assert Decimal(r.json()["total_cost"]) == Decimal("5.00")
        assert (await admin.get("/v1/rate-cards/x")).status_code == 404
        assert len((await admin.get("/v1/tokens")).json()) == 2  # the admin and the ingest token


async def test_scoped_token_cannot_read_another_project(api: Api) -> None:
    token = await new_token(api, "read", ["a"])
    async with client(api, token) as c:
        assert (await c.get("/v1/costs", params={"project": "a"})).status_code == 200
        body = assert_problem(await c.get("/v1/costs", params={"project": "b"}), 403)
        assert "'b'" in str(body["detail"])
        assert_problem(await c.get("/v1/costs/summary", params={"project": "b"}), 403)
        assert_problem(await c.get("/v1/projects/b"), 403)
        assert_problem(await c.get("/v1/events/rejected", params={"project": "b"}), 403)
        assert (await c.get("/v1/projects/a")).status_code == 200


async def test_scoped_batch_touching_another_project_changes_nothing(api: Api) -> None:
    await put_default_card(api)
    token = await new_token(api, "ingest", ["a"])
    batch = [event("s1", "3", project="a"), event("s2", "3", project="b")]
    async with client(api, token) as c:
        body = assert_problem(await c.post("/v1/events", json=batch), 403)
        errors = body["errors"]
        assert isinstance(errors, list)
        assert errors[0]["field"] == "$[1].project"

    async with client(api) as admin:
        for project in ("a", "b"):
            r = await admin.get("/v1/costs", params={"project": project})
            assert r.status_code == 200, r.text
            assert r.json()["total_events"] == 0
            assert Decimal(r.json()["total_cost"]) == 0
            r = await admin.get("/v1/events/rejected", params={"project": project})
            assert r.json()["total"] == 0, r.text
        assert (await admin.get("/v1/projects")).json() == []

    # The event for "a" alone is accepted: the batch was refused for "b", not for itself.
    async with client(api, token) as c:
        r = await c.post("/v1/events", json=batch[0])
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == 1
    async with client(api) as admin:
        r = await admin.get("/v1/costs", params={"project": "a"})
        assert Decimal(r.json()["total_cost"]) == Decimal("7.50")


async def test_project_list_shows_only_the_token_scope(api: Api) -> None:
    await put_default_card(api)
    async with client(api) as admin:
        batch = [event("p1", project="a"), event("p2", project="b"), event("p3", project="c")]
        r = await admin.post("/v1/events", json=batch)
        assert r.json()["accepted"] == 3, r.text
        assert (await admin.get("/v1/projects")).json() == ["a", "b", "c"]
    async with client(api, await new_token(api, "read", ["a"])) as c:
        assert (await c.get("/v1/projects")).json() == ["a"]
    async with client(api, await new_token(api, "read", ["a", "c", "zz"])) as c:
        assert (await c.get("/v1/projects")).json() == ["a", "c"]


def _all_stored_bytes(url: str) -> list[tuple[bytes, bytes]]:
    """Every key of the database with every value it holds, whatever its type."""
    client = sync_client(url)
    found: list[tuple[bytes, bytes]] = []
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            parts: list[bytes] = []
            if kind == "string":
                parts.append(client.get(key) or b"")
            elif kind == "hash":
                for k, v in client.hgetall(key).items():
                    parts += [k, v]
            elif kind == "set":
                parts += list(client.smembers(key))
            elif kind == "zset":
                parts += list(client.zrange(key, 0, -1))
            elif kind == "list":
                parts += list(client.lrange(key, 0, -1))
            elif kind == "stream":
                for _, fields in client.xrange(key):
                    for k, v in fields.items():
                        parts += [k, v]
            else:
                raise AssertionError(f"unexpected key type {kind} for {key!r}")
            found.append((key, b"\x00".join(parts)))
    finally:
        client.close()
    return found


async def test_tokens_are_stored_hashed(api: Api) -> None:
    async with client(api) as admin:
        r = await admin.post(
            "/v1/tokens", json={"role": "ingest", "projects": ["llm"], "name": "ci runner"}
        )
        assert r.status_code == 201, r.text
        created = r.json()
    token = created["token"]
    assert created["projects"] == ["llm"] and created["role"] == "ingest"
    async with client(api, token) as c:  # the shown token is the one that works
        assert_problem(await c.post("/v1/events", json=event("h1", project="other")), 403)

    stored = _all_stored_bytes(api.redis_url)
    # The scan does see the token's record, under its digest...
    assert any(digest(token).encode() in key for key, _ in stored)
    assert any(b"ci runner" in value for _, value in stored)
    # ...and neither this token nor the admin token appears anywhere in clear.
    for secret in (token, api.admin_token):
        needle = secret.encode()
        for key, value in stored:
            assert needle not in key, key
            assert needle not in value, key
        # Not even the random part without its prefix.
        body = secret.removeprefix("tl_").encode()
        assert all(body not in key and body not in value for key, value in stored)
