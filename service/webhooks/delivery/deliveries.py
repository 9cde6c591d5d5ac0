"""Delivery records (one alert to one webhook) as stored, as listed, and the redelivery of
dead letters."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from ...budgets.service import AlertView

if TYPE_CHECKING:
    from ...stores import Stores

DeliveryStatus = Literal["pending", "delivered", "failed"]
DELIVERY_STATUSES: tuple[str, ...] = ("pending", "failed", "delivered")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class DeliveryRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One alert to one webhook, as stored. Times are unix milliseconds."""

    id: str  # "<alert id>|<webhook id>"
    alert_id: str
    webhook_id: str
    project: str
    entry: str  # the alert's stream entry (the first of `entries`)
    alert: AlertView  # the alert the message is about (the highest threshold crossed)
    # The lower thresholds of the same budget the same batch crossed, told in the same
    # message; their stream entries, after `entry`.
    also: list[AlertView] = []
    status: DeliveryStatus = "pending"
    attempts: int = 0
    created_at: int
    next_at: int | None = None
    last_attempt_at: int | None = None
    last_status: int | None = None
    last_error: str | None = None
    delivered_at: int | None = None
    failed_at: int | None = None
    redeliveries: int = 0


class DeliveryView(msgspec.Struct, kw_only=True):
    """One delivery of an alert to a webhook: its status, attempts and the last error."""

    id: str
    alert_id: str
    webhook_id: str
    project: str
    status: DeliveryStatus
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    failed_at: datetime | None
    redeliveries: int
    alert: AlertView
    # Lower thresholds of the same budget crossed by the same batch: one message tells them
    # with `alert` (each is still in the alert history).
    also_alert_ids: list[str]


class DeliveryPage(msgspec.Struct, kw_only=True):
    """Answer of `GET /v1/webhooks/deliveries`: a page of a project's alert deliveries."""

    project: str
    status: DeliveryStatus | None
    items: list[DeliveryView]
    offset: int
    limit: int
    total: int
    next_offset: int | None


class RedeliverIn(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `POST /v1/webhooks/deliveries/redeliver`: the ids of the failed deliveries to send
    again (all failed ones when null)."""

    # None: every failed delivery of the project.
    ids: Annotated[list[str], msgspec.Meta(max_length=10_000)] | None = None


class RedeliverReport(msgspec.Struct, kw_only=True):
    """Answer of `POST /v1/webhooks/deliveries/redeliver`: the deliveries queued again and the ids
    that were not failed."""

    project: str
    redelivered: list[str]
    not_failed: list[str]  # ids asked for that are unknown, pending or already delivered


delivery_decoder = msgspec.json.Decoder(DeliveryRecord)


def delivery_id(alert_id: str, webhook_id: str) -> str:
    return f"{alert_id}|{webhook_id}"


def one_message_each(views: Sequence[AlertView | None]) -> list[list[int]]:
    """The alerts (in stream order; None: unreadable) that go in one message, as lists of
    indexes: consecutive threshold alerts of one budget and period together (the ingest
    script appends one batch's crossings of a budget one after another, and nothing comes
    between them), everything else alone."""
    groups: list[list[int]] = []
    for i, view in enumerate(views):
        if groups and view is not None and view.kind == "threshold":
            first = views[groups[-1][0]]
            if (
                first is not None
                and first.kind == "threshold"
                and (first.project, first.budget_id, first.period)
                == (view.project, view.budget_id, view.period)
            ):
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups


def highest_first(views: Sequence[AlertView]) -> list[AlertView]:
    """A group's alerts, the one its message is about first: the highest threshold (the
    latest in the stream among equals), then the others from high to low."""
    order = sorted(enumerate(views), key=lambda iv: (iv[1].threshold_pct or 0, iv[0]), reverse=True)
    return [view for _, view in order]


def _when(ms: int | None) -> datetime | None:
    return _EPOCH + timedelta(milliseconds=ms) if ms is not None else None


def delivery_view(record: DeliveryRecord) -> DeliveryView:
    created = _when(record.created_at)
    assert created is not None
    return DeliveryView(
        id=record.id,
        alert_id=record.alert_id,
        webhook_id=record.webhook_id,
        project=record.project,
        status=record.status,
        attempts=record.attempts,
        created_at=created,
        next_attempt_at=_when(record.next_at) if record.status == "pending" else None,
        last_attempt_at=_when(record.last_attempt_at),
        last_status_code=record.last_status,
        last_error=record.last_error,
        delivered_at=_when(record.delivered_at),
        failed_at=_when(record.failed_at),
        redeliveries=record.redeliveries,
        alert=record.alert,
        also_alert_ids=[a.id for a in record.also],
    )


async def list_deliveries(
    store: Stores, project: str, status: DeliveryStatus | None, offset: int, limit: int
) -> DeliveryPage:
    statuses = [status] if status is not None else list(DELIVERY_STATUSES)
    raws, total = await store.webhooks.delivery_page(project, statuses, offset, limit)
    items = [delivery_view(delivery_decoder.decode(r)) for r in raws]
    end = offset + limit
    return DeliveryPage(
        project=project,
        status=status,
        items=items,
        offset=offset,
        limit=limit,
        total=total,
        next_offset=end if end < total else None,
    )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def redeliver(store: Stores, project: str, ids: Sequence[str] | None) -> RedeliverReport:
    """Queue failed deliveries again, with a fresh set of attempts and the same webhook-id."""
    moved: list[str] = []
    if ids is None:
        for _ in range(1000):  # each round moves up to 1000; stop when none is left
            batch = await store.webhooks.failed_delivery_ids(project, 1000)
            done = await _redeliver_ids(store, project, batch)
            moved += done
            if not done:
                break
        return RedeliverReport(project=project, redelivered=moved, not_failed=[])
    wanted = list(dict.fromkeys(ids))
    moved = await _redeliver_ids(store, project, wanted)
    again = set(moved)
    return RedeliverReport(
        project=project, redelivered=moved, not_failed=[i for i in wanted if i not in again]
    )


async def _redeliver_ids(store: Stores, project: str, ids: Sequence[str]) -> list[str]:
    now = now_ms()
    items = []
    for did, raw in zip(ids, await store.webhooks.delivery_records(project, ids), strict=True):
        if raw is None:
            continue
        record = delivery_decoder.decode(raw)
        if record.status != "failed":
            continue
        fresh = msgspec.structs.replace(
            record,
            status="pending",
            attempts=0,
            next_at=now,
            failed_at=None,
            redeliveries=record.redeliveries + 1,
        )
        items.append((did, raw, msgspec.json.encode(fresh)))
    return await store.webhooks.redeliver(project, now, items)
