"""The jobs' Redis access: each job's hash, the project's queue and lease, the set of
projects with work (service/storage/scripts/jobs.lua changes a job's state), and an export
job's file (a list of compressed chunks)."""

from __future__ import annotations

from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text
from .model import HOLD_MS

# Jobs a listing shows at most (newest first).
LIST_LIMIT = 100


class JobStore:
    """A job is a hash of text fields; its state changes go through one script."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client
        self._jobs = conn.client.register_script(scripts.JOBS)

    async def add(
        self,
        project: str,
        job_id: str,
        fields: dict[str, str],
        now_ms: int,
        keep_ms: int,
        hold_ms: int = 0,
        *,
        exclusive: bool = False,
    ) -> bool:
        """Store a queued job at the end of the project's queue (the index forgets the ids
        created more than `keep_ms` ago); with `hold_ms`, the job holds the project's budget
        alert decisions until it ends (or the hold, not renewed, expires). An `exclusive`
        job is refused (False, nothing written) while the project's last exclusive job is
        queued or running."""
        pairs = [x for item in fields.items() for x in item]
        flag = "1" if exclusive else "0"
        if not await self._change(project, job_id, "add", now_ms, keep_ms, hold_ms, flag, *pairs):
            return False
        # After the push: a worker that forgets the project re-checks its queue afterwards.
        await self.client.sadd(Keys.job_projects(), project)
        return True

    async def last_exclusive(self, project: str) -> str | None:
        """The id of the project's last exclusive job (what refused an `add`)."""
        raw = await self.client.get(Keys.job_exclusive(project))
        return None if raw is None else as_text(raw)

    async def job(self, project: str, job_id: str) -> dict[str, str] | None:
        raw = await self.client.hgetall(Keys.job(project, job_id))
        return {as_text(k): as_text(v) for k, v in raw.items()} or None

    async def recent(self, project: str) -> list[dict[str, str]]:
        ids = await self.client.zrevrange(Keys.jobs(project), 0, LIST_LIMIT - 1)
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(Keys.job(project, as_text(job_id)))
        out = []
        for raw in await pipe.execute():
            if raw:
                out.append({as_text(k): as_text(v) for k, v in raw.items()})
        return out

    async def projects_with_work(self) -> list[str]:
        return sorted(as_text(p) for p in await self.client.smembers(Keys.job_projects()))

    async def queue_head(self, project: str) -> str | None:
        head = await self.client.lindex(Keys.job_queue(project), 0)
        return None if head is None else as_text(head)

    async def forget_if_idle(self, project: str) -> None:
        """Drop the project from the set of projects with work, unless its queue filled
        meanwhile (`add` pushes before it adds the project: either order is caught)."""
        await self.client.srem(Keys.job_projects(), project)
        if await self.client.llen(Keys.job_queue(project)):
            await self.client.sadd(Keys.job_projects(), project)

    async def hold(self, project: str, job_id: str, hold_ms: int) -> None:
        """Hold the project's budget alert decisions for job `job_id`, about to be added."""
        await self._change(project, job_id, "hold", hold_ms)

    async def release(self, project: str, job_id: str) -> None:
        """Drop the hold of a job that was not added after all."""
        await self._change(project, job_id, "release")

    async def held(self, project: str) -> bool:
        """Whether a job holds the project's budget alert decisions."""
        return bool(await self.client.exists(Keys.budget_hold(project)))

    async def keep_holds(self, projects: list[str], hold_ms: int) -> None:
        """Renew the holds of projects whose jobs are queued (a job waiting its turn behind
        other projects' keeps its hold while workers are alive)."""
        if projects:
            pipe = self.client.pipeline(transaction=False)
            for project in projects:
                pipe.pexpire(Keys.budget_hold(project), hold_ms)
            await pipe.execute()

    async def claim(
        self,
        project: str,
        job_id: str,
        token: str,
        lease_ms: int,
        now: str,
        keep_ms: int,
        *,
        hold_ms: int = HOLD_MS,
    ) -> int:
        """Take the project's lease for its queue head `job_id`, renewing its hold if it has
        one (jobs.lua `claim`)."""
        return await self._change(project, job_id, "claim", token, lease_ms, now, keep_ms, hold_ms)

    async def renew(
        self,
        project: str,
        job_id: str,
        token: str,
        lease_ms: int,
        now: str,
        done: int,
        total: int,
        *,
        hold_ms: int = HOLD_MS,
    ) -> int:
        """Renew the lease (and the job's hold) and report progress (jobs.lua `renew`)."""
        return await self._change(
            project, job_id, "renew", token, lease_ms, now, done, total, hold_ms
        )

    async def finish(
        self,
        project: str,
        job_id: str,
        token: str,
        now: str,
        ending: tuple[str, str, str],
        progress: tuple[int, int],
        keep_ms: int,
    ) -> int:
        """End the job: `ending` is (state, result JSON or "", error or "") (jobs.lua
        `finish`)."""
        state, result, error = ending
        return await self._change(
            project, job_id, "finish", token, now, state, result, error, *progress, keep_ms
        )

    async def cancel(self, project: str, job_id: str, now: str, keep_ms: int) -> int:
        """Cancel a queued job, or ask a running one to stop (jobs.lua `cancel`)."""
        return await self._change(project, job_id, "cancel", now, keep_ms)

    async def _change(self, project: str, job_id: str, op: str, *args: str | int) -> int:
        keys = [
            Keys.job_lease(project),
            Keys.job_queue(project),
            Keys.job(project, job_id),
            Keys.jobs(project),
            Keys.budget_hold(project),
            Keys.job_exclusive(project),
        ]
        return int(await self.conn.run_script(self._jobs, keys, [op, job_id, *args]))

    async def end_lease(self, project: str) -> None:
        """Drop the project's lease whoever holds it: what its expiry does (tests)."""
        await self.client.delete(Keys.job_lease(project))

    # An export job's file: a list of compressed chunks, each attempt its own key.

    async def append_chunk(
        self, project: str, job_id: str, attempt: str, chunk: bytes, keep_ms: int
    ) -> None:
        """Add a chunk at the end of the attempt's file (which expires `keep_ms` after its
        last chunk: an attempt whose worker died leaves nothing behind for long)."""
        key = Keys.job_file(project, job_id, attempt)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, chunk)
        pipe.pexpire(key, keep_ms)
        await pipe.execute()

    async def publish_file(self, project: str, job_id: str, attempt: str, keep_ms: int) -> None:
        """The attempt's complete file becomes the job's (replacing any earlier attempt's:
        every attempt writes the same file), kept `keep_ms`."""
        final = Keys.job_file(project, job_id)
        source = Keys.job_file(project, job_id, attempt)
        if not await self.client.exists(source):  # an empty file has no chunk: none to move
            await self.client.delete(final)
            return
        await self.client.rename(source, final)
        await self.client.pexpire(final, keep_ms)

    async def drop_file(self, project: str, job_id: str, attempt: str = "") -> None:
        await self.client.delete(Keys.job_file(project, job_id, attempt))

    async def file_chunks(self, project: str, job_id: str) -> int:
        """How many chunks the job's file holds (0: none, or expired)."""
        return int(await self.client.llen(Keys.job_file(project, job_id)))

    async def file_chunk(self, project: str, job_id: str, index: int) -> bytes | None:
        raw = await self.client.lindex(Keys.job_file(project, job_id), index)
        return None if raw is None else as_bytes(raw)
