"""The ingest script's id marks: a batch holding an id seen before writes nothing, whichever
way the server marks ids (HSETEX FNX per shard where it has it, HMGET then HSET elsewhere)."""

from __future__ import annotations

from trainledger.ingest.store import IngestPlan
from trainledger.storage.keys import SEEN_SHARDS, Keys, seen_shard
from trainledger.stores import Stores

from tests.conftest import sync_client


def ingest_plan(ids: list[str]) -> IngestPlan:
    """A plan of these ids alone (no tiers, counters or checks of settings)."""
    return IngestPlan(
        project="llm",
        event_ids=ids,
        seen_shards=[seen_shard(i) for i in ids],
        expiry_days=[99_999] * len(ids),
        tier_checks=[],
        increments=[],
        log_blob=b"entry",
        currency="",
        rate_card="default",
        duplicates_seen=0,
        log_min_id="",
        counters=[],
        budgets_rev="0",
        expected_meta=(),
        rate_card_revision=0,
    )


def _marked(url: str, ids: list[str]) -> list[bool]:
    client = sync_client(url)
    try:
        return [bool(client.hexists(Keys.seen("llm", seen_shard(i)), i)) for i in ids]
    finally:
        client.close()


async def test_a_duplicate_in_a_later_shard_leaves_no_mark(store: Stores, clean_redis: str) -> None:
    await store.ingest.learn_features()
    assert (await store.ingest.apply_batch(ingest_plan(["seen-before"]))).status == 0
    dup_shard = seen_shard("seen-before")
    # Many new ids in other shards first (marked, on HSETEX servers, before the duplicate's
    # shard is reached), then the duplicate, then more new ids.
    fresh = [f"new-{k}" for k in range(400) if seen_shard(f"new-{k}") != dup_shard]
    assert len({seen_shard(i) for i in fresh}) == SEEN_SHARDS - 1
    ids = [*fresh[:300], "seen-before", *fresh[300:]]
    outcome = await store.ingest.apply_batch(ingest_plan(ids))
    assert outcome.status == 1 and outcome.duplicate_positions == (300,)
    assert _marked(clean_redis, fresh) == [False] * len(fresh)  # nothing stayed written
    # Without the duplicate the same ids are accepted, once.
    assert (await store.ingest.apply_batch(ingest_plan(fresh))).status == 0
    assert _marked(clean_redis, fresh) == [True] * len(fresh)
    again = await store.ingest.apply_batch(ingest_plan(fresh[:3]))
    assert again.status == 1 and again.duplicate_positions == (0, 1, 2)


async def test_the_server_is_asked_what_it_can_mark_with(store: Stores, clean_redis: str) -> None:
    await store.ingest.learn_features()
    client = sync_client(clean_redis)
    try:
        # The probe's key does not stay behind.
        assert not client.exists("tl:probe:hsetex")
        info = client.info("server")
    finally:
        client.close()
    server_version = str(info.get("valkey_version") or info.get("redis_version") or "0")
    # Valkey 9 and Redis 8 have HSETEX with FNX; the Redis 7 of the compatibility runs has not.
    expected = int(server_version.split(".")[0]) >= (9 if "valkey_version" in info else 8)
    assert store.ingest._hsetex is expected
