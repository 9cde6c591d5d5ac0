"""jobs.lua against its Python reference (service/jobs/reference.py): random sequences of
every operation, from two workers' tokens on three jobs, give the same answers and leave the
same lease, queue, job hashes, holds on the budget alerts and last exclusive (export) job."""

from __future__ import annotations

import asyncio
import random

from trainledger.jobs.reference import ProjectJobs
from trainledger.storage.keys import Keys
from trainledger.storage.replies import as_text
from trainledger.stores import Stores

PROJECT = "pj"
IDS = ("j1", "j2", "j3")
TOKENS = ("w1", "w2")
KEEP_MS = 86_400_000
HOLD_MS = 600_000
LEASE_MS = 600_000  # never runs out by itself here: "expire" ends it, in both


State = tuple[str | None, list[str], dict[str, dict[str, str]], set[str], str | None]


async def _state(store: Stores) -> State:
    client = store.connection.client
    holds = {as_text(x) for x in await client.hkeys(Keys.budget_hold(PROJECT))}
    lease = await client.get(Keys.job_lease(PROJECT))
    queue = [as_text(x) for x in await client.lrange(Keys.job_queue(PROJECT), 0, -1)]
    jobs = {}
    for job_id in IDS:
        raw = await client.hgetall(Keys.job(PROJECT, job_id))
        if raw:
            jobs[job_id] = {as_text(k): as_text(v) for k, v in raw.items()}
    last = await client.get(Keys.job_exclusive(PROJECT))
    return (
        (None if lease is None else as_text(lease)),
        queue,
        jobs,
        holds,
        None if last is None else as_text(last),
    )


async def _step(store: Stores, ref: ProjectJobs, rng: random.Random, n: int) -> str:
    """One random operation on both; returns what was done, for the failure message."""
    ops = ["add", "claim", "claim", "renew", "finish", "cancel", "expire", "hold", "release"]
    op = rng.choice([*ops, "unhold"])
    job_id, token, now = rng.choice(IDS), rng.choice(TOKENS), f"t{n}"
    if op == "add":
        if job_id in ref.jobs:
            return "add (skipped: exists)"
        kind = rng.choice(["rebuild", "reprice", "export"])
        fields = {"id": job_id, "project": PROJECT, "kind": kind, "state": "queued"}
        holds, exclusive = kind == "reprice", kind == "export"
        added = await store.jobs.add(
            PROJECT, job_id, fields, n, KEEP_MS, HOLD_MS if holds else 0, exclusive=exclusive
        )
        want = ref.add(job_id, fields, holds, exclusive)
        assert int(added) == want, f"add {kind} {job_id}: script {added}, reference {want}"
        return f"add {kind} {job_id} -> {want}"
    if op == "expire":
        await store.jobs.end_lease(PROJECT)
        ref.lease = None
        return "expire"
    if op == "unhold":  # the hold ran out (every worker dead that long)
        await store.connection.client.delete(Keys.budget_hold(PROJECT))
        ref.holds.clear()
        return "unhold"
    if op == "hold":
        await store.jobs.hold(PROJECT, job_id, HOLD_MS)
        ref.hold(job_id)
        return f"hold {job_id}"
    if op == "release":
        await store.jobs.release(PROJECT, job_id)
        ref.release(job_id)
        return f"release {job_id}"
    if op == "claim":
        got = await store.jobs.claim(PROJECT, job_id, token, LEASE_MS, now, KEEP_MS)
        want = ref.claim(job_id, token, now)
    elif op == "renew":
        done, total = rng.randint(0, 9), 9
        got = await store.jobs.renew(PROJECT, job_id, token, LEASE_MS, now, done, total)
        want = ref.renew(job_id, token, now, done, total)
    elif op == "finish":
        state = rng.choice(["succeeded", "failed", "cancelled"])
        result, error = rng.choice([("", ""), ('{"x":1}', ""), ("", "boom")])
        got = await store.jobs.finish(
            PROJECT, job_id, token, now, (state, result, error), (3, 9), KEEP_MS
        )
        want = ref.finish(job_id, token, now, state, result, error, (3, 9))
    else:
        got = await store.jobs.cancel(PROJECT, job_id, now, KEEP_MS)
        want = ref.cancel(job_id, now)
    assert got == want, f"{op} {job_id} {token}: script {got}, reference {want}"
    return f"{op} {job_id} {token} -> {got}"


