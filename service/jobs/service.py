"""Job use cases: queue a job, show one or a project's list, cancel one, and run one (what a
worker does once it holds the project's lease: service/jobs/worker.py)."""

from __future__ import annotations

import logging
import secrets
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from ..rebuild.service import RebuildError, RebuildReport, rebuild_project, settle_budget_alerts
from .model import (
    HOLD_MS,
    KEEP_MS,
    Job,
    JobCancelled,
    JobFinished,
    JobKind,
    JobNotFound,
    JobParams,
    JobProgress,
)

if TYPE_CHECKING:
    from ..ratecards.catalog import RateCards
    from ..stores import Stores

log = logging.getLogger("trainledger.jobs")

_params_decoder = msgspec.json.Decoder(JobParams)
_result_decoder = msgspec.json.Decoder(RebuildReport)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def job_of(fields: dict[str, str]) -> Job:
    """A job's hash as the API shows it."""
    project, job_id = fields["project"], fields["id"]
    result = fields.get("result")
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
        result=_result_decoder.decode(result) if result else None,
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
    prices until then; `settle_released` decides them once the hold is gone)."""
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
    await store.jobs.add(project, job_id, fields, int(time.time() * 1000), KEEP_MS, hold_ms)
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


class RunningJob:
    """A job a worker holds: its progress so far and whether a cancel was seen, shared by the
    work and the heartbeat that reports it."""

    def __init__(self, project: str, job_id: str, token: str, kind: str) -> None:
        self.project = project
        self.job_id = job_id
        self.token = token
        self.kind = kind
        self.done = 0
        self.total = 0
        self.cancel_seen = False
        self.lease_lost = False

    async def on_batch(self, done: int) -> None:
        self.done = done
        if self.cancel_seen:
            raise JobCancelled(self.job_id)


async def run_job(store: Stores, rate_cards: RateCards, job: RunningJob) -> RebuildReport:
    """The work of a job: both kinds are a rebuild of the project (a repricing prices the
    whole log again; the days it names are those whose figures change). Raises JobCancelled
    when a cancel was seen before the rebuild swapped its totals in, RebuildError when the
    rebuild cannot be done."""
    settings = await store.projects.project_meta(job.project)
    job.total = int(settings.get("accepted", "0"))
    await job.on_batch(0)  # a cancel already seen stops it here, whatever the log holds
    report = await rebuild_project(store, rate_cards, job.project, job.on_batch)
    job.done = job.total = report.events
    return report


async def finish_job(
    store: Stores, job: RunningJob, state: str, result: RebuildReport | None, error: str = ""
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
