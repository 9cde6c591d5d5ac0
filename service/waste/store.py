"""The waste report's Redis access: each experiment's progress points."""

from __future__ import annotations

from ..projects.store import ProjectStore
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text


class WasteStore:
    """Experiment progress points (a bounded JSON list per experiment)."""

    def __init__(self, conn: Connection, projects: ProjectStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.projects = projects
        self._append_progress = conn.client.register_script(scripts.APPEND_PROGRESS)

    async def add_experiment_progress(
        self, project: str, experiment: str, point_json: bytes, keep: int = 500
    ) -> None:
        """Append a progress point to the experiment's list, keeping the newest `keep`."""
        await self.conn.run_script(
            self._append_progress,
            [Keys.experiment_progress(project)],
            [experiment, point_json, keep],
        )
        await self.projects.add_project(project)

    async def experiment_progress(self, project: str) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.experiment_progress(project))
        return {as_text(k): as_bytes(v) for k, v in raw.items()}