async def test_the_script_follows_its_reference(store: Stores) -> None:
    rng = random.Random(33)
    for _ in range(25):
        await store.connection.client.delete(
            Keys.job_lease(PROJECT),
            Keys.job_queue(PROJECT),
            Keys.budget_hold(PROJECT),
            Keys.jobs(PROJECT),
            Keys.job_exclusive(PROJECT),
            *[Keys.job(PROJECT, j) for j in IDS],
        )
        ref = ProjectJobs()
        done: list[str] = []
        for n in range(40):
            done.append(await _step(store, ref, rng, n))
            want = (ref.lease, ref.queue, ref.jobs, ref.holds, ref.exclusive)
            assert await _state(store) == want, done


async def test_one_lease_per_project_and_only_its_holder_writes(store: Stores) -> None:
    fields = {"id": "j1", "project": PROJECT, "kind": "rebuild", "state": "queued"}
    await store.jobs.add(PROJECT, "j1", fields, 1, KEEP_MS)
    assert await store.jobs.claim(PROJECT, "j1", "w1", LEASE_MS, "t1", KEEP_MS) == 1
    assert await store.jobs.claim(PROJECT, "j1", "w2", LEASE_MS, "t2", KEEP_MS) == 0
    assert await store.jobs.renew(PROJECT, "j1", "w2", LEASE_MS, "t2", 1, 2) == 0
    assert (
        await store.jobs.finish(PROJECT, "j1", "w2", "t2", ("failed", "", "x"), (0, 0), KEEP_MS)
        == 0
    )
    assert (await store.jobs.job(PROJECT, "j1") or {})["state"] == "running"
    # The holder gone (its lease ran out): another worker takes the same job again.
    await store.jobs.end_lease(PROJECT)
    assert await store.jobs.claim(PROJECT, "j1", "w2", LEASE_MS, "t3", KEEP_MS) == 1
    job = await store.jobs.job(PROJECT, "j1") or {}
    assert job["owner"] == "w2" and job["attempts"] == "2" and job["started_at"] == "t1"
    # The first holder, back, can no longer write its end.
    assert (
        await store.jobs.finish(PROJECT, "j1", "w1", "t4", ("succeeded", "", ""), (0, 0), KEEP_MS)
        == 0
    )
    assert (
        await store.jobs.finish(PROJECT, "j1", "w2", "t4", ("succeeded", "", ""), (0, 0), KEEP_MS)
        == 1
    )
    assert await store.jobs.queue_head(PROJECT) is None


async def test_ended_jobs_expire_and_leave_the_index(store: Stores) -> None:
    client = store.connection.client
    for n, job_id in enumerate(IDS):
        fields = {"id": job_id, "project": PROJECT, "kind": "rebuild", "state": "queued"}
        await store.jobs.add(PROJECT, job_id, fields, 1000 * n, KEEP_MS)
    assert await client.pttl(Keys.job(PROJECT, "j1")) == -1  # queued: kept until it ends
    assert await store.jobs.cancel(PROJECT, "j1", "t", KEEP_MS) == 1
    assert 0 < await client.pttl(Keys.job(PROJECT, "j1")) <= KEEP_MS
    assert await store.jobs.claim(PROJECT, "j2", "w", LEASE_MS, "t", KEEP_MS) == 1
    assert await store.jobs.finish(PROJECT, "j2", "w", "t", ("succeeded", "", ""), (0, 0), KEEP_MS)
    assert 0 < await client.pttl(Keys.job(PROJECT, "j2")) <= KEEP_MS
    # A job added a keep-period later: the index forgets the ids created before it.
    fields = {"id": "j4", "project": PROJECT, "kind": "rebuild", "state": "queued"}
    await store.jobs.add(PROJECT, "j4", fields, 1000 + KEEP_MS, KEEP_MS)
    index = [as_text(x) for x in await client.zrange(Keys.jobs(PROJECT), 0, -1)]
    assert index == ["j2", "j3", "j4"]


