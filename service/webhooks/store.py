"""The webhooks' Redis access: webhooks, the sealing check, and the delivery outbox."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from ..storage import scripts
from ..storage.connection import Connection, ServerError
from ..storage.keys import Keys
from ..storage.replies import as_bytes, as_text


class WebhookStore:
    """Webhooks (JSON, secrets sealed), the secret key's check value, and per project the
    deliveries: records, the due queue (a lease moves a score ahead), done and dead."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client
        self._dispatch_alert = conn.client.register_script(scripts.DISPATCH_ALERT)
        self._claim_deliveries = conn.client.register_script(scripts.CLAIM_DELIVERIES)
        self._settle_delivery = conn.client.register_script(scripts.SETTLE_DELIVERY)
        self._redeliver = conn.client.register_script(scripts.REDELIVER)
        self._replace_field = conn.client.register_script(scripts.REPLACE_FIELD)

    async def put_webhook(self, webhook_id: str, webhook_json: bytes) -> None:
        await self.client.hset(Keys.webhooks(), webhook_id, webhook_json)

    async def webhooks(self) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.webhooks())
        return {as_text(k): as_bytes(v) for k, v in sorted(raw.items())}

    async def delete_webhook(self, webhook_id: str) -> bool:
        return bool(await self.client.hdel(Keys.webhooks(), webhook_id))

    async def replace_webhook(self, webhook_id: str, old: bytes, new: bytes) -> bool:
        """Store `new` for the webhook if it is still stored as `old` (re-sealing)."""
        return bool(
            await self.conn.run_script(
                self._replace_field, [Keys.webhooks()], [webhook_id, old, new]
            )
        )

    async def sealing_check(self, candidate: str) -> bytes:
        """The stored check value of the secret key, storing `candidate` if there is none."""
        await self.client.hsetnx(Keys.sealing(), "check", candidate)
        return as_bytes(await self.client.hget(Keys.sealing(), "check"))

    async def replace_sealing_check(self, old: bytes, new: str) -> bool:
        return bool(
            await self.conn.run_script(self._replace_field, [Keys.sealing()], ["check", old, new])
        )

    async def alerts_to_dispatch(
        self, project: str, group: str, consumer: str, count: int, min_idle_ms: int
    ) -> list[tuple[str, dict[str, bytes] | None]]:
        """Alerts for the delivery dispatcher: first those another consumer read and left
        unacknowledged for `min_idle_ms` (it died), then new ones. Creates the consumer group
        (from the stream's start) the first time. Fields are None for an entry deleted while
        pending."""
        key = Keys.alerts(project)
        try:
            claimed = await self.client.xautoclaim(
                key, group, consumer, min_idle_ms, "0-0", count=count
            )
        except ServerError as exc:
            if "NOGROUP" not in str(exc):
                raise
            with contextlib.suppress(ServerError):  # BUSYGROUP: another worker made it
                await self.client.xgroup_create(key, group, id="0", mkstream=True)
            claimed = [b"0-0", [], []]
        entries: list[tuple[str, dict[str, bytes] | None]] = [
            (
                as_text(entry_id),
                {as_text(k): as_bytes(v) for k, v in fields.items()} if fields else None,
            )
            for entry_id, fields in (claimed[1] or [])
        ]
        entries += [
            (as_text(entry_id), None) for entry_id in (claimed[2] if len(claimed) > 2 else [])
        ]
        raw: Any = await self.client.xreadgroup(group, consumer, {key: ">"}, count=count)
        streams: Any = raw.items() if isinstance(raw, dict) else (raw or [])
        for _, items in streams:
            for entry_id, fields in items or []:
                entries.append(
                    (
                        as_text(entry_id),
                        {as_text(k): as_bytes(v) for k, v in fields.items()} if fields else None,
                    )
                )
        return entries

    async def dispatch_alert(
        self,
        project: str,
        group: str,
        entry_ids: Sequence[str],
        due_ms: int,
        deliveries: Sequence[tuple[str, bytes]],
    ) -> int:
        """Create the deliveries of alerts told in one message (those not yet there) and
        acknowledge the alerts' entries."""
        args: list[Any] = [group, due_ms, len(entry_ids), *entry_ids]
        for delivery_id, record in deliveries:
            args += [delivery_id, record]
        keys = [Keys.alerts(project), Keys.deliveries(project), Keys.delivery_queue(project)]
        return int(await self.conn.run_script(self._dispatch_alert, keys, args))

    async def claim_deliveries(
        self, project: str, now_ms: int, lease_until_ms: int, count: int
    ) -> list[tuple[str, bytes]]:
        """Lease up to `count` due deliveries until `lease_until_ms` (the lease's token)."""
        keys = [Keys.delivery_queue(project), Keys.deliveries(project)]
        reply = await self.conn.run_script(
            self._claim_deliveries, keys, [now_ms, lease_until_ms, count]
        )
        return [(as_text(reply[i]), as_bytes(reply[i + 1])) for i in range(0, len(reply), 2)]

    async def settle_delivery(
        self,
        project: str,
        delivery_id: str,
        token: int,
        claimed: bytes,
        record: bytes,
        outcome: str,
        score_ms: int,
    ) -> bool:
        """Store an attempt's outcome ('retry', 'delivered' or 'failed'); False when the lease
        was lost (another sender took the delivery, or it changed) and nothing was written."""
        keys = [
            Keys.delivery_queue(project),
            Keys.deliveries(project),
            Keys.delivery_done(project),
            Keys.delivery_dead(project),
        ]
        args: list[Any] = [delivery_id, token, claimed, record, outcome, score_ms]
        return bool(await self.conn.run_script(self._settle_delivery, keys, args))

    async def delivery_records(self, project: str, ids: Sequence[str]) -> list[bytes | None]:
        if not ids:
            return []
        raw = await self.client.hmget(Keys.deliveries(project), list(ids))
        return [as_bytes(r) if r is not None else None for r in raw]

    async def delivery_page(
        self, project: str, statuses: Sequence[str], offset: int, limit: int
    ) -> tuple[list[bytes], int]:
        """Deliveries by status ('pending' by next attempt, 'failed' by failure time,
        'delivered' by delivery time), the statuses in the order given; and their total."""
        index = {
            "pending": Keys.delivery_queue(project),
            "failed": Keys.delivery_dead(project),
            "delivered": Keys.delivery_done(project),
        }
        pipe = self.client.pipeline(transaction=False)
        for status in statuses:
            pipe.zcard(index[status])
        sizes = [int(n) for n in await pipe.execute()]
        ids: list[str] = []
        start = offset
        for status, size in zip(statuses, sizes, strict=True):
            if start >= size:
                start -= size
                continue
            want = limit - len(ids)
            if want <= 0:
                break
            page = await self.client.zrange(index[status], start, start + want - 1)
            ids += [as_text(i) for i in page]
            start = 0
        records = await self.delivery_records(project, ids)
        return [r for r in records if r is not None], sum(sizes)

    async def failed_delivery_ids(self, project: str, limit: int) -> list[str]:
        return [
            as_text(i) for i in await self.client.zrange(Keys.delivery_dead(project), 0, limit - 1)
        ]

    async def redeliver(
        self, project: str, due_ms: int, items: Sequence[tuple[str, bytes, bytes]]
    ) -> list[str]:
        """Move dead letters back to the queue: (id, record as read, new record); the ids moved."""
        if not items:
            return []
        args: list[Any] = [due_ms]
        for delivery_id, old, new in items:
            args += [delivery_id, old, new]
        keys = [
            Keys.delivery_queue(project),
            Keys.deliveries(project),
            Keys.delivery_dead(project),
        ]
        return [as_text(i) for i in await self.conn.run_script(self._redeliver, keys, args)]
