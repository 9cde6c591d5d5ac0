"""The plans' Redis access: plans and their stages' progress reports."""

from __future__ import annotations

from typing import Any, cast

from ..projects.store import ProjectStore
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text


class PlanStore:
    """Plans (JSON: the plan, its estimate, its budgets) and progress per stage."""

    def __init__(self, conn: Connection, projects: ProjectStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.projects = projects

    async def put_plan(self, project: str, plan_id: str, plan_json: bytes) -> None:
        await self.client.hset(Keys.plans(project), plan_id, plan_json)
        await self.projects.add_project(project)

    async def plan(self, project: str, plan_id: str) -> bytes | None:
        raw = await self.client.hget(Keys.plans(project), plan_id)
        return as_bytes(raw) if raw is not None else None

    async def plans(self, project: str) -> list[bytes]:
        raw = await self.client.hgetall(Keys.plans(project))
        return [as_bytes(v) for _, v in sorted(raw.items())]

    async def put_progress(self, project: str, fields: dict[str, bytes]) -> None:
        await self.client.hset(Keys.progress(project), mapping=cast(Any, fields))

    async def progress(self, project: str, plan_id: str) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.progress(project))
        prefix = plan_id + "|"
        return {as_text(k): as_bytes(v) for k, v in raw.items() if as_text(k).startswith(prefix)}