async def test_a_repricing_holds_the_alerts_while_alive_and_no_longer(store: Stores) -> None:
    client = store.connection.client
    hold = Keys.budget_hold(PROJECT)
    fields = {"id": "j1", "project": PROJECT, "kind": "reprice", "state": "queued"}
    await store.jobs.add(PROJECT, "j1", fields, 1, KEEP_MS, HOLD_MS)
    assert await store.jobs.held(PROJECT)
    assert 0 < await client.pttl(hold) <= HOLD_MS
    # Every sign of life renews it: a worker's round seeing it queued, the claim, a heartbeat.
    for renew in ("round", "claim", "beat"):
        await client.pexpire(hold, 1000)
        if renew == "round":
            await store.jobs.keep_holds([PROJECT], HOLD_MS)
        elif renew == "claim":
            assert await store.jobs.claim(PROJECT, "j1", "w", LEASE_MS, "t", KEEP_MS) == 1
        else:
            assert await store.jobs.renew(PROJECT, "j1", "w", LEASE_MS, "t", 1, 2) == 1
        assert 1000 < await client.pttl(hold) <= HOLD_MS, renew
    # Its end releases it in the same step.
    ending = ("failed", "", "boom")
    assert await store.jobs.finish(PROJECT, "j1", "w", "t", ending, (1, 2), KEEP_MS) == 1
    assert not await store.jobs.held(PROJECT)
    # A rebuild holds nothing; a repricing nothing renews (every worker dead) stops holding.
    fields = {"id": "j2", "project": PROJECT, "kind": "rebuild", "state": "queued"}
    await store.jobs.add(PROJECT, "j2", fields, 2, KEEP_MS)
    assert not await store.jobs.held(PROJECT)
    fields = {"id": "j3", "project": PROJECT, "kind": "reprice", "state": "queued"}
    await store.jobs.add(PROJECT, "j3", fields, 3, KEEP_MS, 30)
    assert await store.jobs.held(PROJECT)
    await asyncio.sleep(0.1)
    assert not await store.jobs.held(PROJECT)


async def test_one_export_queued_or_running_per_project(store: Stores) -> None:
    """An exclusive job is refused while the last one is in the queue (queued or running),
    and accepted again once it ended; other kinds are never refused."""

    def fields(job_id: str, kind: str) -> dict[str, str]:
        return {"id": job_id, "project": PROJECT, "kind": kind, "state": "queued"}

    assert await store.jobs.add(PROJECT, "j1", fields("j1", "export"), 1, KEEP_MS, exclusive=True)
    assert not await store.jobs.add(
        PROJECT, "j2", fields("j2", "export"), 2, KEEP_MS, exclusive=True
    )
    assert await store.jobs.job(PROJECT, "j2") is None  # nothing written
    assert await store.jobs.add(PROJECT, "j3", fields("j3", "rebuild"), 3, KEEP_MS)
    assert await store.jobs.claim(PROJECT, "j1", "w", LEASE_MS, "t", KEEP_MS) == 1
    assert not await store.jobs.add(
        PROJECT, "j2", fields("j2", "export"), 4, KEEP_MS, exclusive=True
    )
    assert await store.jobs.finish(PROJECT, "j1", "w", "t", ("succeeded", "", ""), (0, 0), KEEP_MS)
    assert await store.jobs.add(PROJECT, "j2", fields("j2", "export"), 5, KEEP_MS, exclusive=True)
    assert await store.jobs.last_exclusive(PROJECT) == "j2"
    # A queued one cancelled leaves the queue: the next is accepted.
    assert await store.jobs.cancel(PROJECT, "j2", "t", KEEP_MS) == 1
    assert await store.jobs.add(PROJECT, "j4", fields("j4", "export"), 6, KEEP_MS, exclusive=True)
