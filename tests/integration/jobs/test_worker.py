"""The job worker: a job survives its worker's death (the lease runs out, another worker runs
it), one runs per project, a cancel stops a job before it writes, and a job is only ever seen
inside its own project."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from trainledger.auth.model import Principal
from trainledger.budgets.model import BudgetIn
from trainledger.budgets.service import create_budget
from trainledger.events.decoding import JSON, decode_events
from trainledger.ingest.service import Ingestor
from trainledger.jobs.model import KEEP_MS, JobFinished, JobNotFound, JobParams, RunningJob
from trainledger.jobs.service import cancel_job, find_job, project_jobs, queue_job
from trainledger.jobs.worker import JobWorker
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, event

NOW = "2026-01-01T00:00:00+00:00"
LEASE = 0.3  # seconds: short, so a dead worker's lease runs out within the test


def worker(store: Stores) -> JobWorker:
    return JobWorker(store, RateCards(store), lease_seconds=LEASE, poll_seconds=0.02)


async def test_a_dead_workers_job_is_run_by_another(store: Stores) -> None:
    job = await queue_job(store, "pa", "rebuild", JobParams())
    # A worker claims it and dies at once: it never renews nor finishes.
    assert await store.jobs.claim("pa", job.id, "dead", int(LEASE * 1000), NOW, KEEP_MS) == 1
    assert (await find_job(store, "pa", job.id)).state == "running"
    alive = worker(store)
    assert await alive.run_once() is False  # the lease is still the dead worker's
    await asyncio.sleep(LEASE + 0.1)
    assert await alive.run_once() is True
    done = await find_job(store, "pa", job.id)
    assert done.state == "succeeded" and done.attempts == 2, done
    assert done.result is not None and done.result.events == 0
    # The dead worker, back, cannot write over the end.
    assert (
        await store.jobs.finish("pa", job.id, "dead", NOW, ("failed", "", "x"), (0, 0), KEEP_MS)
        == 0
    )
    assert (await find_job(store, "pa", job.id)).state == "succeeded"
    # Nothing left: the worker forgets the project.
    assert await alive.run_once() is False
    assert await store.jobs.projects_with_work() == []


async def test_one_job_at_a_time_per_project_in_order(store: Stores) -> None:
    first = await queue_job(store, "pa", "rebuild", JobParams())
    second = await queue_job(store, "pa", "rebuild", JobParams())
    other = await queue_job(store, "pb", "rebuild", JobParams())
    # The second is not the head: no worker may take it while the first is queued or running.
    assert await store.jobs.claim("pa", second.id, "w", 10_000, NOW, KEEP_MS) == 0
    w = worker(store)
    for _ in range(3):
        assert await w.run_once() is True
    states = {
        j.id: j.state for j in [*await project_jobs(store, "pa"), *await project_jobs(store, "pb")]
    }
    assert states == {first.id: "succeeded", second.id: "succeeded", other.id: "succeeded"}
    a, b = await find_job(store, "pa", first.id), await find_job(store, "pa", second.id)
    assert a.finished_at is not None and b.started_at is not None and a.finished_at <= b.started_at


async def test_cancel_a_queued_job_and_a_running_one(store: Stores) -> None:
    queued = await queue_job(store, "pa", "rebuild", JobParams())
    cancelled = await cancel_job(store, RateCards(store), "pa", queued.id)
    assert cancelled.state == "cancelled" and cancelled.cancel_requested
    with pytest.raises(JobFinished):
        await cancel_job(store, RateCards(store), "pa", queued.id)
    assert await worker(store).run_once() is False  # nothing to run

    running = await queue_job(store, "pa", "rebuild", JobParams())
    w = worker(store)
    token = "w-token"
    assert await store.jobs.claim("pa", running.id, token, 10_000, NOW, KEEP_MS) == 1
    asked = await cancel_job(store, RateCards(store), "pa", running.id)
    assert asked.state == "running" and asked.cancel_requested
    await w.work(RunningJob("pa", running.id, token, "rebuild"))
    ended = await find_job(store, "pa", running.id)
    assert ended.state == "cancelled" and ended.result is None, ended


async def test_a_job_is_seen_only_inside_its_project(store: Stores) -> None:
    job = await queue_job(store, "pb", "rebuild", JobParams())
    with pytest.raises(JobNotFound):
        await find_job(store, "pa", job.id)
    with pytest.raises(JobNotFound):
        await cancel_job(store, RateCards(store), "pa", job.id)
    assert await project_jobs(store, "pa") == []
    assert (await find_job(store, "pb", job.id)).state == "queued"


async def test_a_worker_that_lost_its_lease_writes_nothing(store: Stores) -> None:
    job = await queue_job(store, "pa", "rebuild", JobParams())
    assert await store.jobs.claim("pa", job.id, "holder", 10_000, NOW, KEEP_MS) == 1
    # A worker whose lease ran out and went to "holder" meanwhile: it stops before the work.
    await worker(store).work(RunningJob("pa", job.id, "stale", "rebuild"))
    now = await find_job(store, "pa", job.id)
    assert now.state == "running" and now.result is None and now.attempts == 1


async def test_a_dead_workers_repricing_holds_the_alerts_until_its_job_ends(store: Stores) -> None:
    job = await queue_job(store, "pa", "reprice", JobParams(rate_card="default", version=2))
    assert await store.jobs.held("pa")
    assert await store.jobs.claim("pa", job.id, "dead", int(LEASE * 1000), NOW, KEEP_MS) == 1
    await asyncio.sleep(LEASE + 0.1)
    # The lease ran out, the job did not end: the hold stays (the figures are still mixed).
    assert await store.jobs.held("pa")
    assert await worker(store).run_once() is True
    assert (await find_job(store, "pa", job.id)).state == "succeeded"
    assert not await store.jobs.held("pa")
    # A cancelled one releases it too; a rebuild holds nothing.
    queued = await queue_job(store, "pa", "reprice", JobParams(rate_card="default", version=3))
    assert await store.jobs.held("pa")
    await cancel_job(store, RateCards(store), "pa", queued.id)
    assert not await store.jobs.held("pa")
    await queue_job(store, "pa", "rebuild", JobParams())
    assert not await store.jobs.held("pa")


async def test_a_worker_killed_before_settling_leaves_the_alerts_to_the_next_round(
    store: Stores,
) -> None:
    cards = RateCards(store)
    await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
    ingestor = Ingestor(store, cards)
    admin = Principal("test", "admin", None)

    async def post(event_id: str) -> None:  # 4 GPU-hours at 2.50: 10.00
        items, _ = decode_events(msgspec.json.encode([event(event_id, "4")]), JSON)
        assert (await ingestor.ingest(items, admin)).accepted == 1

    await post("e0")
    data = BudgetIn(project="llm", name="b", amount="15", period="monthly", thresholds=[100])
    budget = await create_budget(store, data, "USD")
    job = await queue_job(store, "llm", "reprice", JobParams(rate_card="default", version=1))
    await post("e1")  # 20.00: the 100 % threshold reached while held
    assert await store.budgets.alerts("llm") == []
    # A worker runs the job to its end and dies before it settles (what `work` does, less
    # the settling): the hold is gone with the job, nothing decided the batch held.
    assert await store.jobs.claim("llm", job.id, "w", 10_000, NOW, KEEP_MS) == 1
    ending = ("succeeded", "", "")
    assert await store.jobs.finish("llm", job.id, "w", NOW, ending, (0, 0), KEEP_MS) == 1
    assert not await store.jobs.held("llm")
    assert await store.budgets.alerts("llm") == []
    # The next worker's round finds the project's jobs all ended and settles it, once.
    assert await worker(store).run_once() is False
    fired = [f["id"].decode() for _, f in await store.budgets.alerts("llm")]
    assert len(fired) == 1 and fired[0].startswith(budget.id + ":") and fired[0].endswith("t100")
    assert await store.jobs.projects_with_work() == []
