"""The job worker: every HTTP worker process runs one, and they share the work through Redis.

Each round it looks at the projects with jobs, takes the lease of a project whose queue head
it can run (`claim`: one running job per project, whichever worker runs it), and runs that job
while a heartbeat renews the lease and reports the progress. A worker that dies stops renewing:
once the lease has run out another worker claims the same job and runs it again from its
start. A heartbeat that finds the lease gone (this worker stalled past it, and another took
the job) stops the work without writing its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..export.pricing import ExportError
from ..rebuild.model import RebuildReport
from ..rebuild.service import RebuildError
from ..storage.connection import StoreError
from .model import HOLD_MS, KEEP_MS, ExportFile, ExportTooLarge, JobCancelled, RunningJob
from .service import finish_job, run_job, settle_released

if TYPE_CHECKING:
    from ..ratecards.catalog import RateCards
    from ..stores import Stores

log = logging.getLogger("trainledger.jobs")

LEASE_SECONDS = 15.0
POLL_SECONDS = 0.5


class JobWorker:
    def __init__(
        self,
        store: Stores,
        rate_cards: RateCards,
        *,
        lease_seconds: float = LEASE_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.store = store
        self.rate_cards = rate_cards
        self.lease_ms = max(1, int(lease_seconds * 1000))
        self.heartbeat_seconds = lease_seconds / 3
        self.poll_seconds = poll_seconds

    async def run(self) -> None:
        while True:
            try:
                ran = await self.run_once()
            except StoreError as exc:  # Redis away for a while: try again next round
                log.warning("job round failed: %s", exc)
                ran = False
            if not ran:
                await asyncio.sleep(self.poll_seconds)

    async def run_once(self) -> bool:
        """Claim and run one job if there is one this worker may take; True if it ran one."""
        jobs = self.store.jobs
        projects = await jobs.projects_with_work()
        await jobs.keep_holds(projects, HOLD_MS)  # a queued repricing holds while we live
        for project in projects:
            while (head := await jobs.queue_head(project)) is not None:
                token = secrets.token_hex(12)
                now = datetime.now(UTC).isoformat()
                outcome = await jobs.claim(project, head, token, self.lease_ms, now, KEEP_MS)
                if outcome == -1:
                    continue  # a cancelled head was dropped: try the next one
                if outcome == 1:
                    fields = await jobs.job(project, head) or {}
                    await self.work(RunningJob(project, head, token, fields.get("kind", "")))
                    return True
                break  # another worker runs this project's job
            else:
                # Its jobs all ended: its alerts are decided before it is forgotten, so a
                # worker killed between a job's end and its settling leaves it to this round.
                await settle_released(self.store, self.rate_cards, project)
                await jobs.forget_if_idle(project)
        return False

    async def work(self, job: RunningJob) -> None:
        """Run a claimed job to its end, renewing its lease meanwhile."""
        if not await self._beat(job):  # at once: a cancel asked since the claim is seen first
            return
        work = asyncio.create_task(run_job(self.store, self.rate_cards, job))
        beat = asyncio.create_task(self._heartbeat(job, work))
        ended = False
        try:
            report: RebuildReport | ExportFile | None = await work
            ended = await finish_job(self.store, job, "succeeded", report)
        except JobCancelled:
            ended = await finish_job(self.store, job, "cancelled", None)
        except (RebuildError, ExportError, ExportTooLarge) as exc:
            ended = await finish_job(self.store, job, "failed", None, str(exc))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not job.lease_lost or (task is not None and task.cancelling()):
                raise  # this worker is stopping: the lease runs out, another takes the job
            log.warning("job %s of %s lost its lease to another worker", job.job_id, job.project)
        except StoreError:
            # Not recorded: the lease runs out and the job is run again.
            log.warning("job %s of %s stopped on a store error", job.job_id, job.project)
        except Exception as exc:  # a bug: the job fails visibly rather than retrying for ever
            log.exception("job %s of %s failed", job.job_id, job.project)
            ended = await finish_job(
                self.store, job, "failed", None, f"internal error: {type(exc).__name__}"
            )
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await beat
        if ended:  # its hold on the budget alerts went with its end: decide them now
            await settle_released(self.store, self.rate_cards, job.project)

    async def _heartbeat(
        self, job: RunningJob, work: asyncio.Task[RebuildReport | ExportFile]
    ) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            if not await self._beat(job):
                work.cancel()
                return
            # The repricings queued behind this job (other projects') keep their holds too.
            jobs = self.store.jobs
            await jobs.keep_holds(await jobs.projects_with_work(), HOLD_MS)

    async def _beat(self, job: RunningJob) -> bool:
        """Renew the job's lease and report its progress; False when the lease is another
        worker's now (this one stops, writing nothing)."""
        outcome = await self.store.jobs.renew(
            job.project,
            job.job_id,
            job.token,
            self.lease_ms,
            datetime.now(UTC).isoformat(),
            job.done,
            job.total,
        )
        if outcome == 0:
            job.lease_lost = True
            return False
        if outcome == 2:
            job.cancel_seen = True
        return True
