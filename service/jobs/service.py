"""Job use cases: queue a job, show one or a project's list, cancel one, and run one (what a
worker does once it holds the project's lease: service/jobs/worker.py)."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from ..export.aggregate import Granularity
from ..export.stream import first_chunk_read
from ..rebuild.model import RebuildReport
from ..rebuild.service import RebuildError, rebuild_project, settle_budget_alerts
from .export import export_file, export_params, run_export
from .model import (
    EXCLUSIVE_KINDS,
    HOLD_MS,
    KEEP_MS,
    ExportFile,
    ExportRunning,
    Job,
    JobFinished,
    JobKind,
    JobNotFound,
    JobParams,
    JobProgress,
    RunningJob,
)

if TYPE_CHECKING:
    from ..ratecards.catalog import RateCards
    from ..stores import Stores

log = logging.getLogger("trainledger.jobs")

_params_decoder = msgspec.json.Decoder(JobParams)
_result_decoder = msgspec.json.Decoder(RebuildReport)
_file_decoder = msgspec.json.Decoder(ExportFile)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def job_of(fields: dict[str, str]) -> Job:
    """A job's hash as the API shows it."""
    project, job_id = fields["project"], fields["id"]
    result = fields.get("result")
    exported = fields["kind"] == "export"
    return Job(
        id=job_id,
        project=project,
        kind=fields["kind"],  # type: ignore[arg-type]
        state=fields["state"],  # type: ignore[arg-type]
        params=_params_decoder.decode(fields.get("params", "{}")),
        progress=JobProgress(int(fields.get("done", "0")), int(fields.get("total", "0"))),
        created_at=datetime.fromisoformat(fields["created_at"]),
        started_at=_time(fields.get("started_at")),
        finished_at=_time(fields.get("finished_at")),
        attempts=int(fields.get("attempts", "0")),
        cancel_requested=fields.get("cancel") == "1",
        result=_result_decoder.decode(result) if result and not exported else None,
        download=_file_decoder.decode(result) if result and exported else None,
        error=fields.get("error") or None,
        href=f"/v1/jobs/{job_id}?project={project}",
    )


def new_job_id() -> str:
    return "job_" + secrets.token_hex(8)


async def queue_job(
    store: Stores,
    project: str,
    kind: JobKind,
    params: JobParams,
    total: int = 0,
    job_id: str | None = None,
) -> Job:
    """Queue a job for the project: it runs after the project's jobs queued before it. A
    repricing holds the project's budget alert decisions until it ends (its figures mix two
    prices until then; `settle_released` decides them once the hold is gone). An export is
    refused (ExportRunning) while the project's last export job is queued or running."""
    job_id = job_id or new_job_id()
    fields = {
        "id": job_id,
        "project": project,
        "kind": kind,
        "state": "queued",
        "params": msgspec.json.encode(params).decode(),
        "done": "0",
        "total": str(total),
        "created_at": _now(),
    }
    hold_ms = HOLD_MS if kind == "reprice" else 0
    exclusive = kind in EXCLUSIVE_KINDS
    now_ms = int(time.time() * 1000)
    if not await store.jobs.add(
        project, job_id, fields, now_ms, KEEP_MS, hold_ms, exclusive=exclusive
    ):
        raise ExportRunning(project, await store.jobs.last_exclusive(project) or "")
    return job_of(fields)


async def settle_released(store: Stores, rate_cards: RateCards, project: str) -> None:
    """After a job ended: once no job holds the project's budget alerts, every threshold its
    spend now reaches and that has not fired fires, once. The batches accepted while the hold
    was on moved the counters without deciding; a repricing that succeeded settled on its
    rebuilt figures already (this catches the batches after its swap), one that failed or was
    cancelled is decided here, on the figures as they stand."""
    if await store.jobs.held(project):
        return  # another repricing of the project is still to come: it settles
    try:
        await settle_budget_alerts(store, rate_cards, project)
    except RebuildError as exc:  # events kept arriving: the next batch's checks go on
        log.warning("budget alerts of %s not settled after its job: %s", project, exc)


