"""Jobs: long work (a repricing, a rebuild, a FOCUS export) run in the background, one at a
time per project.

A job is queued, then running (a worker holds the project's lease and renews it while it
works), then succeeded, failed or cancelled. A worker that dies stops renewing; when its lease
runs out another worker takes the job again from its start (a rebuild is all or nothing: it
swaps its totals in only at its end, so running it again is safe; an export writes its file
under its attempt's own key and names it only at its end, and reads the log up to the entry
recorded when it was asked, so running it again gives the same file).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from ..errors import Conflict, NotFound
from ..ratecards.model import RateCardVersion
from ..rebuild.model import RebuildReport

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
JobKind = Literal["reprice", "rebuild", "export"]
# The kinds of which a project has at most one queued or running job (a second is a 409).
EXCLUSIVE_KINDS: tuple[str, ...] = ("export",)
FINISHED: tuple[str, ...] = ("succeeded", "failed", "cancelled")

# How long an ended job stays to be read (its hash expires then; the index forgets it).
KEEP_MS = 30 * 86_400_000

# How long a reprice job's hold on its project's budget alerts outlives the last sign that the
# job is alive (its adding, its claim, a heartbeat, a worker's round seeing it queued): a job
# whose every worker died stops holding the alerts then.
HOLD_MS = 10 * 60_000

JOB_ID_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$(?!\n)"
JobId = Annotated[str, msgspec.Meta(pattern=JOB_ID_PATTERN)]


# How long an export job's file can be downloaded after the job ended (its key expires then).
FILE_KEEP_MS = 86_400_000
# The most an export job's file may take in Redis, compressed (a larger export fails: ask for
# a window or `granularity=day`). FOCUS CSV compresses about 10:1.
FILE_MAX_BYTES = 256 << 20


class JobParams(msgspec.Struct, omit_defaults=True):
    """What a job was asked to do: for a repricing, the rate-card version and the days it
    affects in the project; for an export, its window, granularity and the last log entry it
    reads (the log as it stood when it was asked: a run again gives the same file)."""

    rate_card: str | None = None
    version: int | None = None
    days: list[str] = msgspec.field(default_factory=list)
    from_time: datetime | None = msgspec.field(default=None, name="from")
    to_time: datetime | None = msgspec.field(default=None, name="to")
    granularity: Literal["event", "hour", "day"] | None = None
    until_entry: str | None = None


class ExportFile(msgspec.Struct, kw_only=True):
    """A succeeded export job's file: where to download it, until when."""

    href: str
    filename: str
    size_bytes: int
    rows: int
    events: int
    expires_at: datetime


class JobProgress(msgspec.Struct):
    """Events priced again so far, of the project's accepted events (an export: events
    written so far, of the events its window's hours hold)."""

    done: int
    total: int


class Job(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A job as `GET /v1/jobs/{job_id}` shows it."""

    id: str
    project: str
    kind: JobKind
    state: JobState
    params: JobParams
    progress: JobProgress
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    cancel_requested: bool = False
    # Once succeeded: the rebuild's report (with the budget alerts it settled).
    result: RebuildReport | None = None
    # Once an export succeeded: its file.
    download: ExportFile | None = None
    error: str | None = None
    href: str = ""


class JobList(msgspec.Struct):
    """Answer of `GET /v1/jobs`: the project's jobs, newest first."""

    jobs: list[Job]


class AffectedProject(msgspec.Struct):
    """A project a past-dated rate-card version reprices: the UTC days holding events priced
    at or after its `effective_from` (to the hour), and how many such events."""

    project: str
    days: list[str]
    events: int


class RepricingAccepted(msgspec.Struct):
    """Answer `202` of `PUT /v1/rate-cards/{name}?reprice=true`: the version stored, the
    projects and days it reprices, and one job per project doing it."""

    version: RateCardVersion
    affected: list[AffectedProject]
    jobs: list[Job]


class JobNotFound(NotFound):
    def __init__(self, project: str, job_id: str) -> None:
        super().__init__(job_id)
        self.project = project
        self.job_id = job_id

    def problem_detail(self) -> str:
        return f"no job {self.job_id!r} in {self.project!r}"


class JobFinished(Conflict):
    """A cancel asked of a job that already ended."""

    kind = "job-finished"

    def __init__(self, job: Job) -> None:
        super().__init__(job.id)
        self.job = job

    def problem_detail(self) -> str:
        return f"job {self.job.id!r} already ended ({self.job.state})"

    def problem_members(self) -> dict[str, Any]:
        return {"state": self.job.state}


class ExportRunning(Conflict):
    """An export asked of a project whose export job is still queued or running."""

    kind = "export-running"

    def __init__(self, project: str, job_id: str) -> None:
        super().__init__(job_id)
        self.project = project
        self.job_id = job_id

    def problem_detail(self) -> str:
        return (
            f"an export job of {self.project!r} is queued or running ({self.job_id!r}): "
            "one at a time per project; wait for it to end or cancel it"
        )

    def problem_members(self) -> dict[str, Any]:
        return {"job": self.job_id, "href": f"/v1/jobs/{self.job_id}?project={self.project}"}


class ExportTooLarge(Exception):
    """The export's file grew past FILE_MAX_BYTES: the job fails."""


class FileGone(NotFound):
    """A download asked of an export job with no file: not succeeded, or its file expired."""

    def __init__(self, job: Job) -> None:
        super().__init__(job.id)
        self.job = job

    def problem_detail(self) -> str:
        if self.job.kind != "export":
            return f"job {self.job.id!r} has no file (a {self.job.kind} job)"
        if self.job.state != "succeeded":
            return f"job {self.job.id!r} has no file ({self.job.state})"
        return f"the file of job {self.job.id!r} expired"


class JobCancelled(Exception):
    """Raised inside a running job when its cancel was seen: it stops before writing."""


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
