"""The projects' Redis access: their settings (meta) and the set of project names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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

    # --- the spend ranking (the /metrics cap on projects shown: service/spend_metrics) ----

    async def project_count(self) -> int:
        return int(await self.client.scard(Keys.projects()))

    async def known_projects(self, projects: Sequence[str]) -> list[str]:
        """Those of `projects` that exist (are in the set of project names), in one command."""
        if not projects:
            return []
        flags = await self.client.smismember(Keys.projects(), list(projects))
        return [p for p, known in zip(projects, flags, strict=True) if known]

    async def top_spenders(self, count: int) -> list[tuple[str, float]]:
        """The `count` projects ranked highest by spend to date (the ranking's float), highest
        first, in one command."""
        raw: list[Any] = await self.client.zrevrange(
            Keys.spend_rank(), 0, count - 1, withscores=True
        )
        return [(as_text(name), float(score)) for name, score in raw]

    async def spend_ranks(self, projects: Sequence[str]) -> list[float]:
        """The ranking's float of each of `projects` (0 for one never folded), in one command."""
        if not projects:
            return []
        scores = await self.client.zmscore(Keys.spend_rank(), list(projects))
        return [float(s) if s is not None else 0.0 for s in scores]

    async def spend_rank_seeded(self) -> bool:
        return bool(await self.client.exists(Keys.spend_rank_seeded()))

    async def seed_spend_rank(self, costs: dict[str, int]) -> None:
        """Raise each project's ranking to its spend to date `costs` (nano) where it is lower
        (ZADD GT: a fold's ZINCRBY since the totals were read is kept), and mark it seeded."""
        if costs:
            ranks = {project: float(cost) for project, cost in costs.items()}
            await self.client.zadd(Keys.spend_rank(), ranks, gt=True)
        await self.client.set(Keys.spend_rank_seeded(), "1")
