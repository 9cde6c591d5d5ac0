"""The bearer tokens' Redis access: token records, their index, and the rate-limit windows."""

from __future__ import annotations

from typing import Any

from ..errors import Conflict
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_text, str_mapping


class LastUnscopedAdmin(Conflict):
    """Revoking this token would leave no admin token for every project."""

    kind = "last-admin"

    def __init__(self, token_id: str) -> None:
        super().__init__(token_id)
        self.token_id = token_id

    def problem_detail(self) -> str:
        return (
            f"token {self.token_id!r} is the last admin token for every project; mint another "
            "before revoking it"
        )

    def problem_members(self) -> dict[str, Any]:
        return {"field": "token_id"}


def _unscoped_admin(record: dict[str, str]) -> bool:
    return record.get("role") == "admin" and record.get("projects") == "*"


class TokenStore:
    """Token records (by digest: the token itself is never stored) and per-second counters."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client
        self._rate_window = conn.client.register_script(scripts.RATE_WINDOW)
        self._revoke_token = conn.client.register_script(scripts.REVOKE_TOKEN)

    async def put_token(self, digest: str, token_id: str, record: dict[str, str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(Keys.token(digest), mapping=str_mapping(record))
        pipe.hset(Keys.token_index(), token_id, digest)
        if _unscoped_admin(record):
            pipe.sadd(Keys.unscoped_admins(), token_id)
        await pipe.execute()

    async def token_record(self, digest: str) -> dict[str, str] | None:
        raw = await self.conn.read_global("HGETALL", Keys.token(digest))
        return {as_text(k): as_text(v) for k, v in raw.items()} if raw else None

    async def token_records(self) -> list[dict[str, str]]:
        index = await self.client.hgetall(Keys.token_index())
        records = []
        for digest in index.values():
            record = await self.token_record(as_text(digest))
            if record:
                records.append(record)
        return records

    async def revoke_token(self, token_id: str) -> bool:
        """Revoke a token (False: no such token). Raises `LastUnscopedAdmin` rather than revoke
        the last admin token for every project: nobody could manage tokens afterwards."""
        # The script counts only ids still in the index, so one revoked meanwhile does not count.
        digest = await self.conn.run_script(
            self._revoke_token, [Keys.token_index(), Keys.unscoped_admins()], [token_id]
        )
        if digest is None:
            return False
        if digest == 0:
            raise LastUnscopedAdmin(token_id)
        await self.client.delete(Keys.token(as_text(digest)))
        return True

    async def count_request(self, token_id: str, second: int, count: int = 1) -> int:
        """Requests of this token so far in this (epoch) second, these `count` included.
        On a cluster, one try at the window's master (its node down: NODE_DOWN_ERRORS at
        once, and the rate limiter fails open; service/http/ratelimit.py): `run_script`."""
        key = Keys.rate_window(token_id, second)
        return int(await self.conn.run_script(self._rate_window, [key], [count]))
