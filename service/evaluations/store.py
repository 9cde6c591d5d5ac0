"""The evaluations' Redis access: results by id, and the project's evaluation settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..projects.store import ProjectStore
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text
from .capacity import (
    AUDIT_KEPT,
    DEFAULT_MAX_RESULTS,
    ResultsLimitReached,
    StoreAnswer,
    experiment_member,
    experiment_range,
    index_entries,
    member_id,
)


def _wrote(reply: Any) -> bool:
    """Whether add_evaluations.lua wrote anything (then a replica must have it)."""
    return StoreAnswer(int(reply[0])) == StoreAnswer.STORED and any(int(n) for n in reply[1:])


class EvaluationStore:
    """Results (a hash: id -> JSON, each written once, at most a limit of them per project),
    their two indexes in listing order (service/evaluations/capacity.py), and the settings
    (one JSON string)."""

    def __init__(self, conn: Connection, projects: ProjectStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.projects = projects
        self._fire_regressions = conn.client.register_script(scripts.FIRE_REGRESSIONS)
        self._add = conn.client.register_script(scripts.ADD_EVALUATIONS)
        self._replace = conn.client.register_script(scripts.REPLACE_EVALUATION)

    def _keys(self, project: str) -> list[str]:
        return [
            Keys.evaluations(project),
            Keys.evaluation_index(project),
            Keys.evaluation_experiment_index(project),
        ]

    async def add_results(
        self, project: str, results: list[tuple[str, bytes]], limit: int = DEFAULT_MAX_RESULTS
    ) -> list[bool]:
        """Store each (id, JSON) unless its id is stored: whether each one was new. One script
        (add_evaluations.lua) for the batch, so a batch sent again (or two senders at once)
        stores every id once, and the project never holds more than `limit` results: a batch
        whose new results would pass it raises `ResultsLimitReached`, nothing stored."""
        if not results:
            return []
        args: list[str | bytes | int] = [limit]
        for result_id, body in results:
            member, by_experiment = index_entries(body)
            args += [result_id, body, member, by_experiment]
        # As the ingest's writes: on a cluster, acknowledged once a replica has it (and the
        # script loaded on the node in the same pipeline, not through a NOSCRIPT retry).
        reply = await self.conn.replicated(self._add, self._keys(project), args, _wrote)
        if StoreAnswer(int(reply[0])) == StoreAnswer.OVER_LIMIT:
            raise ResultsLimitReached(limit, int(reply[1]), int(reply[2]))
        added = [bool(int(n)) for n in reply[1:]]
        if any(added):
            await self.projects.add_project(project)
        return added

    async def stored(self, project: str, result_ids: Sequence[str]) -> list[bytes | None]:
        """The stored JSON of each id (None: not stored)."""
        if not result_ids:
            return []
        held = await self.client.hmget(Keys.evaluations(project), list(result_ids))
        return [None if v is None else as_bytes(v) for v in held]

    async def replace_result(
        self, project: str, result_id: str, expected: bytes, new: bytes | None, audit: bytes
    ) -> bool:
        """Replace the stored result (delete it when `new` is None) if it is still `expected`,
        with its index members and the `audit` record, in one script
        (replace_evaluation.lua): whether it was done (False: it changed meanwhile)."""
        old_member, old_by_experiment = index_entries(expected)
        member, by_experiment = index_entries(new) if new is not None else ("", "")
        keys = [*self._keys(project), Keys.evaluation_audit(project)]
        args = [
            result_id,
            expected,
            old_member,
            old_by_experiment,
            new or b"",
            member,
            by_experiment,
            audit,
            AUDIT_KEPT,
        ]
        return bool(int(await self.conn.replicated(self._replace, keys, args)))

    async def audit(self, project: str, count: int) -> list[bytes]:
        """The newest `count` audit records, newest first."""
        entries = await self.client.xrevrange(Keys.evaluation_audit(project), count=count) or []
        return [as_bytes((fields or {})[b"record"]) for _, fields in entries]

    async def results(self, project: str) -> list[bytes]:
        """Every stored result (the reports' path: bounded by the project's limit)."""
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
        fired = await self.conn.run_script(self._fire_regressions, keys, args)
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

    async def result_page(
        self,
        project: str,
        experiment: str | None,
        offset: int,
        limit: int,
        after: str | None = None,
    ) -> tuple[list[bytes], int, int, str | None]:
        """A page of results in listing order (of one experiment, when named): from `offset`,
        or just after the index member `after` (a page's cursor: a member compares in order
        whether or not its result is still stored, so it keeps its place). Returns (results,
        total, the page's position, the index member of its last result)."""
        members, total, position, indexed = await self._read_page(
            project, experiment, offset, limit, after
        )
        if not indexed:  # results stored before the indexes were: index them, read again
            await self._index_all(project)
            members, total, position, _ = await self._read_page(
                project, experiment, offset, limit, after
            )
        if not members:
            return [], total, position, None
        records = await self.client.hmget(
            Keys.evaluations(project), [member_id(m) for m in members]
        )
        return [as_bytes(r) for r in records if r is not None], total, position, members[-1]

    async def _read_page(
        self, project: str, experiment: str | None, offset: int, limit: int, after: str | None
    ) -> tuple[list[str], int, int, bool]:
        """(index members, total, position, whether the index holds every stored result), read
        at one instant."""
        results, index, by_experiment = self._keys(project)
        key, low, high, prefix = index, "-", "+", ""
        if experiment is not None:
            key, prefix = by_experiment, experiment_member(experiment, "")
            low, high = experiment_range(experiment)
        pipe = self.client.pipeline(transaction=True)
        pipe.hlen(results)
        pipe.zcard(index)
        pipe.zlexcount(key, low, high)
        if after is not None:
            pipe.zlexcount(key, low, f"[{prefix}{after}")
            pipe.zrangebylex(key, f"({prefix}{after}", high, start=0, num=limit)
        else:
            pipe.zrangebylex(key, low, high, start=offset, num=limit)
        reply: list[Any] = await pipe.execute()
        total = int(reply[2])
        position = int(reply[3]) if after is not None else offset
        members = [as_text(m)[len(prefix) :] for m in reply[-1]]
        return members, total, position, int(reply[0]) == int(reply[1])

    async def _index_all(self, project: str) -> None:
        """Put every stored result in both indexes (idempotent: a member is its result's)."""
        _, index, by_experiment = self._keys(project)
        raw = await self.client.hgetall(Keys.evaluations(project))
        entries = [index_entries(as_bytes(v)) for v in raw.values()]
        for start in range(0, len(entries), 1000):
            chunk = entries[start : start + 1000]
            pipe = self.client.pipeline(transaction=True)
            pipe.zadd(index, dict.fromkeys((m for m, _ in chunk), 0))
            pipe.zadd(by_experiment, dict.fromkeys((x for _, x in chunk), 0))
            await pipe.execute()

    async def settings(self, project: str) -> bytes | None:
        raw = await self.client.get(Keys.evaluation_settings(project))
        return as_bytes(raw) if raw is not None else None

    async def put_settings(self, project: str, body: bytes) -> None:
        await self.client.set(Keys.evaluation_settings(project), body)
        await self.projects.add_project(project)
