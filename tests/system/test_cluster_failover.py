"""A master of the Redis Cluster dies mid-ingest: nothing acknowledged is lost or doubled.

Each test starts its own cluster (tests/cluster.py: three masters, three replicas, 1 s node
timeout) and the service over real HTTP in front of it. Replication is asynchronous, so the
store waits (WAIT, on the write's own connection) until a replica has the write before it
acknowledges an event; these tests show both halves of that promise: an acknowledged event
survives the failover, and a write its replica did not confirm is not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis.exceptions
from redis.asyncio.connection import Connection as RedisConnection
from redis.cluster import key_slot
from trainledger.auth.model import mint
from trainledger.http.deadline import raised_inside_redis
from trainledger.ledger.eventlog import decode_log
from trainledger.ledger.folding import settle
from trainledger.storage.connection import cluster_options, cluster_request_timeout_ms
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests import failover_scenario
from tests.api.test_ingest import put_card
from tests.cluster import ClusterNode, ValkeyCluster
from tests.conftest import CLUSTER_ENABLED, Api, ServerThread, event, make_admin_token

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

BATCH = 25
GPU_HOUR_NANO = 2_500_000_000  # TEST_CARD's gpu.h100.hour; every event here is 1 hour


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    if not CLUSTER_ENABLED:
        pytest.skip("TRAINLEDGER_TEST_CLUSTER=0")
    c = ValkeyCluster(tmp_path / "cluster")
    c.start()
    try:
        yield c
    finally:
        c.stop()


@contextlib.asynccontextmanager
async def service(url: str) -> AsyncIterator[Api]:
    server = await asyncio.to_thread(ServerThread(url).start)
    try:
        yield Api(server.base_url, await make_admin_token(url), url)
    finally:
        await asyncio.to_thread(server.stop)


def projects_on_every_master(cluster: ValkeyCluster, per_master: int) -> dict[str, ClusterNode]:
    """Project names whose keys land on each master, `per_master` of them each."""
    masters = {n.node_id: n for n in cluster.nodes if n.role == "master"}
    starts = sorted(cluster.masters_by_slot().items())
    found: dict[str, ClusterNode] = {}
    per: Counter[str] = Counter()
    i = 0
    while len(found) < per_master * len(masters):
        name = f"proj{i}"
        i += 1
        slot = key_slot(Keys.meta(name).encode())
        owner = [node_id for start, node_id in starts if start <= slot][-1]
        if per[owner] < per_master:
            per[owner] += 1
            found[name] = masters[owner]
    return found


@dataclass
class Tally:
    acked: dict[str, set[str]] = field(default_factory=dict)  # project -> event ids
    acked_batches: int = 0
    after_failover: Counter[str] = field(default_factory=Counter)  # project -> batches
    failures: Counter[str] = field(default_factory=Counter)  # status code or error name
    failover_done: bool = False


async def feeder(
    api: Api, projects: list[str], name: str, stop: asyncio.Event, tally: Tally
) -> None:
    """Post batches to random projects; retry each batch until it is acknowledged (200)."""
    rng = random.Random(name)
    seq = 0
    async with api.client() as c:
        while not stop.is_set():
            project = rng.choice(projects)
            ids = [f"{name}-{seq}-{i}" for i in range(BATCH)]
            seq += 1
            body = [event(i, "1", project=project) for i in ids]
            while True:
                try:
                    r = await c.post("/v1/events", json=body)
                except httpx.TransportError as exc:
                    tally.failures[type(exc).__name__] += 1
                else:
                    if r.status_code == 200:
                        report = r.json()
                        assert report["rejected"] == [], report
                        # A retry of a batch whose answer was lost finds its events seen.
                        assert report["accepted"] + report["duplicates"] == BATCH, report
                        tally.acked.setdefault(project, set()).update(ids)
                        tally.acked_batches += 1
                        if tally.failover_done:
                            tally.after_failover[project] += 1
                        break
                    tally.failures[str(r.status_code)] += 1
                await asyncio.sleep(0.05)


async def wait_for(check: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def counted(url: str, project: str) -> tuple[int, list[str], int]:
    """What the store holds for the project: its accepted counter, every event id in its log
    (in log order, repeats kept), and the sum of its daily totals (nano)."""
    store = Stores.from_url(url)
    try:
        meta = await store.projects.project_meta(project)
        ids: list[str] = []
        after = "-"
        while True:
            page = await store.ledger.log_entries(project, after=after, count=200)
            if not page:
                break
            for entry_id, blob in page:
                after = entry_id
                ids += [row.id for row in decode_log(blob)]
        await settle(store, project)
        cost = sum((await store.ledger.daily_costs(project)).values())
        return int(meta.get("accepted", "0")), ids, cost
    finally:
        await store.close()


async def test_a_master_killed_mid_ingest_loses_no_acknowledged_event(
    cluster: ValkeyCluster,
) -> None:
    url = cluster.url
    projects = projects_on_every_master(cluster, per_master=2)
    victim_project = next(iter(projects))
    victim = cluster.master_of(Keys.meta(victim_project))
    assert victim is projects[victim_project]
    tally = Tally()
    stop = asyncio.Event()
    async with service(url) as api:
        await put_card(api)
        feeders = [
            asyncio.create_task(feeder(api, list(projects), f"f{i}", stop, tally)) for i in range(3)
        ]
        try:
            await wait_for(lambda: tally.acked_batches >= 20, "ingest to get going")
            before_kill = tally.acked_batches
            cluster.kill(victim)  # SIGKILL, mid-stream
            promoted = await asyncio.to_thread(cluster.wait_failover, victim)
            assert promoted is not victim and promoted.node_id in cluster.master_node_ids()
            # The operator (or the managed service) replaces the dead node: it comes back as
            # the promoted master's replica, so writes there can be replicated again.
            await asyncio.to_thread(cluster.restart, victim)
            tally.failover_done = True
            await wait_for(
                lambda: all(tally.after_failover[p] >= 2 for p in projects),
                "every project (the failed-over shard's too) to be acknowledged again",
            )
        finally:
            stop.set()
            results = await asyncio.gather(*feeders, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
    assert tally.acked_batches > before_kill
    # The kill was felt: some requests failed and were retried.
    assert sum(tally.failures.values()) > 0, tally.failures
    total = 0
    for project in projects:
        accepted, logged, cost = await counted(url, project)
        acked = tally.acked.get(project, set())
        assert len(logged) == len(set(logged)), f"{project}: an event was applied twice"
        assert set(logged) == acked, f"{project}: acknowledged events lost, or extra ones"
        assert accepted == len(acked)
        assert cost == len(acked) * GPU_HOUR_NANO
        total += len(acked)
    assert total == BATCH * tally.acked_batches


async def test_a_project_resharded_mid_ingest_is_counted_exactly_once(
    cluster: ValkeyCluster,
) -> None:
    """Its slot moves to another master while batches land: ASK, TRYAGAIN, then MOVED."""
    url = cluster.url
    projects = projects_on_every_master(cluster, per_master=1)
    moving = next(iter(projects))
    slot = key_slot(Keys.meta(moving).encode())
    source = projects[moving]
    target = next(n for n in projects.values() if n is not source)
    tally = Tally()
    stop = asyncio.Event()
    async with service(url) as api:
        await put_card(api)
        feeders = [
            asyncio.create_task(feeder(api, [moving, moving, *projects], f"r{i}", stop, tally))
            for i in range(3)
        ]
        try:
            await wait_for(lambda: tally.acked_batches >= 20, "ingest to get going")
            moved = await asyncio.to_thread(cluster.migrate_slot, slot, target, 5)
            assert moved > 5  # the project's keys went over in several steps
            assert cluster.master_of(Keys.meta(moving)) is target
            tally.failover_done = True
            await wait_for(
                lambda: all(tally.after_failover[p] >= 2 for p in projects),
                "every project (the moved one too) to be acknowledged again",
            )
        finally:
            stop.set()
            results = await asyncio.gather(*feeders, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
    for project in projects:
        accepted, logged, cost = await counted(url, project)
        acked = tally.acked.get(project, set())
        assert len(logged) == len(set(logged)), f"{project}: an event was applied twice"
        assert set(logged) == acked, f"{project}: acknowledged events lost, or extra ones"
        assert accepted == len(acked) and cost == len(acked) * GPU_HOUR_NANO


@pytest.mark.parametrize("wait", [True, False], ids=["wait", "no-wait"])
async def test_a_write_its_replica_did_not_confirm_is_not_acknowledged(
    cluster: ValkeyCluster, wait: bool
) -> None:
    # A short WAIT, so the refusal comes quickly. Without the wait (the control), the same
    # write is acknowledged: the wait is what keeps the promise.
    url = cluster.url + ("?wait_timeout_ms=300" if wait else "?wait_replicas=0")
    project = "llm"
    master = cluster.master_of(Keys.meta(project))
    replica = cluster.replica_of(master)
    warmup = [event(f"w{i}", "1", project=project) for i in range(BATCH)]
    batch = [event(f"b{i}", "1", project=project) for i in range(BATCH)]
    async with service(url) as api:
        await put_card(api)
        async with api.client() as c:
            r = await c.post("/v1/events", json=warmup)
            assert r.status_code == 200 and r.json()["accepted"] == BATCH, r.text
            pid = cluster.pid(replica)
            os.kill(pid, signal.SIGSTOP)  # the replica stops reading: nothing confirms
            try:
                r = await c.post("/v1/events", json=batch)
                if not wait:
                    assert r.status_code == 200 and r.json()["accepted"] == BATCH, r.text
                    return
                # Applied on the master, but not confirmed by a replica: not acknowledged.
                assert r.status_code == 503, r.text
                assert "not confirmed by a replica" in r.json()["detail"]
                assert r.headers["retry-after"] == "1"
                cluster.kill(master)
            finally:
                os.kill(pid, signal.SIGCONT)
            await asyncio.to_thread(cluster.wait_failover, master)
            await asyncio.to_thread(cluster.restart, master)
            # The client retries the batch it never got an answer for.
            for _ in range(200):
                r = await c.post("/v1/events", json=batch)
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            assert r.status_code == 200, r.text
            report = r.json()
            assert report["accepted"] + report["duplicates"] == BATCH, report
    accepted, logged, cost = await counted(cluster.url, project)
    expected = {e["id"] for e in warmup + batch}
    assert sorted(logged) == sorted(expected)  # each exactly once
    assert accepted == 2 * BATCH and cost == 2 * BATCH * GPU_HOUR_NANO


async def test_what_callers_see_while_a_master_fails_over(tmp_path: Path) -> None:
    """The master holding the rate card and the caller's token is SIGKILLed under load from
    retrying clients (tests/failover_scenario.py; `python -m tests.stress_failover --runs 20`
    runs it many times): no 5xx but 503, every 503 with Retry-After and no claim that nothing
    was applied, every post to a healthy shard's project answered 200 throughout, no answer
    held past request_timeout_ms (plus slack), every acknowledged event counted once."""
    if not CLUSTER_ENABLED:
        pytest.skip("TRAINLEDGER_TEST_CLUSTER=0")
    run = await failover_scenario.run_scenario(tmp_path / "cluster")
    assert failover_scenario.check(run) == [], run.summary()


def _token_pinned_to(
    cluster: ValkeyCluster, node: ClusterNode, seconds: range
) -> tuple[str, str, dict[str, str]]:
    """A token whose record lives on `node`, and whose rate-limit counter does in at least
    two of `seconds` (the counter's key moves to another slot every second; minted until
    both hold, slots looked up locally)."""
    starts = sorted(cluster.masters_by_slot().items())

    def on_node(key: str) -> bool:
        slot = key_slot(key.encode())
        return [owner for start, owner in starts if start <= slot][-1] == node.node_id

    while True:
        token, digest, record = mint("admin", None, "pinned")
        if on_node(Keys.token(digest)) and (
            sum(on_node(Keys.rate_window(record["id"], s)) for s in seconds) >= 2
        ):
            return token, digest, record


async def test_projects_on_other_shards_do_not_depend_on_a_dead_master(
    cluster: ValkeyCluster,
) -> None:
    """The master that holds the rate card, the caller's token record and its rate-limit
    counter for the coming seconds dies, and (its replica told not to take over) stays dead.
    The projects of the other masters are served all along (the token and the card's
    revision read from the dead master's replica, the rate limit counted by the worker); the
    dead master's own project gets a 503 that says the outcome is unknown."""
    victim = cluster.master_of(Keys.rate_card("default"))
    where = projects_on_every_master(cluster, per_master=1)
    healthy = [p for p, n in where.items() if n is not victim]
    lost = next(p for p, n in where.items() if n is victim)
    url = cluster.url + "?wait_replicas=1&wait_timeout_ms=500&request_timeout_ms=1500"
    async with service(url) as api:
        await put_card(api)
        async with api.client() as c:
            for p in where:
                r = await c.post("/v1/events", json=[event("warm", "1", project=p)])
                assert r.status_code == 200, r.text
        now = int(time.time())
        token, digest, record = _token_pinned_to(cluster, victim, range(now + 2, now + 6))
        store = Stores.from_url(cluster.url)
        try:
            await store.tokens.put_token(digest, record["id"], record)
        finally:
            await store.close()
        with contextlib.closing(cluster.replica_of(victim).client()) as r:
            r.config_set("cluster-replica-no-failover", "yes")
        cluster.kill(victim)
        answers: Counter[int] = Counter()
        async with api.client(token) as c:
            i = 0
            while time.time() < now + 6:  # over several seconds: the token's cache expires
                for p in healthy:
                    r = await c.post("/v1/events", json=[event(f"h{i}", "1", project=p)])
                    assert r.status_code == 200, (p, r.text)
                    answers[r.status_code] += 1
                i += 1
                await asyncio.sleep(0.05)
            r = await c.post("/v1/events", json=[event("x", "1", project=lost)])
    assert answers[200] > 20
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    assert "outcome is unknown" in r.json()["detail"], r.text
    assert "nothing was applied" not in r.json()["detail"]


async def test_a_request_the_cluster_does_not_answer_is_refused_at_request_timeout(
    cluster: ValkeyCluster,
) -> None:
    """A master that hangs (SIGSTOP: no error, no answer) no longer holds a request until
    the socket timeout (120 s): it is answered 503 at request_timeout_ms, outcome unknown;
    the retry once the node is back counts the batch once."""
    project = "llm"
    master = cluster.master_of(Keys.meta(project))
    with contextlib.closing(cluster.replica_of(master).client()) as r:
        r.config_set("cluster-replica-no-failover", "yes")  # the master only hangs
    url = cluster.url + "?wait_replicas=1&request_timeout_ms=3000"
    batch = [event(f"s{i}", "1", project=project) for i in range(BATCH)]
    async with service(url) as api:
        await put_card(api)
        async with api.client() as c:
            c.timeout = httpx.Timeout(30.0)  # far past the bound, far short of 120 s
            r = await c.post("/v1/events", json=[event("warm", "1", project=project)])
            assert r.status_code == 200, r.text
            pid = cluster.pid(master)
            os.kill(pid, signal.SIGSTOP)
            try:
                r = await c.post("/v1/events", json=batch)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            detail = r.json()["detail"]
            assert "did not answer within 3000 ms" in detail and "outcome is unknown" in detail
            for _ in range(100):
                r = await c.post("/v1/events", json=batch)
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            assert r.status_code == 200, r.text
            assert r.json()["accepted"] + r.json()["duplicates"] == BATCH
    accepted, logged, cost = await counted(cluster.url, project)
    assert sorted(logged) == sorted(["warm", *(e["id"] for e in batch)])  # each once
    assert accepted == BATCH + 1 and cost == (BATCH + 1) * GPU_HOUR_NANO


async def test_an_error_raised_inside_redis_py_is_told_from_ours() -> None:
    """What a request meets when redis-py's cluster client closes a connection under it
    (`'NoneType' object has no attribute 'writelines'`) is a storage failure (503), not a
    bug of the service (500)."""
    never_connected = RedisConnection()
    # redis-py 8.1 fails there with that AttributeError; 8.2 raises its own ConnectionError
    # ("closed by the server before write"). Either is told as raised inside redis-py.
    with pytest.raises((AttributeError, redis.exceptions.ConnectionError)) as inside:
        await never_connected._send_packed_command([b"PING\r\n"])
    if isinstance(inside.value, AttributeError):
        assert "writelines" in str(inside.value)
    assert raised_inside_redis(inside.value)
    with pytest.raises(RuntimeError) as ours:
        raise RuntimeError("a bug of the service")
    assert not raised_inside_redis(ours.value)


def test_cluster_url_options_are_read_and_the_rest_passed_on() -> None:
    url, replicas, timeout_ms = cluster_options(
        "rediss+cluster://u:p@h:7000/0?wait_replicas=2&ssl_cert_reqs=none&wait_timeout_ms=150"
    )
    assert (url, replicas, timeout_ms) == ("rediss://u:p@h:7000/0?ssl_cert_reqs=none", 2, 150)
    assert cluster_options("redis+cluster://h:7000") == ("redis://h:7000", None, 2000)
    assert cluster_options("redis+cluster://h:7000?wait_replicas=0")[1] == 0
    for bad in ("wait_replicas=x", "wait_replicas=-1", "wait_timeout_ms=0"):
        with pytest.raises(ValueError):
            cluster_options("redis+cluster://h:7000?" + bad)
    # The store's bound on one request: read by trainledger, not passed on to redis-py.
    assert cluster_options("redis+cluster://h:7000?request_timeout_ms=9000")[0] == (
        "redis://h:7000"
    )
    assert cluster_request_timeout_ms("redis+cluster://h:7000") == 5000
    assert cluster_request_timeout_ms("redis+cluster://h:7000?wait_timeout_ms=100") == 3100
    assert (
        cluster_request_timeout_ms(
            "redis+cluster://h:7000?wait_timeout_ms=100&request_timeout_ms=900"
        )
        == 900
    )
    for bad in ("request_timeout_ms=x", "request_timeout_ms=2000"):
        with pytest.raises(ValueError):
            cluster_request_timeout_ms("redis+cluster://h:7000?" + bad)
