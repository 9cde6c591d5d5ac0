"""What an admin token limited to some projects may administer, over real HTTP (issue 15).

Model (docs/authorization.md): an admin token for every project manages tokens and the global
rate cards. An admin token limited to some projects manages only what lives inside them: it
mints tokens for a subset of its projects (any role: none is higher than admin), lists and
revokes only tokens limited to its projects, and cannot change a rate card. The last admin
token for every project cannot be revoked.
"""

from __future__ import annotations

import argparse
import asyncio

import httpx
from trainledger.auth.model import Principal, mint
from trainledger.auth.store import LastUnscopedAdmin
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, Api, sync_client


async def _create(c: httpx.AsyncClient, body: dict[str, object]) -> httpx.Response:
    return await c.post("/v1/tokens", json=body)


def _field(r: httpx.Response) -> str:
    body = r.json()
    return str(body.get("field") or body["errors"][0]["field"])


async def test_scoped_admin_mints_only_tokens_within_its_projects(api: Api) -> None:
    scoped = await api.token("admin", ["pa", "pc"])
    async with api.client(scoped) as c:
        # Unscoped (projects null or left out): refused, whatever the role.
        for body in (
            {"role": "admin", "projects": None},
            {"role": "admin"},
            {"role": "read", "projects": None},
        ):
            r = await _create(c, body)
            assert r.status_code == 403, r.text
            assert _field(r) == "$.projects"
        # Any project outside its own: refused, naming the one.
        r = await _create(c, {"role": "read", "projects": ["pa", "pb"]})
        assert r.status_code == 403, r.text
        assert _field(r) == "$.projects[1]"
        # A subset, any role up to its own: minted, and limited as asked.
        for role, projects in (("admin", ["pa"]), ("ingest", ["pa", "pc"]), ("read", ["pc"])):
            r = await _create(c, {"role": role, "projects": projects})
            assert r.status_code == 201, r.text
            assert r.json()["projects"] == projects and r.json()["role"] == role
        minted = r.json()["token"]
    # The minted scoped admin cannot widen itself back either.
    async with api.client(minted) as c:
        assert (await c.get("/v1/costs", params={"project": "pc"})).status_code == 200
        assert (await c.get("/v1/costs", params={"project": "pa"})).status_code == 403
    async with api.client() as admin:
        listed = (await admin.get("/v1/tokens")).json()
        # The refused requests minted nothing: the fixture's admin, the scoped admin, 3 minted.
        assert len(listed) == 5, listed
        assert sum(t["projects"] is None for t in listed) == 1


def test_a_token_cannot_mint_a_role_above_its_own() -> None:
    """The rule is general (`Principal.may_grant`), even though only admins reach it today."""
    assert Principal("a", "admin", frozenset({"pa"})).may_grant("admin")
    assert not Principal("r", "read", None).may_grant("admin")
    assert not Principal("i", "ingest", None).may_grant("read")
    assert Principal("i", "ingest", None).may_grant("ingest")


async def test_scoped_admin_lists_and_revokes_only_tokens_within_its_projects(api: Api) -> None:
    scoped = await api.token("admin", ["pa"])
    async with api.client() as admin:
        ids = {}
        for name, projects in (
            ("in", ["pa"]),
            ("other", ["pb"]),
            ("both", ["pa", "pb"]),
            ("all", None),
        ):
            r = await _create(admin, {"role": "read", "projects": projects, "name": name})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        all_tokens = (await admin.get("/v1/tokens")).json()
        everything = {t["id"] for t in all_tokens}
        admin_id = next(t["id"] for t in all_tokens if t["name"] == "tests")
    async with api.client(scoped) as c:
        listed = (await c.get("/v1/tokens")).json()
        assert all(t["projects"] is not None and set(t["projects"]) <= {"pa"} for t in listed)
        assert ids["in"] in {t["id"] for t in listed}
        for name in ("other", "both", "all"):
            assert ids[name] not in {t["id"] for t in listed}
            # Outside its projects: answered as if it did not exist, and still there.
            r = await c.delete(f"/v1/tokens/{ids[name]}")
            assert r.status_code == 404, r.text
        # The fixture's unscoped admin cannot be revoked by it either.
        assert (await c.delete(f"/v1/tokens/{admin_id}")).status_code == 404
        r = await c.delete(f"/v1/tokens/{ids['in']}")
        assert r.status_code == 204, r.text
    async with api.client() as admin:
        left = {t["id"] for t in (await admin.get("/v1/tokens")).json()}
        assert left == everything - {ids["in"]}


async def test_scoped_admin_cannot_change_rate_cards(api: Api) -> None:
    scoped = await api.token("admin", ["pa"])
    async with api.client() as admin:
        assert (await admin.put("/v1/rate-cards/default", json=TEST_CARD)).status_code == 201
    cheaper = dict(TEST_CARD, effective_from="2021-01-01T00:00:00Z")
    async with api.client(scoped) as c:
        for name in ("default", "pa-only"):
            r = await c.put(f"/v1/rate-cards/{name}", json=cheaper)
            assert r.status_code == 403, r.text
            assert "global" in r.json()["detail"]
        # It may still pick an existing card for its own project, and read cards.
        r = await c.put("/v1/projects/pa", json={"rate_card": "default"})
        assert r.status_code == 200, r.text
        assert (await c.get("/v1/rate-cards/default")).status_code == 200
    async with api.client() as admin:
        r = await admin.get("/v1/rate-cards/default")
        assert len(r.json()["history"]) == 1, r.text
        assert (await admin.get("/v1/rate-cards/pa-only")).status_code == 404


