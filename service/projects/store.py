"""The projects' Redis access: their settings (meta) and the set of project names."""

from __future__ import annotations

from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_text, str_mapping


class ProjectStore:
    """A project's settings and counters (meta hash) and the names of every project."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client

    async def project_meta(self, project: str) -> dict[str, str]:
        raw = await self.client.hgetall(Keys.meta(project))
        return {as_text(k): as_text(v) for k, v in raw.items()}

    async def set_project_fields(self, project: str, fields: dict[str, str]) -> None:
        await self.client.hset(Keys.meta(project), mapping=str_mapping(fields))
        await self.client.sadd(Keys.projects(), project)

    async def add_project(self, project: str) -> None:
        await self.client.sadd(Keys.projects(), project)

    async def projects(self) -> list[str]:
        names = await self.client.smembers(Keys.projects())
        return sorted(as_text(n) for n in names)
