"""Dead letters (rejected events kept for `GET /v1/events/rejected`) are bounded, over real
HTTP: an oversized event is kept as an excerpt with the whole one's size and digest, a
project keeps at most a set number of them (the oldest dropped, counted in /metrics), and an
excerpt is never replayed."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import msgspec
import pytest
from trainledger.config import Settings
from trainledger.ingest.rejections import DEAD_LETTER_EVENT_BYTES
from trainledger.storage.keys import Keys

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, ServerThread, event, make_admin_token, sync_client
from tests.system.test_observability import scrape, value

BIG = 2 * 1024 * 1024  # one tag value this long (the model allows 256 characters)


async def test_an_oversized_rejected_event_is_kept_as_an_excerpt_with_size_and_digest(
    api: Api,
) -> None:
    await put_card(api)
    redis = sync_client(api.redis_url)
    used_before = int(redis.info("memory")["used_memory"])
    big = [event(f"big-{i}", "1", tags={"note": "x" * BIG}) for i in range(3)]
    report = await post(api, [*big, event("fine", "1")])
    assert report["accepted"] == 1
    rejected = report["rejected"]
    assert isinstance(rejected, list) and [r["id"] for r in rejected] == [
        "big-0",
        "big-1",
        "big-2",
    ]
    assert all(len(r["reason"]) < 1000 for r in rejected)

    async with api.client() as c:
        r = await c.get("/v1/events/rejected", params={"project": "llm"})
    assert r.status_code == 200, r.text[:300]
    # Three 2 MiB events once answered 6 MiB here (and held it in the store).
    assert len(r.content) < 4 * DEAD_LETTER_EVENT_BYTES
    page = r.json()
    assert page["total"] == 3
    for item, sent in zip(page["items"], big, strict=True):
        whole = msgspec.json.encode(sent)
        assert item["truncated"] is True and item["event"] is None
        assert item["size"] == len(whole)
        assert item["sha256"] == hashlib.sha256(whole).hexdigest()
        assert whole.decode().startswith(item["excerpt"])
        assert len(item["excerpt"].encode()) <= DEAD_LETTER_EVENT_BYTES
    used_after = int(redis.info("memory")["used_memory"])
    redis.close()
    assert used_after - used_before < BIG  # not 3 x 2 MiB


async def test_a_small_rejected_event_is_kept_whole(api: Api) -> None:
    await put_card(api)
    bad = event("small", "1", sku="not.yet.priced")
    await post(api, [bad])
    async with api.client() as c:
        page = (await c.get("/v1/events/rejected", params={"project": "llm"})).json()
    (item,) = page["items"]
    # The event as read (its time in the model's own form), whole, with its size and digest.
    assert item["truncated"] is False and item["excerpt"] is None
    assert {k: v for k, v in item["event"].items() if k != "time"} == {
        k: v for k, v in bad.items() if k != "time"
    }
    whole = msgspec.json.encode(item["event"])
    assert item["size"] == len(whole) and item["sha256"] == hashlib.sha256(whole).hexdigest()


async def test_an_excerpt_is_not_replayed_and_stays(api: Api) -> None:
    await put_card(api)
    await post(api, [event("huge", "1", tags={"note": "y" * 100_000})])
    async with api.client() as c:
        r = await c.post(
            "/v1/events/rejected/replay", params={"project": "llm"}, json={"ids": ["huge"]}
        )
        assert r.status_code == 422, r.text
        body = r.json()
        assert r.headers["content-type"].startswith("application/problem+json")
        (error,) = body["rejected"]
        assert error["id"] == "huge" and "post the fixed event again" in error["reason"]
        page = (await c.get("/v1/events/rejected", params={"project": "llm"})).json()
    assert [i["id"] for i in page["items"]] == ["huge"]


@pytest.fixture
async def capped(clean_redis: str) -> AsyncIterator[Api]:
    settings = Settings(redis_url=clean_redis, dead_letter_limit=5)
    server = ServerThread(clean_redis, settings).start()
    try:
        yield Api(server.base_url, await make_admin_token(clean_redis), clean_redis)
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_project_keeps_at_most_its_limit_of_dead_letters_oldest_dropped(
    capped: Api,
) -> None:
    await put_card(capped)
    before = await scrape(capped.base_url)
    for i in range(4):  # one request each, so each is older than the next
        await post(capped, [event(f"old-{i}", "1", sku="no.such.sku")])
    # One batch of more than the limit: its first ones are the older.
    await post(capped, [event(f"new-{i}", "1", sku="no.such.sku") for i in range(7)])
    after = await scrape(capped.base_url)
    async with capped.client() as c:
        first = (await c.get("/v1/events/rejected", params={"project": "llm", "limit": 3})).json()
        rest = (
            await c.get(
                "/v1/events/rejected",
                params={"project": "llm", "offset": first["next_offset"], "limit": 3},
            )
        ).json()
    assert first["total"] == 5 and rest["next_offset"] is None
    ids = [i["id"] for i in first["items"] + rest["items"]]
    assert sorted(ids) == [f"new-{i}" for i in range(2, 7)]
    dropped = value(after, "trainledger_dead_letters_dropped_total") - value(
        before, "trainledger_dead_letters_dropped_total"
    )
    assert dropped == 4 + 7 - 5
    redis = sync_client(capped.redis_url)
    held = redis.hlen(Keys.rejected("llm")), redis.zcard(Keys.rejected_index("llm"))
    redis.close()
    assert held == (5, 5)  # the records and their index, both trimmed


async def test_the_listing_cursor_keeps_its_place_when_the_oldest_are_dropped(
    capped: Api,
) -> None:
    await put_card(capped)
    for i in range(4):
        await post(capped, [event(f"old-{i}", "1", sku="no.such.sku")])
    async with capped.client() as c:
        first = (await c.get("/v1/events/rejected", params={"project": "llm", "limit": 2})).json()
        assert [i["id"] for i in first["items"]] == ["old-0", "old-1"]
        for name in ("new-a", "new-b"):  # 6 > 5: old-0 is dropped
            await post(capped, [event(name, "1", sku="no.such.sku")])
        by_offset = await c.get(
            "/v1/events/rejected",
            params={"project": "llm", "limit": 2, "offset": first["next_offset"]},
        )
        by_cursor = await c.get(
            "/v1/events/rejected",
            params={"project": "llm", "limit": 2, "after": first["next_cursor"]},
        )
    # The offset moved with the drop and skips old-2; the cursor does not.
    assert [i["id"] for i in by_offset.json()["items"]] == ["old-3", "new-a"]
    page = by_cursor.json()
    assert [i["id"] for i in page["items"]] == ["old-2", "old-3"]
    assert page["total"] == 5 and page["next_cursor"] is not None
