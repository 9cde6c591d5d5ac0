"""The bills' Redis access: imports (staged under their id, committed by one HSETNX of the
content hash), their rows per day, the staging sweep, and the per-project mappings.

Every key has the hash tag `{bills}` (one cluster slot): an import is invisible until the
commit names it, so a failed or interrupted import leaves nothing a report reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text


class BillStore:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client

    async def committed(self) -> list[bytes]:
        """The JSON record of every committed import."""
        return [as_bytes(v) for v in await self.client.hvals(Keys.bill_imports())]

    async def committed_as(self, digest: str) -> bytes | None:
        raw = await self.client.hget(Keys.bill_imports(), digest)
        return None if raw is None else as_bytes(raw)

    async def begin(self, import_id: str, now_ms: int) -> None:
        await self.client.zadd(Keys.bill_staging(), {import_id: now_ms})

    async def add_rows(self, import_id: str, days: dict[str, dict[str, int]], now_ms: int) -> int:
        """Add sums to the import's rows, per day (yyyymmdd -> field -> amount), in one
        pipeline, and mark the import alive at `now_ms` (a long import is not swept while it
        still writes); answers the sums sent."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(Keys.bill_staging(), {import_id: now_ms})
        sent = 0
        pipe.sadd(Keys.bill_staged_days(import_id), *days)
        for day, fields in days.items():
            key = Keys.bill_rows(import_id, day)
            for name, amount in fields.items():
                pipe.hincrby(key, name, amount)
                sent += 1
        await pipe.execute()
        return sent

    async def commit(self, digest: str, import_id: str, record: bytes) -> bool:
        """Make the import visible (one HSETNX: atomic); False when the same content was
        committed first (the caller discards its copy)."""
        done = bool(await self.client.hsetnx(Keys.bill_imports(), digest, record))
        if done:
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(Keys.bill_staging(), import_id)
            pipe.delete(Keys.bill_staged_days(import_id))
            await pipe.execute()
        return done

    async def discard(self, import_id: str) -> None:
        """Delete an uncommitted import's rows."""
        days = await self.client.smembers(Keys.bill_staged_days(import_id))
        keys = [Keys.bill_rows(import_id, as_text(d)) for d in days]
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
        pipe.delete(Keys.bill_staged_days(import_id))
        pipe.zrem(Keys.bill_staging(), import_id)
        await pipe.execute()

    async def stale_imports(self, started_before_ms: int) -> list[str]:
        ids = await self.client.zrangebyscore(Keys.bill_staging(), "-inf", started_before_ms)
        return [as_text(i) for i in ids]

    async def day_rows(self, reads: Sequence[tuple[str, str]]) -> list[dict[bytes, bytes]]:
        """The rows hash of each (import id, yyyymmdd), in one pipeline."""
        if not reads:
            return []
        pipe = self.client.pipeline(transaction=False)
        for import_id, day in reads:
            pipe.hgetall(Keys.bill_rows(import_id, day))
        return list(await pipe.execute())

    async def mappings(self) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.bill_mappings())
        return {as_text(k): as_bytes(v) for k, v in raw.items()}

    async def mapping(self, project: str) -> bytes | None:
        raw = await self.client.hget(Keys.bill_mappings(), project)
        return None if raw is None else as_bytes(raw)

    async def put_mapping(self, project: str, mapping: bytes) -> None:
        await self.client.hset(Keys.bill_mappings(), project, mapping)
