"""The evaluations' Redis access: results by id, and the project's evaluation settings."""

from __future__ import annotations

from collections.abc import Sequence

from ..projects.store import ProjectStore
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text


class EvaluationStore:
    """Results (a hash: id -> JSON, each written once) and settings (one JSON string)."""

    def __init__(self, conn: Connection, projects: ProjectStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.projects = projects
        self._fire_regressions = conn.client.register_script(scripts.FIRE_REGRESSIONS)

    async def add_results(self, project: str, results: list[tuple[str, bytes]]) -> list[bool]:
        """Store each (id, JSON) unless its id is stored: whether each one was new. HSETNX
        per id, so a batch sent again (or two senders at once) stores every id once."""
        key = Keys.evaluations(project)
        pipe = self.client.pipeline(transaction=False)
        for result_id, body in results:
            pipe.hsetnx(key, result_id, body)
        added = [bool(n) for n in await pipe.execute()]
        if any(added):
            await self.projects.add_project(project)
        return added

    async def results(self, project: str) -> list[bytes]:
        raw = await self.client.hgetall(Keys.evaluations(project))
        return [as_bytes(v) for _, v in sorted(raw.items())]

    async def fire_regressions(
        self, project: str, candidates: Sequence[tuple[str, bytes]]
    ) -> list[str]:
        """Fire each (alert id, record JSON) not fired yet: recorded in the fired hash and
        appended to the alerts stream in one script (`fire_regressions.lua`). The ids fired."""
        if not candidates:
            return []
        args = [x for alert_id, record in candidates for x in (alert_id, record)]
        keys = [Keys.evaluation_fired(project), Keys.alerts(project)]
        fired = await self._fire_regressions(keys=keys, args=args)
        return [as_text(a) for a in fired or []]

    async def regressions_fired(self, project: str, alert_ids: Sequence[str]) -> set[str]:
        """Which of these regression alert ids have fired (a read: firing is the script's)."""
        if not alert_ids:
            return set()
        held = await self.client.hmget(Keys.evaluation_fired(project), list(alert_ids))
        return {a for a, v in zip(alert_ids, held, strict=True) if v is not None}

    async def fired_regressions(self, project: str) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.evaluation_fired(project))
        return {as_text(k): as_bytes(v) for k, v in raw.items()}

    async def settings(self, project: str) -> bytes | None:
        raw = await self.client.get(Keys.evaluation_settings(project))
        return as_bytes(raw) if raw is not None else None

    async def put_settings(self, project: str, body: bytes) -> None:
        await self.client.set(Keys.evaluation_settings(project), body)
        await self.projects.add_project(project)
