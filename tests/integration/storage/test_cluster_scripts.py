"""Scripts on the Redis Cluster: many concurrent first calls, and calls after the nodes' script
caches were emptied (a promoted replica has none: the script cache is not replicated).

Against the suite's cluster (tests/cluster.py: three masters, three replicas). Every round
starts from a fresh connection and SCRIPT FLUSH on every node, so the first EVALSHA of each
script on each node would answer NOSCRIPT.

Before the fix (redis-py 8.1), 50 concurrent first commands of a fresh cluster client were
routed before the client knew the slot map, drew MOVED answers, and redis-py's reset after
them closed idle connections other requests had just taken: some calls failed with
`AttributeError: 'NoneType' object has no attribute 'writelines'` (service/storage/connection.py,
`_Cluster`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
import redis
from trainledger.storage.connection import Connection
from trainledger.stores import Stores

from tests.cluster import ValkeyCluster
from tests.conftest import CLUSTER_ENABLED, sync_client

pytestmark = pytest.mark.cluster

INCR_LUA = "return redis.call('INCR', KEYS[1])"
CALLS = 50
ROUNDS = 4


@pytest.fixture
def cluster(valkey_cluster: ValkeyCluster) -> Iterator[ValkeyCluster]:
    if not CLUSTER_ENABLED:
        pytest.skip("TRAINLEDGER_TEST_CLUSTER=0")
    flush(valkey_cluster, data=True)
    yield valkey_cluster


def flush(cluster: ValkeyCluster, data: bool = False) -> None:
    """SCRIPT FLUSH on every node (and with `data`, FLUSHALL on every master)."""
    if data:
        client = sync_client(cluster.url)
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)  # type: ignore[call-arg]
        client.close()
    for node in cluster.nodes:
        if node.alive:
            client = node.client()
            client.script_flush()
            client.close()


def masters_holding(cluster: ValkeyCluster, sha: str) -> set[int]:
    """Ports of the live masters whose script cache holds `sha`."""
    held = set()
    for node in cluster.nodes:
        if node.alive:
            client = node.client()
            if client.info("replication")["role"] == "master" and client.script_exists(sha)[0]:
                held.add(node.port)
            client.close()
    return held


async def test_concurrent_first_calls_of_a_plain_registered_script(cluster: ValkeyCluster) -> None:
    """The reproduction: a script registered and called the plain way (redis-py's EVALSHA,
    NOSCRIPT, SCRIPT LOAD on every master, EVALSHA) by 50 concurrent first calls through a
    fresh connection. Every call answers, with its own key's count."""
    for round_ in range(ROUNDS):
        flush(cluster)
        conn = Connection.from_url(cluster.url)
        try:
            script = conn.client.register_script(INCR_LUA)
            calls = [script(keys=[f"plain:{round_}:{i}"]) for i in range(CALLS)]
            replies = await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await conn.close()
        failed = [r for r in replies if isinstance(r, BaseException)]
        assert not failed, f"round {round_}: {len(failed)} failed, e.g. {failed[0]!r}"
        assert replies == [1] * CALLS


async def test_concurrent_first_calls_through_run_script(cluster: ValkeyCluster) -> None:
    """`Connection.run_script`: 50 concurrent first calls on a fresh connection all answer,
    and each key's master holds the script afterwards."""
    for round_ in range(ROUNDS):
        flush(cluster)
        conn = Connection.from_url(cluster.url)
        try:
            script = conn.client.register_script(INCR_LUA)
            keys = [f"run:{round_}:{i}" for i in range(CALLS)]
            replies = await asyncio.gather(
                *(conn.run_script(script, [key], []) for key in keys), return_exceptions=True
            )
            owners = {cluster.master_of(key).port for key in keys}
        finally:
            await conn.close()
        failed = [r for r in replies if isinstance(r, BaseException)]
        assert not failed, f"round {round_}: {len(failed)} failed, e.g. {failed[0]!r}"
        assert replies == [1] * CALLS
        assert masters_holding(cluster, script.sha) == owners


async def test_run_script_loads_the_script_on_its_keys_node_only(cluster: ValkeyCluster) -> None:
    """Keys of one slot: the script is loaded on that slot's master, not broadcast to every
    master (a master down elsewhere does not fail a script of another shard)."""
    conn = Connection.from_url(cluster.url)
    try:
        script = conn.client.register_script(INCR_LUA)
        keys = [f"{{one}}:{i}" for i in range(CALLS)]
        replies = await asyncio.gather(*(conn.run_script(script, [k], []) for k in keys))
    finally:
        await conn.close()
    assert replies == [1] * CALLS
    assert masters_holding(cluster, script.sha) == {cluster.master_of("{one}").port}


