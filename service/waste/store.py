"""The waste report's Redis access: each experiment's progress points, and the waste cells
and facts the fold keeps (service/ledger/wastecells.py)."""

from __future__ import annotations

from collections.abc import Sequence

from ..projects.store import ProjectStore
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.limbs import combined_fields
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

    async def cells_state(self, project: str) -> bool:
        """Whether the waste cells and facts cover every folded entry (meta ``wastecells``)."""
        return as_text(await self.client.hget(Keys.meta(project), "wastecells") or b"") == "1"

    async def cells(self, project: str, days: Sequence[str]) -> list[dict[bytes, bytes]]:
        """The waste cells of each day (service/ledger/wastecells.py), high limbs folded in."""
        pipe = self.client.pipeline(transaction=False)
        for day in days:
            key = Keys.waste_cells(project, day)
            pipe.hgetall(key)
            pipe.hgetall(Keys.high(key))
        replies = await pipe.execute()
        return [
            combined_fields(replies[i], replies[i + 1]) if replies[i + 1] else replies[i]
            for i in range(0, len(replies), 2)
        ]

    async def facts(self, project: str) -> dict[bytes, bytes]:
        """The waste rules' facts of the whole log (service/ledger/wastecells.py)."""
        raw = await self.client.hgetall(Keys.waste_facts(project))
        return {as_bytes(k): as_bytes(v) for k, v in raw.items()}

    async def experiment_progress(self, project: str) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.experiment_progress(project))
        return {as_text(k): as_bytes(v) for k, v in raw.items()}
