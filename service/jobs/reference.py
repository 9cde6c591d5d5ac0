"""The Python reference of ``service/storage/scripts/jobs.lua``: the same state changes of
one project's jobs, written to be read and checked (tests/integration/jobs/test_jobs_script.py
runs random sequences of operations against both and compares).

The lease's and the hold's expiries are not modelled: the test ends either by deleting it,
in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ProjectJobs:
    """One project's lease, queue, job hashes, the ids holding its budget alerts and the last
    exclusive job's id, as the script sees them."""

    lease: str | None = None
    queue: list[str] = field(default_factory=list)
    jobs: dict[str, dict[str, str]] = field(default_factory=dict)
    holds: set[str] = field(default_factory=set)
    exclusive: str | None = None  # the last exclusive job's id

    def hold(self, job_id: str) -> int:
        self.holds.add(job_id)
        return 1

    def release(self, job_id: str) -> int:
        self.holds.discard(job_id)
        return 1

    def add(
        self, job_id: str, fields: dict[str, str], holds: bool = False, exclusive: bool = False
    ) -> int:
        if exclusive:
            if self.exclusive is not None and self.exclusive in self.queue:
                return 0  # the last one is queued or running still
            self.exclusive = job_id
        if holds:
            self.holds.add(job_id)
        self.jobs.setdefault(job_id, {}).update(fields)
        self.queue.append(job_id)
        return 1

    def claim(self, job_id: str, token: str, now: str) -> int:
        if self.lease is not None:
            return 0
        if not self.queue or self.queue[0] != job_id:
            return 0
        job = self.jobs.get(job_id)
        if job is None or job.get("state") not in ("queued", "running"):
            self.queue.pop(0)
            self.holds.discard(job_id)
            return -1
        if job.get("cancel") == "1":
            self.queue.pop(0)
            self.holds.discard(job_id)
            job.update(state="cancelled", finished_at=now)
            return -1
        self.lease = token
        job.update(state="running", owner=token, heartbeat_at=now)
        job.setdefault("started_at", now)
        job["attempts"] = str(int(job.get("attempts", "0")) + 1)
        return 1

    def renew(self, job_id: str, token: str, now: str, done: int, total: int) -> int:
        if self.lease != token:
            return 0
        job = self.jobs.setdefault(job_id, {})
        job.update(heartbeat_at=now, done=str(done), total=str(total))
        return 2 if job.get("cancel") == "1" else 1

    def finish(
        self,
        job_id: str,
        token: str,
        now: str,
        state: str,
        result: str,
        error: str,
        progress: tuple[int, int],
    ) -> int:
        if self.lease != token:
            return 0
        if job_id in self.queue:
            self.queue.remove(job_id)
        job = self.jobs.setdefault(job_id, {})
        job.update(state=state, finished_at=now, done=str(progress[0]), total=str(progress[1]))
        if result:
            job["result"] = result
        if error:
            job["error"] = error
        self.lease = None
        self.holds.discard(job_id)
        return 1

    def cancel(self, job_id: str, now: str) -> int:
        job = self.jobs.get(job_id)
        if job is None or "state" not in job:
            return -1
        if job["state"] == "queued":
            if job_id in self.queue:
                self.queue.remove(job_id)
            job.update(state="cancelled", cancel="1", finished_at=now)
            self.holds.discard(job_id)
            return 1
        if job["state"] == "running":
            job["cancel"] = "1"
            return 2
        return 0
