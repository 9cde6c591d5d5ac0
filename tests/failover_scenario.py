"""One master of a Redis Cluster SIGKILLed under load: what every caller sees meanwhile.

The scenario behind `test_what_callers_see_while_a_master_fails_over` (in
tests/system/test_cluster_failover.py) and the stress command `python -m tests.stress_failover`:

* a cluster of its own (tests/cluster.py: three masters, three replicas, 1 s node timeout);
* the service in front of it over real HTTP, with `wait_replicas=1`;
* the victim is the master that holds what *every* request needs: the rate card's revision
  (`tl:ratecard:default`) and the caller's token record (a token is minted until its record
  lands there). The per-second rate-limit counter moves from slot to slot and lands on it
  in about one second of three;
* retrying clients post multi-project batches (each spans all six projects, two per
  master; one event per project of a SKU with graduated tiers, so batches read and move the
  tier counters) until each is acknowledged, under the same ids every time;
* probes post one event at a time to each project on a healthy master, without retrying;
* the victim is killed, its replica takes over, the dead node stays down a while (so the
  promoted master has no replica: its writes cannot be confirmed) and then comes back.

Every answer is recorded with its time; `check` says what must hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from redis.cluster import key_slot
from trainledger.auth.model import mint
from trainledger.ledger.eventlog import decode_log
from trainledger.ledger.folding import settle
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.cluster import ClusterNode, ValkeyCluster
from tests.conftest import TEST_CARD, ServerThread, event

# What the service is configured with here, and so the bound on any one answer: the WAIT for
# a replica (wait_timeout_ms) inside the store's deadline for one request (request_timeout_ms).
WAIT_TIMEOUT_MS = 2000  # the default
REQUEST_TIMEOUT_MS = 3000
# Slack for a loaded 2-core machine on top of the configured bound (scheduling, HTTP, the
# pricing itself). Before the bound, a batch on the failed-over shard waited out one WAIT
# per step (a NOSCRIPT on the promoted master, the batch, its duplicate count): 6 s and more.
SLACK_S = 2.5
DOWN_AFTER_FAILOVER_S = 6.0
BATCH_PER_PROJECT = 10
GPU_HOUR_NANO = 2_500_000_000  # TEST_CARD's gpu.h100.hour; every GPU event here is 1 hour
TIERED = "storage.hot.gb_day"  # 1 GB-day each: 0.002 up to 100, 0.0015 up to 1,000, 0.001


def tiered_cost(count: int) -> int:
    """Nano-units of `count` one-GB-day events of TIERED in one month."""
    first = min(count, 100)
    second = min(max(count - 100, 0), 900)
    return first * 2_000_000 + second * 1_500_000 + max(count - 1000, 0) * 1_000_000


@dataclass
class Answer:
    kind: str  # "batch" or "probe"
    project: str
    status: int  # 0: no HTTP answer (transport error)
    started: float
    elapsed: float
    detail: str = ""
    retry_after: str | None = None


@dataclass
class Run:
    answers: list[Answer] = field(default_factory=list)
    acked: dict[str, set[str]] = field(default_factory=dict)
    acked_batches: int = 0
    after_restart: Counter[str] = field(default_factory=Counter)
    restarted: bool = False
    killed_at: float = 0.0
    failed_over_at: float = 0.0
    restarted_at: float = 0.0
    when: str = ""  # every event's time: one month, one set of tier counters
    victim_projects: list[str] = field(default_factory=list)
    healthy_projects: list[str] = field(default_factory=list)
    exact: list[str] = field(default_factory=lambda: ["exactness not checked"])

    def summary(self) -> str:
        by_kind: Counter[str] = Counter(f"{a.kind}:{a.status}" for a in self.answers)
        slowest = max((a.elapsed for a in self.answers), default=0.0)
        why: Counter[str] = Counter(
            a.detail.split(";")[0][:70] for a in self.answers if a.status == 503
        )
        return (
            f"answers {dict(sorted(by_kind.items()))}, 503s {dict(why)}, slowest {slowest:.2f} s, "
            f"failover {self.failed_over_at - self.killed_at:.2f} s, "
            f"batches acknowledged {self.acked_batches}"
        )


def projects_by_master(cluster: ValkeyCluster, per_master: int) -> dict[str, ClusterNode]:
    masters = {n.node_id: n for n in cluster.nodes if n.role == "master"}
    starts = sorted(cluster.masters_by_slot().items())
    found: dict[str, ClusterNode] = {}
    per: Counter[str] = Counter()
    i = 0
    while len(found) < per_master * len(masters):
        name = f"fo{i}"
        i += 1
        slot = key_slot(Keys.meta(name).encode())
        owner = [node_id for start, node_id in starts if start <= slot][-1]
        if per[owner] < per_master:
            per[owner] += 1
            found[name] = masters[owner]
    return found


async def token_on(cluster: ValkeyCluster, node: ClusterNode) -> str:
    """An admin token whose record lives on `node`."""
    while True:
        token, digest, record = mint("admin", None, "failover")
        if cluster.master_of(Keys.token(digest)) is node:
            break
    store = Stores.from_url(cluster.url)
    try:
        await store.tokens.put_token(digest, record["id"], record)
    finally:
        await store.close()
    return token


async def _post(
    run: Run, c: httpx.AsyncClient, kind: str, project: str, body: list[dict[str, object]]
) -> httpx.Response | None:
    started = time.monotonic()
    try:
        r = await c.post("/v1/events", json=body)
    except httpx.TransportError as exc:
        run.answers.append(Answer(kind, project, 0, started, time.monotonic() - started, repr(exc)))
        return None
    detail = ""
    if r.status_code != 200:
        with contextlib.suppress(ValueError):
            detail = str(r.json().get("detail", ""))
        detail = detail or r.text[:300]
    run.answers.append(
        Answer(
            kind,
            project,
            r.status_code,
            started,
            time.monotonic() - started,
            detail,
            r.headers.get("retry-after"),
        )
    )
    return r


async def feeder(
    run: Run, c: httpx.AsyncClient, projects: list[str], name: str, stop: asyncio.Event
) -> None:
    """Multi-project batches, each retried under the same ids until acknowledged."""
    seq = 0
    while not stop.is_set():
        ids = {p: [f"{name}-{seq}-{p}-{i}" for i in range(BATCH_PER_PROJECT)] for p in projects}
        for some in ids.values():
            some[0] += "-tiered"
        seq += 1
        body = [
            event(
                i,
                "1",
                project=p,
                time=run.when,
                sku=TIERED if i.endswith("-tiered") else "gpu.h100.hour",
            )
            for p, some in ids.items()
            for i in some
        ]
        while True:
            r = await _post(run, c, "batch", "*", body)
            if r is not None and r.status_code == 200:
                report = r.json()
                assert report["rejected"] == [], report
                assert report["accepted"] + report["duplicates"] == len(body), report
                for p, some in ids.items():
                    run.acked.setdefault(p, set()).update(some)
                    if run.restarted:
                        run.after_restart[p] += 1
                run.acked_batches += 1
                break
            await asyncio.sleep(0.05)


async def prober(
    run: Run, c: httpx.AsyncClient, project: str, name: str, stop: asyncio.Event
) -> None:
    """One event at a time to a project on a healthy master; an answer other than 200 is
    recorded (and its event counted as acknowledged only if it was 200)."""
    seq = 0
    while not stop.is_set():
        eid = f"{name}-{seq}"
        seq += 1
        r = await _post(run, c, "probe", project, [event(eid, "1", project=project, time=run.when)])
        if r is not None and r.status_code == 200:
            run.acked.setdefault(project, set()).add(eid)
        await asyncio.sleep(0.03)


async def wait_for(check: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def run_scenario(base_dir: Path) -> Run:
    cluster = ValkeyCluster(base_dir)
    await asyncio.to_thread(cluster.start)
    try:
        return await _run(cluster)
    finally:
        await asyncio.to_thread(cluster.stop)


async def _run(cluster: ValkeyCluster) -> Run:
    victim = cluster.master_of(Keys.rate_card("default"))
    token = await token_on(cluster, victim)
    where = projects_by_master(cluster, per_master=2)
    run = Run(
        when=(datetime.now(UTC) - timedelta(hours=1)).isoformat(),
        victim_projects=[p for p, n in where.items() if n is victim],
        healthy_projects=[p for p, n in where.items() if n is not victim],
    )
    url = (
        f"{cluster.url}?wait_replicas=1&wait_timeout_ms={WAIT_TIMEOUT_MS}"
        f"&request_timeout_ms={REQUEST_TIMEOUT_MS}"
    )
    server = await asyncio.to_thread(ServerThread(url).start)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as c:
            r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
            assert r.status_code == 201, r.text
            tasks = [
                asyncio.create_task(feeder(run, c, list(where), f"f{i}", stop)) for i in range(2)
            ]
            tasks += [
                asyncio.create_task(prober(run, c, p, f"p{i}", stop))
                for i, p in enumerate(run.healthy_projects)
            ]
            await wait_for(lambda: run.acked_batches >= 6, "ingest to get going")
            run.killed_at = time.monotonic()
            cluster.kill(victim)
            await asyncio.to_thread(cluster.wait_failover, victim)
            run.failed_over_at = time.monotonic()
            # The promoted master has no replica until the dead node is replaced: its writes
            # cannot be confirmed, so its projects are refused (503) meanwhile.
            await asyncio.sleep(DOWN_AFTER_FAILOVER_S)
            await asyncio.to_thread(cluster.restart, victim)
            run.restarted_at = time.monotonic()
            run.restarted = True
            await wait_for(
                lambda: all(run.after_restart[p] >= 1 for p in where) and run.acked_batches > 0,
                "batches to be acknowledged again after the node came back",
            )
            # A few more probes on the settled cluster.
            await asyncio.sleep(0.5)
            stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            run.exact = await _exact(cluster.url, run)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(server.stop)
    return run


async def _exact(url: str, run: Run) -> list[str]:
    """Per project, what differs between the acknowledged events and what the store holds:
    the log (each id once), the accepted counter and the summed daily totals."""
    problems: list[str] = []
    store = Stores.from_url(url)
    try:
        for project in sorted(run.acked):
            acked = run.acked[project]
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
            if len(ids) != len(set(ids)):
                problems.append(f"{project}: an event applied twice")
            if set(ids) != acked:
                problems.append(
                    f"{project}: {len(acked - set(ids))} acknowledged events lost, "
                    f"{len(set(ids) - acked)} unacknowledged ones in the log"
                )
            if int(meta.get("accepted", "0")) != len(set(ids)):
                problems.append(f"{project}: accepted counter {meta.get('accepted')}")
            tiered = sum(1 for i in set(ids) if i.endswith("-tiered"))
            expected = (len(set(ids)) - tiered) * GPU_HOUR_NANO + tiered_cost(tiered)
            if cost != expected:
                problems.append(f"{project}: totals {cost}, expected {expected}")
    finally:
        await store.close()
    return problems


def check(run: Run) -> list[str]:
    """What a caller must see during the failover; the list of violations (empty: held)."""
    bad: list[str] = []
    for a in run.answers:
        what = f"{a.kind} {a.project} at +{a.started - run.killed_at:.2f} s"
        if a.status == 0:
            bad.append(f"{what}: no answer ({a.detail})")
        elif a.status >= 500 and a.status != 503:
            bad.append(f"{what}: {a.status} {a.detail}")
        elif a.status == 503:
            if a.retry_after is None:
                bad.append(f"{what}: 503 without Retry-After ({a.detail})")
            if "nothing was applied" in a.detail or "not applied" in a.detail:
                bad.append(f"{what}: 503 claims nothing was applied ({a.detail})")
        if a.kind == "probe" and a.status != 200:
            bad.append(f"{what}: a healthy shard's project answered {a.status} ({a.detail})")
        if a.elapsed > REQUEST_TIMEOUT_MS / 1000 + SLACK_S:
            bad.append(f"{what}: held {a.elapsed:.2f} s (answered {a.status})")
    during = [
        a
        for a in run.answers
        if a.kind == "probe" and run.killed_at <= a.started <= run.failed_over_at
    ]
    if not during:
        bad.append("no probe ran while the shard failed over")
    refused = [a for a in run.answers if a.kind == "batch" and a.status == 503]
    if not refused:
        bad.append("the failover was not felt: no batch was refused")
    bad += run.exact
    return bad