async def test_scoped_admin_cannot_see_or_delete_other_webhooks(api: Api) -> None:
    scoped = await api.token("admin", ["pa"])
    ids = {}
    async with api.client() as admin:
        for name, projects in (("pa", ["pa"]), ("pb", ["pb"]), ("all", None)):
            r = await admin.post(
                "/v1/webhooks", json={"url": f"http://127.0.0.1:9/{name}", "projects": projects}
            )
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
    async with api.client(scoped) as c:
        assert {w["id"] for w in (await c.get("/v1/webhooks")).json()} == {ids["pa"]}
        for name in ("pb", "all"):
            assert (await c.post(f"/v1/webhooks/{ids[name]}/test")).status_code == 404
            assert (await c.delete(f"/v1/webhooks/{ids[name]}")).status_code == 404
        # Its own webhook it may test (nothing listens on port 9: not delivered).
        r = await c.post(f"/v1/webhooks/{ids['pa']}/test")
        assert r.status_code == 200, r.text
        assert r.json()["delivered"] is False and r.json()["error"]
        r = await c.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/x", "projects": ["pa", "pb"]}
        )
        assert r.status_code == 403, r.text
        assert (await c.delete(f"/v1/webhooks/{ids['pa']}")).status_code == 204
    async with api.client() as admin:
        left = {w["id"] for w in (await admin.get("/v1/webhooks")).json()}
        assert left == {ids["pb"], ids["all"]}


async def test_the_last_unscoped_admin_is_never_revoked(api: Api) -> None:
    async with api.client() as admin:
        own = [t for t in (await admin.get("/v1/tokens")).json() if t["projects"] is None]
        assert len(own) == 1
        first = own[0]["id"]
        r = await admin.delete(f"/v1/tokens/{first}")
        assert r.status_code == 409, r.text
        assert r.json()["type"].endswith("/last-admin")
        # Scoped admins and unscoped tokens of other roles do not count as a successor.
        await api.token("admin", ["pa"])
        await api.token("read", None)
        assert (await admin.delete(f"/v1/tokens/{first}")).status_code == 409
        # With a second unscoped admin, the first can go; then the second is the last.
        r = await _create(admin, {"role": "admin", "projects": None})
        second, second_token = r.json()["id"], r.json()["token"]
        assert (await admin.delete(f"/v1/tokens/{first}")).status_code == 204
    async with api.client(second_token) as c:
        assert (await c.delete(f"/v1/tokens/{second}")).status_code == 409
        assert (await c.get("/v1/tokens")).status_code == 200


async def test_two_unscoped_admins_revoking_each_other_at_once_leave_one(api: Api) -> None:
    """The check and the revocation are one step (a script on the token index): of two
    admins revoking each other at once, exactly one goes."""
    token_a = api.admin_token
    async with api.client(token_a) as c:
        id_a = next(t["id"] for t in (await c.get("/v1/tokens")).json())
    for _ in range(5):
        async with api.client(token_a) as c:
            r = await _create(c, {"role": "admin", "projects": None})
            id_b, token_b = r.json()["id"], r.json()["token"]
        async with api.client(token_a) as a, api.client(token_b) as b:
            ra, rb = await asyncio.gather(
                a.delete(f"/v1/tokens/{id_b}"), b.delete(f"/v1/tokens/{id_a}")
            )
        # One revocation went through; the other was refused (409: the last admin), or came
        # after its own token was gone (401).
        codes = sorted((ra.status_code, rb.status_code))
        assert codes in ([204, 401], [204, 409]), (ra.text, rb.text)
        if rb.status_code == 204:
            token_a, id_a = token_b, id_b
        async with api.client(token_a) as c:
            left = [t for t in (await c.get("/v1/tokens")).json() if t["projects"] is None]
            assert [t["id"] for t in left] == [id_a]


async def test_the_store_keeps_the_last_unscoped_admin(clean_redis: str) -> None:
    """The store itself refuses to revoke the last admin token for every project."""
    store = Stores.from_url(clean_redis)
    try:
        ids = []
        for _ in range(2):
            _, digest, record = mint("admin", None, "old")
            await store.tokens.put_token(digest, record["id"], record)
            ids.append(record["id"])
        assert await store.tokens.revoke_token(ids[0])
        try:
            await store.tokens.revoke_token(ids[1])
        except LastUnscopedAdmin:
            pass
        else:
            raise AssertionError("revoked the last unscoped admin")
        assert [r["id"] for r in await store.tokens.token_records()] == [ids[1]]
        assert not await store.tokens.revoke_token("no-such-id")
    finally:
        await store.close()


def test_the_cli_refuses_to_revoke_the_last_unscoped_admin(clean_redis: str) -> None:
    """`trainledger token revoke` goes straight to Redis, and keeps the same rule."""
    from trainledger.cli.tokens import cmd_token
    from trainledger.config import Settings

    settings = Settings(redis_url=clean_redis)
    client = sync_client(clean_redis)
    try:
        cmd_token(
            argparse.Namespace(
                token_command="create", role="admin", project=None, name="cli", offline=False
            ),
            settings,
        )
        (only,) = [i.decode() for i in client.hkeys(Keys.token_index())]
        revoke = argparse.Namespace(token_command="revoke", token_id=only)
        assert cmd_token(revoke, settings) == 1
        assert client.hexists(Keys.token_index(), only)
        cmd_token(
            argparse.Namespace(
                token_command="create", role="admin", project=None, name="cli 2", offline=False
            ),
            settings,
        )
        assert cmd_token(revoke, settings) == 0
        assert not client.hexists(Keys.token_index(), only)
    finally:
        client.close()
