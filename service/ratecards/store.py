"""The rate cards' Redis access: every version of every card, and the cards' names."""

from __future__ import annotations

import time

from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text

# How long a worker trusts a rate card's revision it read (`RateCardStore.rate_card_revision`).
CARD_REVISION_SECONDS = 1.0


class RateCardStore:
    """Rate cards: versions are numbered and never deleted (a card's revision is its count)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client
        self._put_card = conn.client.register_script(scripts.PUT_RATE_CARD)
        # Rate card name -> (read at, revision), for `rate_card_revision(max_age=...)`.
        self._card_revisions: dict[str, tuple[float, int]] = {}

    async def put_rate_card_version(self, name: str, version_json: bytes) -> int:
        version = await self.conn.run_script(self._put_card, [Keys.rate_card(name)], [version_json])
        self._card_revisions.pop(name, None)  # this worker applies it at once
        await self.client.sadd(Keys.rate_card_names(), name)
        return int(version)

    async def rate_card_versions(self, name: str) -> list[tuple[int, bytes]]:
        """Every stored version as (version number, JSON), oldest number first."""
        raw = await self.conn.read_global("HGETALL", Keys.rate_card(name))
        return sorted((int(k), as_bytes(v)) for k, v in raw.items())

    async def rate_card_revision(self, name: str, max_age: float = 0.0) -> int:
        """The number of versions (0: no such card); it changes with every new version.
        With `max_age`, a revision this worker read less than `max_age` seconds ago."""
        now = time.monotonic()
        if max_age > 0:
            hit = self._card_revisions.get(name)
            if hit is not None and now - hit[0] < max_age:
                return hit[1]
        revision = int(await self.conn.read_global("HLEN", Keys.rate_card(name)))
        if len(self._card_revisions) > 1000:
            self._card_revisions.clear()
        self._card_revisions[name] = (now, revision)
        return revision

    async def rate_card_names(self) -> list[str]:
        names = await self.client.smembers(Keys.rate_card_names())
        return sorted(as_text(n) for n in names)