async def test_run_script_after_every_node_lost_its_scripts(cluster: ValkeyCluster) -> None:
    """A connection that has run the script on every master (so it does not load it again)
    meets emptied script caches, as after a failover or a restart: NOSCRIPT, loaded, run."""
    conn = Connection.from_url(cluster.url)
    try:
        script = conn.client.register_script(INCR_LUA)
        keys = [f"again:{i}" for i in range(CALLS)]
        assert (
            await asyncio.gather(*(conn.run_script(script, [k], []) for k in keys)) == [1] * CALLS
        )
        for round_ in range(2, 2 + ROUNDS):
            flush(cluster)
            replies = await asyncio.gather(
                *(conn.run_script(script, [k], []) for k in keys), return_exceptions=True
            )
            failed = [r for r in replies if isinstance(r, BaseException)]
            assert not failed, f"{len(failed)} failed, e.g. {failed[0]!r}"
            assert replies == [round_] * CALLS
    finally:
        await conn.close()


def store_calls(stores: Stores, tag: str, i: int) -> dict[str, Awaitable[Any]]:
    """One call of each store method that runs a script, on keys of its own (`tag`, `i`),
    by the script it runs."""
    project = f"p-{tag}-{i}"
    record = json.dumps({"id": f"e{i}"}).encode()
    return {
        "rate_window": stores.tokens.count_request(f"tok-{tag}-{i}", 1_700_000_000, 3),
        "revoke_token": stores.tokens.revoke_token(f"no-such-token-{tag}-{i}"),
        "put_rate_card": stores.ratecards.put_rate_card_version(f"card-{tag}-{i}", b"{}"),
        "put_rejected": stores.rejected.put_rejected(project, [(f"e{i}", record, 1000 + i)]),
        "append_progress": stores.waste.add_experiment_progress(project, "exp", b'{"step":1}'),
        "read_unfolded": stores.ledger.unfolded_entries(project, 10, 1 << 20),
        "claim_deliveries": stores.webhooks.claim_deliveries(project, 1000, 2000, 10),
        "replace_field": stores.webhooks.replace_webhook(f"wh-{tag}-{i}", b"old", b"new"),
        "redeliver": stores.webhooks.redeliver(project, 1000, [(f"d{i}", b"a", b"b")]),
        "fire_regressions": stores.evaluations.fire_regressions(project, [(f"a{i}", record)]),
    }


EXPECTED: dict[str, Any] = {
    "rate_window": 3,
    "revoke_token": False,  # no such token
    "put_rate_card": 1,  # the card's first version
    "put_rejected": 0,  # none dropped
    "append_progress": None,
    "read_unfolded": ("", "", []),  # an empty project: no cursor, no log
    "claim_deliveries": [],
    "replace_field": False,  # no such webhook
    "redeliver": [],  # no such dead letter
}


async def run_every_store_script(stores: Stores, tag: str, projects: int) -> None:
    calls = [store_calls(stores, tag, i) for i in range(projects)]
    names = [name for batch in calls for name in batch]
    replies = await asyncio.gather(
        *(call for batch in calls for call in batch.values()), return_exceptions=True
    )
    failed = {n: r for n, r in zip(names, replies, strict=True) if isinstance(r, BaseException)}
    assert not failed, f"{len(failed)} failed: {failed}"
    for i, batch in enumerate(calls):
        got = dict(zip(batch, replies[i * len(batch) : (i + 1) * len(batch)], strict=True))
        for name, want in EXPECTED.items():
            assert got[name] == want, (name, got[name])
        assert got["fire_regressions"] == [f"a{i}"]
        project = f"p-{tag}-{i}"
        assert (await stores.rejected.rejected_page(project, 0, 10))[1] == 1
        assert await stores.waste.experiment_progress(project)


async def test_every_store_script_on_a_fresh_worker_and_after_the_caches_emptied(
    cluster: ValkeyCluster,
) -> None:
    """Each store method that runs a script, 8 projects' worth at once (80 first calls of
    10 scripts over the three masters) from a fresh worker; then again on the same worker
    after SCRIPT FLUSH on every node, as on a promoted replica after a failover."""
    flush(cluster)
    stores = Stores.from_url(cluster.url)
    try:
        await run_every_store_script(stores, "fresh", 8)
        flush(cluster)
        await run_every_store_script(stores, "flushed", 8)
    finally:
        await stores.close()
