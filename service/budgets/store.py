"""The budgets' Redis access: budgets, their spend counters, the alerts they fired."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..projects.store import ProjectStore
from ..storage import scripts
from ..storage.connection import Connection
from ..storage.keys import Keys
from ..storage.limbs import LIMB, split_value
from ..storage.replies import as_bytes, as_text, with_high


class BudgetStore:
    """Budgets (JSON), their per-period and per-day spend (two limbs), and the alert stream."""

    def __init__(self, conn: Connection, projects: ProjectStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.projects = projects
        self._init_budget = conn.client.register_script(scripts.INIT_BUDGET)

    async def put_budget(self, project: str, budget_id: str, budget_json: bytes) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(Keys.budgets(project), budget_id, budget_json)
        pipe.hincrby(Keys.meta(project), "budgets_rev", 1)
        await pipe.execute()
        await self.projects.add_project(project)

    async def delete_budget(self, project: str, budget_id: str) -> bool:
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(Keys.budgets(project), budget_id)
        pipe.hincrby(Keys.meta(project), "budgets_rev", 1)
        removed, _ = await pipe.execute()
        return bool(removed)

    async def budgets(self, project: str) -> list[bytes]:
        raw = await self.client.hgetall(Keys.budgets(project))
        return [as_bytes(v) for _, v in sorted(raw.items())]

    async def budget_counters(
        self, project: str, spend_fields: Sequence[str], day_fields: Sequence[str]
    ) -> tuple[list[int], list[int]]:
        pipe = self.client.pipeline(transaction=False)
        for key, fields in (
            (Keys.budget_spend(project), spend_fields),
            (Keys.budget_daily(project), day_fields),
        ):
            if fields:
                pipe.hmget(key, list(fields))
                pipe.hmget(Keys.high(key), list(fields))
        replies = await pipe.execute()
        out: list[list[int]] = []
        for fields in (spend_fields, day_fields):
            if fields:
                low, high = replies.pop(0), replies.pop(0)
                out.append([int(v or 0) for v in with_high(low, high)])
            else:
                out.append([])
        return out[0], out[1]

    async def many_budgets(self, projects: Sequence[str]) -> list[list[bytes]]:
        """`budgets` of many projects, in one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        for project in projects:
            pipe.hgetall(Keys.budgets(project))
        return [[as_bytes(v) for _, v in sorted(raw.items())] for raw in await pipe.execute()]

    async def many_spends(self, reads: Sequence[tuple[str, Sequence[str]]]) -> list[list[int]]:
        """The per-period spend counters (`spend_fields` of `budget_counters`) of many
        (project, fields), in one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        for project, fields in reads:
            key = Keys.budget_spend(project)
            pipe.hmget(key, list(fields))
            pipe.hmget(Keys.high(key), list(fields))
        replies = await pipe.execute()
        return [
            [int(v or 0) for v in with_high(replies[i], replies[i + 1])]
            for i in range(0, len(replies), 2)
        ]

    async def spend_counters(self, project: str) -> dict[str, int]:
        """Every per-period spend counter of the project (``<budget>|<period>`` -> nano)."""
        key = Keys.budget_spend(project)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(key)
        pipe.hgetall(Keys.high(key))
        low, high = await pipe.execute()
        out = {as_text(k): int(v) for k, v in low.items()}
        for k, v in high.items():
            field = as_text(k)
            out[field] = int(v) * LIMB + out.get(field, 0)
        return out

    async def fired_alerts(self, project: str) -> dict[str, int]:
        raw = await self.client.hgetall(Keys.budget_fired(project))
        return {as_text(k): int(v) for k, v in raw.items()}

    async def fire_reached(
        self, project: str, last_seen_entry: str, checks: Sequence[tuple[int, int, str, bytes]]
    ) -> bool:
        """Fire once each (spend, limit, alert id, alert JSON) whose spend reached its limit and
        that has not fired, unless a batch was logged after `last_seen_entry` (False: nothing
        written). The counters are left as they are (`INIT_BUDGET` with no counters to set)."""
        payload = msgspec.msgpack.encode(
            [
                [],
                [],
                [
                    [str(spent), str(limit), ident, body.decode()]
                    for spent, limit, ident, body in checks
                ],
            ]
        )
        keys = [
            Keys.log(project),
            Keys.budget_spend(project),
            Keys.budget_daily(project),
            Keys.budget_fired(project),
            Keys.alerts(project),
            Keys.high(Keys.budget_spend(project)),
            Keys.high(Keys.budget_daily(project)),
        ]
        return bool(await self.conn.run_script(self._init_budget, keys, [last_seen_entry, payload]))

    async def init_budget_counters(
        self,
        project: str,
        last_seen_entry: str,
        spend: dict[str, int],
        days: dict[str, int],
        checks: Sequence[tuple[str, int, str, bytes]],
    ) -> bool:
        """Set a new budget's counters and fire the thresholds already reached, unless a
        repricing holds the project's alerts (init_budget.lua)."""

        def triples(values: dict[str, int]) -> list[str]:
            return [x for f, v in values.items() for x in (f, *map(str, split_value(v)))]

        payload = msgspec.msgpack.encode(
            [
                triples(spend),
                triples(days),
                [
                    [str(spend.get(f, 0)), str(limit), alert_id, body.decode()]
                    for f, limit, alert_id, body in checks
                ],
            ]
        )
        keys = [
            Keys.log(project),
            Keys.budget_spend(project),
            Keys.budget_daily(project),
            Keys.budget_fired(project),
            Keys.alerts(project),
            Keys.high(Keys.budget_spend(project)),
            Keys.high(Keys.budget_daily(project)),
            Keys.budget_hold(project),
        ]
        return bool(await self.conn.run_script(self._init_budget, keys, [last_seen_entry, payload]))

    async def alerts(
        self, project: str, start: str = "-", end: str = "+", count: int = 100
    ) -> list[tuple[str, dict[str, bytes]]]:
        raw = await self.client.xrange(Keys.alerts(project), min=start, max=end, count=count)
        return [
            (as_text(entry_id), {as_text(k): as_bytes(v) for k, v in (fields or {}).items()})
            for entry_id, fields in raw or []
        ]
