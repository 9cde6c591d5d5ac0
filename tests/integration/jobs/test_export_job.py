"""The FOCUS export as a job: its file is byte for byte the streamed export of the log as it
stood when it was asked, one export runs per project, a cancel leaves no file, and a worker
that died mid-file leaves another to write the whole file again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from trainledger.export.pricing import ExportError
from trainledger.export.stream import prepare_export
from trainledger.jobs.model import KEEP_MS, ExportRunning, FileGone
from trainledger.jobs.service import RunningJob, find_job, job_file, queue_export
from trainledger.jobs.worker import JobWorker
from trainledger.ratecards.catalog import RateCards
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import event
from tests.integration.export.test_focus import export_text, ingest

NOW = "2026-01-01T00:00:00+00:00"
LEASE = 0.3
START = datetime(2025, 3, 1, tzinfo=UTC)


def worker(store: Stores) -> JobWorker:
    return JobWorker(store, RateCards(store), lease_seconds=LEASE, poll_seconds=0.02)


async def _seed(store: Stores, n: int) -> None:
    await ingest(store, [event("seed", "1", time=(START - timedelta(days=1)).isoformat())])
    batch = [
        event(
            f"e{i}",
            "1.5",
            "gpu.h100.hour" if i % 3 else "network.cross_region.gb",
            time=(START + timedelta(minutes=7 * i)).isoformat(),
            experiment=f"x{i % 5}",
        )
        for i in range(n)
    ]
    for at in range(0, n, 100):
        await ingest(store, batch[at : at + 100], card=None)


async def _download(store: Stores, job_id: str) -> str:
    _, chunks = await job_file(store, "llm", job_id)
    return b"".join([c async for c in chunks]).decode()


async def test_the_job_writes_the_streamed_export(store: Stores) -> None:
    await _seed(store, 300)
    expected = await export_text(store)
    job = await queue_export(store, RateCards(store), "llm", (None, None), "event")
    assert job.kind == "export" and job.progress.total == 301
    # Events after the ask are not in its file: it reads the log as it stood then.
    await ingest(store, [event("late", "1", time=START.isoformat())], card=None)
    assert await worker(store).run_once() is True
    done = await find_job(store, "llm", job.id)
    assert done.state == "succeeded", done
    assert done.progress.done == done.progress.total == 301
    assert done.download is not None and done.download.events == 301
    assert done.download.href == f"/v1/jobs/{job.id}/file?project=llm"
    text = await _download(store, job.id)
    assert text == expected and "late" not in text
    assert done.download.size_bytes == len(text.encode())
    assert done.download.rows == text.count("\r\n") - 1
    ttl = await store.connection.client.pttl(Keys.job_file("llm", job.id))
    assert 0 < ttl <= 86_400_000  # kept a day, then Redis drops it


async def test_a_window_by_day_as_the_get_does(store: Stores) -> None:
    await _seed(store, 400)
    window = (START + timedelta(hours=5), START + timedelta(days=1, hours=3))
    streamed = await prepare_export(store, RateCards(store), "llm")
    expected = b"".join([c async for c in streamed.csv_chunks(*window, granularity="day")]).decode()
    job = await queue_export(store, RateCards(store), "llm", window, "day")
    # The hours the window touches: 05:00 on day one to 02:59 on day two, 7 minutes apart.
    in_window = sum(
        1 for i in range(400) if window[0] <= START + timedelta(minutes=7 * i) < window[1]
    )
    assert job.progress.total >= in_window
    assert await worker(store).run_once() is True
    done = await find_job(store, "llm", job.id)
    assert done.state == "succeeded" and done.progress.done == in_window, done
    assert await _download(store, job.id) == expected


async def test_one_export_at_a_time_per_project(store: Stores) -> None:
    await _seed(store, 10)
    first = await queue_export(store, RateCards(store), "llm", (None, None), "event")
    with pytest.raises(ExportRunning) as refused:
        await queue_export(store, RateCards(store), "llm", (None, None), "day")
    assert refused.value.job_id == first.id
    other = await queue_export(store, RateCards(store), "pb", (None, None), "event")
    assert other.project == "pb"  # another project's export is not held up
    assert await worker(store).run_once() is True  # the first ends
    again = await queue_export(store, RateCards(store), "llm", (None, None), "day")
    assert again.id != first.id


async def test_a_cancelled_export_leaves_no_file(store: Stores) -> None:
    await _seed(store, 50)
    job = await queue_export(store, RateCards(store), "llm", (None, None), "event")
    assert await store.jobs.claim("llm", job.id, "w1", 10_000, NOW, KEEP_MS) == 1
    assert await store.jobs.cancel("llm", job.id, NOW, KEEP_MS) == 2  # asked of a running job
    await worker(store).work(RunningJob("llm", job.id, "w1", "export"))
    ended = await find_job(store, "llm", job.id)
    assert ended.state == "cancelled" and ended.download is None
    client = store.connection.client
    assert not await client.exists(Keys.job_file("llm", job.id), Keys.job_file("llm", job.id, "w1"))
    with pytest.raises(FileGone):
        await job_file(store, "llm", job.id)


async def test_a_dead_workers_export_is_written_again_whole(store: Stores) -> None:
    await _seed(store, 200)
    expected = await export_text(store)
    job = await queue_export(store, RateCards(store), "llm", (None, None), "event")
    # A worker claims it, writes part of the file under its attempt, and dies.
    assert await store.jobs.claim("llm", job.id, "dead", int(LEASE * 1000), NOW, KEEP_MS) == 1
    await store.jobs.append_chunk("llm", job.id, "dead", b"partial", 60_000)
    alive = worker(store)
    assert await alive.run_once() is False  # the lease is still the dead worker's
    with pytest.raises(FileGone):  # running: no file to download yet
        await job_file(store, "llm", job.id)
    await asyncio.sleep(LEASE + 0.1)
    assert await alive.run_once() is True
    done = await find_job(store, "llm", job.id)
    assert done.state == "succeeded" and done.attempts == 2, done
    assert await _download(store, job.id) == expected
    # The dead attempt's partial key is never the job's, and expires by itself.
    assert 0 < await store.connection.client.pttl(Keys.job_file("llm", job.id, "dead")) <= 60_000


async def test_an_export_of_a_gone_rate_card_is_refused(store: Stores) -> None:
    await _seed(store, 3)
    await store.projects.set_project_fields("llm", {"rate_card": "gone"})
    with pytest.raises(ExportError):
        await queue_export(store, RateCards(store), "llm", (None, None), "event")
    assert await store.jobs.recent("llm") == []
