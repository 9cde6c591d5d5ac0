"""The dead letters' Redis access: rejected events, kept by rejection time, oldest dropped."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, cast

from ..projects.store import ProjectStore
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text


class RejectedStore:
    """Rejected events (JSON records) and their index by rejection time."""

    def __init__(self, conn: Connection, projects: ProjectStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.projects = projects
        # put_rejected.lua stores them and trims the oldest.
        self._put_rejected = conn.client.register_script(scripts.PUT_REJECTED)

    async def put_rejected(
        self, project: str, records: Sequence[tuple[str, bytes, int]], limit: int = 10_000
    ) -> int:
        """Store rejected events: (event id, JSON record, rejection time in ms), keeping at most
        `limit` of the project's (the oldest dropped). Returns how many were dropped, the
        records beyond the limit in `records` itself included (the newest are the last)."""
        if not records:
            return 0
        limit = max(limit, 1)
        dropped = max(len(records) - limit, 0)
        kept = records[dropped:]
        script = self._put_rejected
        keys = [Keys.rejected(project), Keys.rejected_index(project)]
        for start in range(0, len(kept), 500):
            args: list[str | bytes | int] = [limit]
            for event_id, record, when_ms in kept[start : start + 500]:
                args += [event_id, record, when_ms]
            dropped += int(await self.conn.run_script(script, keys, args))
        await self.projects.add_project(project)
        return dropped

    async def rejected_page(self, project: str, offset: int, limit: int) -> tuple[list[bytes], int]:
        total = int(await self.client.zcard(Keys.rejected_index(project)))
        ids = await self.client.zrange(Keys.rejected_index(project), offset, offset + limit - 1)
        if not ids:
            return [], total
        records = await self.client.hmget(Keys.rejected(project), [as_bytes(i) for i in ids])
        return [as_bytes(r) for r in records if r is not None], total

    async def rejected_listing(
        self, project: str, offset: int, limit: int, after: tuple[int, str] | None = None
    ) -> tuple[list[bytes], int, int, tuple[int, str] | None]:
        """A page of dead letters, oldest first: from `offset`, or just after the entry
        `after` (rejection time in ms, id), which holds its place when older ones are dropped
        meanwhile (gone itself, the page starts where it was). Returns (records, total, the
        page's position, the (time, id) cursor of its last entry)."""
        index = Keys.rejected_index(project)
        if after is not None:
            when_ms, event_id = after
            older = int(await self.client.zcount(index, "-inf", f"({when_ms}"))
            same = [as_text(i) for i in await self.client.zrangebyscore(index, when_ms, when_ms)]
            offset = older + bisect.bisect_right(same, event_id)
        total = int(await self.client.zcard(index))
        entries = cast(
            list[tuple[Any, float]],
            await self.client.zrange(index, offset, offset + limit - 1, withscores=True),
        )
        if not entries:
            return [], total, offset, None
        ids = [as_bytes(i) for i, _ in entries]
        records = await self.client.hmget(Keys.rejected(project), ids)
        last = entries[-1]
        cursor = (int(last[1]), as_text(last[0]))
        return [as_bytes(r) for r in records if r is not None], total, offset, cursor

    async def rejected_records(self, project: str, ids: Sequence[str]) -> list[bytes | None]:
        if not ids:
            return []
        return cast(
            list[bytes | None],
            await self.client.hmget(Keys.rejected(project), list(ids)),
        )

    async def delete_rejected(self, project: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(Keys.rejected(project), *ids)
        pipe.zrem(Keys.rejected_index(project), *ids)
        removed, _ = await pipe.execute()
        return int(removed)