async def queue_rebuild(store: Stores, project: str) -> Job:
    """`POST /v1/projects/{project}/rebuild` as a job."""
    meta = await store.projects.project_meta(project)
    return await queue_job(store, project, "rebuild", JobParams(), int(meta.get("accepted", "0")))


async def queue_export(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    window: tuple[datetime | None, datetime | None],
    granularity: Granularity,
) -> Job:
    """`POST /v1/export/focus/jobs`: the export of the window as a job, the log read up to
    its last entry now. Raises ExportRunning while the project's last export job is queued
    or running, ExportError when the log cannot be exported (its rate card is gone)."""
    params, total = await export_params(store, rate_cards, project, window, granularity)
    return await queue_job(store, project, "export", params, total)


def wants_async(prefer: str | None) -> bool:
    """Whether a `Prefer` header asks for `respond-async` (RFC 7240: comma-separated
    preferences, each maybe with parameters after `;`)."""
    if not prefer:
        return False
    return any(p.split(";", 1)[0].strip().lower() == "respond-async" for p in prefer.split(","))


async def find_job(store: Stores, project: str, job_id: str) -> Job:
    """The project's job `job_id`. Raises JobNotFound (also for another project's job: the
    lookup is inside the project's keys)."""
    fields = await store.jobs.job(project, job_id)
    if fields is None or fields.get("project") != project:
        raise JobNotFound(project, job_id)
    return job_of(fields)


async def job_file(store: Stores, project: str, job_id: str) -> tuple[str, AsyncIterator[bytes]]:
    """A succeeded export job's file name and CSV chunks (the first already read: a store
    outage there is an error answer). Raises JobNotFound, or FileGone (no file, or expired)."""
    job = await find_job(store, project, job_id)
    chunks = await export_file(store, job)
    assert job.download is not None  # export_file saw it
    return job.download.filename, await first_chunk_read(chunks)


async def project_jobs(store: Stores, project: str) -> list[Job]:
    return [job_of(fields) for fields in await store.jobs.recent(project)]


async def cancel_job(store: Stores, rate_cards: RateCards, project: str, job_id: str) -> Job:
    """Cancel a queued job at once (its hold on the budget alerts released, and they are
    decided), or ask a running one to stop at its next step (it then ends cancelled, having
    written nothing). Raises JobNotFound, or JobFinished."""
    outcome = await store.jobs.cancel(project, job_id, _now(), KEEP_MS)
    if outcome == -1:
        raise JobNotFound(project, job_id)
    if outcome == 1:
        await settle_released(store, rate_cards, project)
    job = await find_job(store, project, job_id)
    if outcome == 0:
        raise JobFinished(job)
    return job


async def run_job(
    store: Stores, rate_cards: RateCards, job: RunningJob
) -> RebuildReport | ExportFile:
    """The work of a job: an export writes its file (service/jobs/export.py); the other
    kinds are a rebuild of the project (a repricing prices the whole log again; the days it
    names are those whose figures change). Raises JobCancelled when a cancel was seen before
    the rebuild swapped its totals in (or the export's file was complete), RebuildError when
    the rebuild cannot be done, ExportError or ExportTooLarge when the export cannot."""
    if job.kind == "export":
        fields = await store.jobs.job(job.project, job.job_id) or {}
        job.total = int(fields.get("total", "0"))
        params = _params_decoder.decode(fields.get("params", "{}"))
        return await run_export(store, rate_cards, job, params)
    settings = await store.projects.project_meta(job.project)
    job.total = int(settings.get("accepted", "0"))
    await job.on_batch(0)  # a cancel already seen stops it here, whatever the log holds
    report = await rebuild_project(store, rate_cards, job.project, job.on_batch)
    job.done = job.total = report.events
    return report


async def finish_job(
    store: Stores,
    job: RunningJob,
    state: str,
    result: RebuildReport | ExportFile | None,
    error: str = "",
) -> bool:
    """Record the end of a job; False when the lease was no longer the worker's (another
    worker has the job now, and nothing is written)."""
    body = msgspec.json.encode(result).decode() if result is not None else ""
    outcome = await store.jobs.finish(
        job.project,
        job.job_id,
        job.token,
        _now(),
        (state, body, error),
        (job.done, job.total),
        KEEP_MS,
    )
    return outcome == 1
