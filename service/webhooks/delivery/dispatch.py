"""Dispatch: the alerts stream into the outbox (step 1 of service/webhooks/worker.py).

Every worker reads each project's alerts stream through the consumer group
``DELIVERY_GROUP`` (and claims entries another worker read but never acknowledged); each
alert, or each run of threshold crossings of one budget and period (told in one message about
the highest), becomes one delivery per matching webhook and is acknowledged in one script.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from ...budgets.service import AlertView, alert_view
from ...metrics import ALERTS_FIRED
from ...storage.sealing import Sealer
from ..registry import WebhookRecord, load_webhooks, wants
from .config import DeliveryConfig
from .deliveries import DeliveryRecord, delivery_id, highest_first, one_message_each

if TYPE_CHECKING:
    from ...stores import Stores

log = logging.getLogger("trainledger.webhooks")

DELIVERY_GROUP = "deliverers"

# Messages one dispatch round orders by their due time, each a millisecond after the one
# before, in the second before the round (past that many, the rest are due a little later).
_ORDERED_PER_ROUND = 1000


async def dispatch_alerts(
    store: Stores, sealer: Sealer, config: DeliveryConfig, consumer: str, clock: Callable[[], int]
) -> int:
    """Move every new (or abandoned) alert of every project into the outbox. Returns the
    number of deliveries created."""
    webhooks = await load_webhooks(store, sealer)
    created = 0
    idle_ms = int(config.claim_idle_s * 1000)
    for project in await store.projects.projects():
        queued = 0  # messages queued for this project in this round, in stream order
        while True:
            entries = await store.webhooks.alerts_to_dispatch(
                project, DELIVERY_GROUP, consumer, config.batch, idle_ms
            )
            views = [_read_alert(project, e, f) for e, f in entries]
            for group in one_message_each(views):
                created += await _dispatch_group(
                    store,
                    clock(),
                    project,
                    [entries[i][0] for i in group],
                    [v for i in group if (v := views[i]) is not None],
                    webhooks,
                    queued,
                )
                queued += 1
            if len(entries) < config.batch:
                break
    return created


def _read_alert(project: str, entry_id: str, fields_: dict[str, bytes] | None) -> AlertView | None:
    if fields_ is None:
        return None  # deleted while pending: acknowledged, nothing to deliver
    try:
        view = alert_view(entry_id, fields_)
    except (KeyError, ValueError, msgspec.MsgspecError) as exc:
        log.error("alert %s of %s is unreadable (%s); not delivered", entry_id, project, exc)
        return None
    return view


async def _dispatch_group(
    store: Stores,
    now: int,
    project: str,
    entry_ids: Sequence[str],
    views: Sequence[AlertView],
    webhooks: Sequence[WebhookRecord],
    queued: int,
) -> int:
    """Queue one delivery per webhook for alerts told in one message, and acknowledge their
    entries. The due time orders the queue as the stream is ordered: the queue sorts equal
    times by delivery id ("…:t100|…" before "…:t50|…"), so each message of a round is due
    one millisecond after the one before it, all of them already due (up to
    `_ORDERED_PER_ROUND`)."""
    due = now - _ORDERED_PER_ROUND + queued
    records: list[tuple[str, bytes]] = []
    if views:
        view, *also = highest_first(views)
        for webhook in webhooks:
            if not wants(webhook, project, view.kind):
                continue
            did = delivery_id(view.id, webhook.id)
            record = DeliveryRecord(
                id=did,
                alert_id=view.id,
                webhook_id=webhook.id,
                project=project,
                entry=entry_ids[0],
                alert=view,
                also=also,
                created_at=now,
                next_at=due,
            )
            records.append((did, msgspec.json.encode(record)))
    created = await store.webhooks.dispatch_alert(project, DELIVERY_GROUP, entry_ids, due, records)
    for fired in views:
        ALERTS_FIRED.labels(fired.kind).inc()
    return created
