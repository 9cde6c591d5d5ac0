"""Webhook endpoints and the durable delivery of budget alerts to them.

The outbox lives in Redis, next to the alerts it delivers:

1. The ingest script appends every decided alert to the project's alerts stream. Each worker
   runs a dispatcher that reads that stream through the consumer group ``deliverers``
   (``XREADGROUP``), and claims entries another worker read but never acknowledged
   (``XAUTOCLAIM`` after ``claim_idle_s``: that worker died). For each alert one Lua script
   creates a delivery record per matching webhook (``HSETNX``, so a second dispatch of the
   same alert creates nothing), queues it, and acknowledges the entry. An alert is therefore
   never lost between being decided and being queued, whatever crashes in between.
2. A sender leases due deliveries (a Lua script moves each one's queue score to the end of
   the lease, so no other worker takes it meanwhile), sends them with httpx, and records the
   outcome with another script that only writes while the lease is still its own: delivered,
   retry later (exponential backoff with full jitter, or the receiver's ``Retry-After`` if
   that is later), or failed after ``max_attempts`` (a dead letter, listed and redelivered
   over the API). A sender that dies mid-send loses its lease; the delivery is retried after
   it ends. Every attempt of one alert carries the same ``webhook-id`` (the alert id), so a
   receiver drops the duplicates an expired lease can cause.

Delivery is at least once. Sending never happens on the ingest path: a slow or dead receiver
only holds one of the sender's ``concurrency`` slots, never a Redis connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import re
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

import httpx
import msgspec

from costcore.money import format_money, parse_money

from .. import __version__
from ..budgets.service import AlertView, alert_view, find_budget
from ..costs.queries import cost_report
from ..events.model import SAFE_TEXT_PATTERN, ProjectName
from ..metrics import ALERTS_FIRED, WEBHOOK_DELIVERIES, WEBHOOK_RETRIES
from ..storage.sealing import Sealer, Unsealable, load_sealer
from ..stores import Stores
from .formats import AlertMessage, build_request, generate_secret
from .targets import (
    RESOLVE_TIMEOUT_S,
    AllowList,
    Resolver,
    Target,
    UnresolvedTarget,
    UnsafeTarget,
    resolve_target,
    scrub,
    secret_parts,
    send_pinned,
)
from .targets import check_target as _check_target

log = logging.getLogger("trainledger.webhooks")

DELIVERY_GROUP = "deliverers"
TOP_DRIVERS = 5
WebhookFormat = Literal["standard", "slack", "feishu", "dingtalk", "wecom"]
AlertKindName = Literal["threshold", "forecast", "growth"]
DeliveryStatus = Literal["pending", "delivered", "failed"]
DELIVERY_STATUSES: tuple[str, ...] = ("pending", "failed", "delivered")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
_MAX_ERROR_CHARS = 300


# --- configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryConfig:
    """How the delivery worker paces itself. Durations in seconds. Defaults suit production;
    each can be set with the environment variable in `ENV` (read by `from_env`)."""

    enabled: bool = True  # False: `DeliveryWorker.run` returns at once (deliveries wait)
    max_attempts: int = 8  # attempts before a delivery becomes a dead letter
    base_delay_s: float = 60.0  # retry n waits uniform(0, min(max_delay, base × 2^(n-1)))
    max_delay_s: float = 6 * 3600.0
    retry_after_cap_s: float = 3600.0  # a receiver's Retry-After is honoured up to this
    lease_s: float = 60.0  # a sender holds a delivery this long; must exceed timeout_s
    poll_s: float = 1.0  # pause between rounds of the worker loop
    claim_idle_s: float = 30.0  # an alert read but unacknowledged this long is taken over
    timeout_s: float = 5.0  # whole HTTP attempt: connect, send, first 2 KiB of the answer
    concurrency: int = 16  # deliveries in flight per worker
    batch: int = 100  # alerts read per project and round

    ENV = {
        "enabled": "TRAINLEDGER_WEBHOOK_DELIVERY",
        "max_attempts": "TRAINLEDGER_WEBHOOK_MAX_ATTEMPTS",
        "base_delay_s": "TRAINLEDGER_WEBHOOK_BASE_DELAY_S",
        "max_delay_s": "TRAINLEDGER_WEBHOOK_MAX_DELAY_S",
        "retry_after_cap_s": "TRAINLEDGER_WEBHOOK_RETRY_AFTER_CAP_S",
        "lease_s": "TRAINLEDGER_WEBHOOK_LEASE_S",
        "poll_s": "TRAINLEDGER_WEBHOOK_POLL_S",
        "claim_idle_s": "TRAINLEDGER_WEBHOOK_CLAIM_IDLE_S",
        "timeout_s": "TRAINLEDGER_WEBHOOK_TIMEOUT_S",
        "concurrency": "TRAINLEDGER_WEBHOOK_CONCURRENCY",
        "batch": "TRAINLEDGER_WEBHOOK_BATCH",
    }

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.concurrency < 1 or self.batch < 1:
            raise ValueError("max_attempts, concurrency and batch must be at least 1")
        for name in ("base_delay_s", "max_delay_s", "retry_after_cap_s", "claim_idle_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.poll_s <= 0 or self.timeout_s <= 0:
            raise ValueError("poll_s and timeout_s must be positive")
        if self.lease_s <= self.timeout_s:
            raise ValueError("lease_s must be longer than timeout_s (or two senders overlap)")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> DeliveryConfig:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(cls.ENV[f.name], "").strip()
            if not raw:
                continue
            name = cls.ENV[f.name]
            if f.name == "enabled":
                if raw.lower() not in ("1", "0", "on", "off", "true", "false", "yes", "no"):
                    raise SystemExit(f"{name} must be on or off, got {raw!r}")
                values[f.name] = raw.lower() in ("1", "on", "true", "yes")
                continue
            try:
                values[f.name] = int(raw) if f.type in (int, "int") else float(raw)
            except ValueError as exc:
                raise SystemExit(f"{name} must be a number, got {raw!r}") from exc
        try:
            return cls(**values)
        except ValueError as exc:
            raise SystemExit(f"webhook delivery settings: {exc}") from exc

    def env(self) -> dict[str, str]:
        """This configuration as the environment variables `from_env` reads."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[self.ENV[f.name]] = (
                ("on" if value else "off") if f.name == "enabled" else str(value)
            )
        return out


def retry_delay(attempts: int, config: DeliveryConfig, rng: random.Random) -> float:
    """Seconds before the next attempt after `attempts` failed ones: full jitter over an
    exponentially growing, capped window."""
    window = min(config.max_delay_s, config.base_delay_s * 2 ** min(attempts - 1, 60))
    return rng.uniform(0, window)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` header as seconds from `now`: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


# --- targets --------------------------------------------------------------------------------


def check_target(url: str, allowlist: AllowList | Sequence[str] = ()) -> Target:
    """Raise `UnsafeTarget` unless `url` may be a webhook target as written: http(s), a
    valid host, no credentials, https unless the host is allow-listed, and a literal address
    public unless allow-listed. `service.webhooks.targets` has the rules; resolving the host
    (`resolve_target`) happens at registration and again before every attempt."""
    allow = allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
    return _check_target(url, allow)


def redacted_url(url: str, fmt: str) -> str:
    """The URL as shown in listings: chat-bot URLs carry their secret (the Slack path, the
    Feishu hook token, the DingTalk access token, the WeCom key), so only the origin is
    shown for them; for `standard`, query values are masked."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if fmt != "standard":
        return origin + "/…"
    query = "&".join(p.split("=", 1)[0] + "=…" for p in parts.query.split("&") if p)
    return origin + parts.path + ("?" + query if query else "")


# --- webhooks -------------------------------------------------------------------------------


class WebhookIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
    format: WebhookFormat = "standard"
    # standard: a whsec_ secret (generated when absent); feishu/dingtalk: the bot's signing
    # secret, if it has one; slack/wecom: none (the URL is the secret).
    secret: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    projects: Annotated[list[ProjectName], msgspec.Meta(min_length=1, max_length=1000)] | None = (
        None  # None: every project
    )
    kinds: Annotated[list[AlertKindName], msgspec.Meta(min_length=1)] | None = None  # None: all
    description: Annotated[str, msgspec.Meta(max_length=500, pattern=SAFE_TEXT_PATTERN)] = ""


class WebhookRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A webhook with its URL and secret in the clear (in memory only: `StoredWebhook` is
    what Redis holds)."""

    id: str
    url: str
    format: WebhookFormat
    secret: str | None = None
    projects: list[str] | None = None
    kinds: list[str] | None = None
    created_at: datetime
    description: str = ""
    # Why the stored URL and secret could not be opened (another key): then `url` is "".
    unsealable: str | None = None


class _Credentials(msgspec.Struct, omit_defaults=True):
    """What is sealed: the URL (for the chat formats it is the credential; for `standard`
    it may carry tokens) and the signing secret, with the webhook's id (so a sealed value
    copied into another webhook's record is refused, not sent that webhook's alerts)."""

    id: str
    url: str
    secret: str | None = None


class StoredWebhook(msgspec.Struct, kw_only=True, omit_defaults=True):
    """As stored in Redis: `sealed` is the URL and the secret, encrypted and authenticated
    (`service.storage.sealing`); the rest is what filters and listings need."""

    id: str
    format: WebhookFormat
    sealed: str
    projects: list[str] | None = None
    kinds: list[str] | None = None
    created_at: datetime
    description: str = ""


class WebhookView(msgspec.Struct, kw_only=True):
    """As listed: never the secret, and chat-bot URLs shortened to their origin."""

    id: str
    url: str
    format: WebhookFormat
    has_secret: bool
    projects: list[str] | None
    kinds: list[str] | None
    created_at: datetime
    description: str
    # Set when the configured key cannot open the stored URL and secret (they were
    # encrypted with another TRAINLEDGER_SECRET_KEY): `url` is then empty, and deliveries
    # to it fail with this reason until the key is configured again.
    unreadable: str | None = None


class WebhookCreated(WebhookView, kw_only=True, omit_defaults=True):
    """The answer to a registration: the webhook as listed, and the signing secret of a
    `standard` webhook, this one time."""

    secret: str | None = None


class WebhookError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


_stored_decoder = msgspec.json.Decoder(StoredWebhook)
_credentials_decoder = msgspec.json.Decoder(_Credentials)


def seal_webhook(record: WebhookRecord, sealer: Sealer) -> bytes:
    """The webhook as Redis keeps it: its URL and secret sealed."""
    sealed = sealer.seal(msgspec.json.encode(_Credentials(record.id, record.url, record.secret)))
    return msgspec.json.encode(
        StoredWebhook(
            id=record.id,
            format=record.format,
            sealed=sealed,
            projects=record.projects,
            kinds=record.kinds,
            created_at=record.created_at,
            description=record.description,
        )
    )


def open_webhook(raw: bytes, sealer: Sealer) -> WebhookRecord:
    """A stored webhook with its URL and secret opened; `unsealable` says why not when the
    key cannot open them (`msgspec.DecodeError` when the record itself is unreadable)."""
    stored = _stored_decoder.decode(raw)
    url, secret, why = "", None, None
    try:
        credentials = _credentials_decoder.decode(sealer.open(stored.sealed))
        if credentials.id != stored.id:
            why = "its sealed URL and secret belong to another webhook"
        else:
            url, secret = credentials.url, credentials.secret
    except Unsealable as exc:
        why = f"its URL and secret cannot be decrypted: {exc}"
    return WebhookRecord(
        id=stored.id,
        url=url,
        format=stored.format,
        secret=secret,
        projects=stored.projects,
        kinds=stored.kinds,
        created_at=stored.created_at,
        description=stored.description,
        unsealable=why,
    )


_SAMPLE_ALERT = AlertMessage(
    id="bud_sample:2026-01:t100",
    kind="threshold",
    project="sample",
    budget_id="bud_sample",
    budget_name="sample",
    scope={},
    period="2026-01",
    threshold_pct=100,
    amount="1.00",
    spent="1.00",
    limit="1.00",
    over_by="0.00",
    currency="USD",
    occurred_at=_EPOCH,
)


def new_webhook(
    data: WebhookIn, now: datetime | None = None, allowlist: AllowList | None = None
) -> WebhookRecord:
    """Validate a registration and give it an id (and a secret, for `standard`)."""
    try:
        check_target(data.url, allowlist or AllowList())
    except UnsafeTarget as exc:
        raise WebhookError("$.url", str(exc)) from exc
    secret = data.secret
    if data.format == "standard" and secret is None:
        secret = generate_secret()
    if data.format in ("slack", "wecom") and secret is not None:
        raise WebhookError(
            "$.secret", f"{data.format} webhooks are not signed; the URL is the secret"
        )
    try:  # a dry run validates the URL and the secret the way every delivery will use them
        build_request(_SAMPLE_ALERT, data.format, data.url, secret)
    except ValueError as exc:
        field = "$.secret" if "secret" in str(exc) else "$.url"
        raise WebhookError(field, str(exc)) from exc
    return WebhookRecord(
        id="wh_" + secrets.token_hex(8),
        url=data.url,
        format=data.format,
        secret=secret,
        projects=sorted(set(data.projects)) if data.projects is not None else None,
        kinds=sorted(set(data.kinds)) if data.kinds is not None else None,
        created_at=now or datetime.now(UTC),
        description=data.description,
    )


def webhook_view(record: WebhookRecord) -> WebhookView:
    return WebhookView(
        id=record.id,
        url=redacted_url(record.url, record.format) if record.unsealable is None else "",
        format=record.format,
        has_secret=record.secret is not None,
        projects=record.projects,
        kinds=record.kinds,
        created_at=record.created_at,
        description=record.description,
        unreadable=record.unsealable,
    )


def created_view(record: WebhookRecord) -> WebhookCreated:
    secret = record.secret if record.format == "standard" else None
    return WebhookCreated(**msgspec.structs.asdict(webhook_view(record)), secret=secret)


async def create_webhook(
    store: Stores,
    data: WebhookIn,
    allowlist: AllowList | Sequence[str] = (),
    resolver: Resolver | None = None,
    *,
    sealer: Sealer,
) -> WebhookRecord:
    """Register a webhook. Its host is resolved now, and refused if any address it resolves
    to is not public (unless allow-listed); a name that does not resolve yet is accepted,
    since every delivery resolves and checks it again before sending."""
    allow = allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
    record = new_webhook(data, allowlist=allow)
    target = check_target(record.url, allow)
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            await resolve_target(target, allow, resolver)
    except UnsafeTarget as exc:
        raise WebhookError("$.url", str(exc)) from exc
    except (UnresolvedTarget, TimeoutError):
        pass
    await store.webhooks.put_webhook(record.id, seal_webhook(record, sealer))
    origin = f"{target.scheme}://{target.host}:{target.port}"  # never the path or query
    log.info("webhook %s registered (%s, %s)", record.id, record.format, origin)
    return record


# Webhooks whose URL and secret this process could not open and has said so (once each).
_reported_unsealable: set[str] = set()


async def load_webhooks(store: Stores, sealer: Sealer) -> list[WebhookRecord]:
    """Every webhook, its URL and secret opened. One the key cannot open is kept (listed,
    deletable; its deliveries fail with the reason) and logged once per process."""
    out = []
    for webhook_id, raw in (await store.webhooks.webhooks()).items():
        try:
            record = open_webhook(raw, sealer)
        except msgspec.DecodeError:
            log.error("webhook %s is stored in an unreadable form; ignored", webhook_id)
            continue
        if record.unsealable is not None and record.id not in _reported_unsealable:
            _reported_unsealable.add(record.id)
            log.error("webhook %s: %s", record.id, record.unsealable)
        out.append(record)
    return out


async def reseal_webhooks(store: Stores, sealer: Sealer) -> tuple[int, int]:
    """Seal every stored webhook still sealed with an older key again with the first one
    (key rotation). Returns (resealed, unopenable). A webhook changed or deleted meanwhile
    is left as it is now."""
    resealed = unopenable = 0
    for webhook_id, raw in (await store.webhooks.webhooks()).items():
        try:
            stored = _stored_decoder.decode(raw)
        except msgspec.DecodeError:
            continue
        if sealer.sealed_with_first_key(stored.sealed):
            continue
        try:
            fresh = msgspec.structs.replace(stored, sealed=sealer.reseal(stored.sealed))
        except Unsealable:
            unopenable += 1
            continue
        if await store.webhooks.replace_webhook(webhook_id, raw, msgspec.json.encode(fresh)):
            resealed += 1
    return resealed, unopenable


def wants(webhook: WebhookRecord, project: str, kind: str) -> bool:
    return (webhook.projects is None or project in webhook.projects) and (
        webhook.kinds is None or kind in webhook.kinds
    )


# --- deliveries -----------------------------------------------------------------------------


class DeliveryRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One alert to one webhook, as stored. Times are unix milliseconds."""

    id: str  # "<alert id>|<webhook id>"
    alert_id: str
    webhook_id: str
    project: str
    entry: str  # the alert's stream entry
    alert: AlertView
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


class DeliveryPage(msgspec.Struct, kw_only=True):
    project: str
    status: DeliveryStatus | None
    items: list[DeliveryView]
    offset: int
    limit: int
    total: int
    next_offset: int | None


class RedeliverIn(msgspec.Struct, forbid_unknown_fields=True):
    # None: every failed delivery of the project.
    ids: Annotated[list[str], msgspec.Meta(max_length=10_000)] | None = None


class RedeliverReport(msgspec.Struct, kw_only=True):
    project: str
    redelivered: list[str]
    not_failed: list[str]  # ids asked for that are unknown, pending or already delivered


_delivery_decoder = msgspec.json.Decoder(DeliveryRecord)


def delivery_id(alert_id: str, webhook_id: str) -> str:
    return f"{alert_id}|{webhook_id}"


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
    )


async def list_deliveries(
    store: Stores, project: str, status: DeliveryStatus | None, offset: int, limit: int
) -> DeliveryPage:
    statuses = [status] if status is not None else list(DELIVERY_STATUSES)
    raws, total = await store.webhooks.delivery_page(project, statuses, offset, limit)
    items = [delivery_view(_delivery_decoder.decode(r)) for r in raws]
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


def _now_ms() -> int:
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
    now = _now_ms()
    items = []
    for did, raw in zip(ids, await store.webhooks.delivery_records(project, ids), strict=True):
        if raw is None:
            continue
        record = _delivery_decoder.decode(raw)
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


# --- the message ----------------------------------------------------------------------------


def period_bounds(
    period: str, window: tuple[datetime, datetime] | None
) -> tuple[datetime, datetime] | None:
    """The time range an alert's period names: "2026-11", "2026-W48", "20261130" (a day, for
    growth alerts) or "window" (the budget's own window)."""
    if m := re.fullmatch(r"(\d{4})-(\d{2})", period):
        start = datetime(int(m[1]), int(m[2]), 1, tzinfo=UTC)
        return start, (start + timedelta(days=32)).replace(day=1)
    if m := re.fullmatch(r"(\d{4})-W(\d{2})", period):
        day = date.fromisocalendar(int(m[1]), int(m[2]), 1)
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return start, start + timedelta(days=7)
    if re.fullmatch(r"\d{8}", period):
        start = datetime.strptime(period, "%Y%m%d").replace(tzinfo=UTC)
        return start, start + timedelta(days=1)
    if period == "window":
        return window
    return None


def _day_range(bounds: tuple[datetime, datetime]) -> tuple[date, date]:
    start, end = bounds
    last = end.date() if end.time() == datetime.min.time() else end.date() + timedelta(days=1)
    return start.date(), last


async def top_drivers(
    store: Stores, view: AlertView, days: tuple[date, date] | None
) -> list[dict[str, str]]:
    """The largest (SKU, stage) costs of the alert's project over its period, narrowed to
    the budget's stage, category, experiment and owner when it has them (tags are not kept
    in the totals, so a tag scope is not narrowed)."""
    narrow = [d for d in ("category", "experiment", "owner") if d in view.scope]
    group_by = ["sku", "stage", *narrow]
    lo, hi = days if days is not None else (None, None)
    report = await cost_report(store, view.project, lo, hi, group_by, {}, 0, 100_000)
    sums: dict[tuple[str, str], int] = {}
    for row in report.rows:
        if any(row.key.get(d) != v for d, v in view.scope.items() if d in ("stage", *narrow)):
            continue
        key = (row.key["sku"], row.key["stage"])
        sums[key] = sums.get(key, 0) + parse_money(Decimal(row.cost))
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DRIVERS]
    return [
        {"name": f"{sku} / {stage}" if stage else sku, "cost": format_money(cost)}
        for (sku, stage), cost in ranked
        if cost > 0
    ]


def _forecast(view: AlertView, bounds: tuple[datetime, datetime] | None) -> str | None:
    if view.kind != "forecast" or bounds is None:
        return None
    start, end = bounds
    elapsed = int((min(view.occurred_at, end) - start).total_seconds())
    if elapsed <= 0:
        return None
    length = int((end - start).total_seconds())
    return format_money(parse_money(Decimal(view.spent)) * length // elapsed)


async def alert_message(store: Stores, view: AlertView, public_url: str) -> AlertMessage:
    """The message for one alert: what crossed what and by how much, the top cost drivers over
    the alert's period, and links back to the API."""
    window: tuple[datetime, datetime] | None = None
    if view.period == "window":
        budget = await find_budget(store, view.project, view.budget_id)
        if budget is not None and budget.window_start and budget.window_end:
            window = (budget.window_start, budget.window_end)
    bounds = period_bounds(view.period, window)
    days = _day_range(bounds) if bounds is not None else None
    base = public_url.rstrip("/")
    project = quote(view.project, safe="")
    costs = f"{base}/v1/costs?project={project}&group_by=sku,stage"
    if days is not None:
        costs += f"&from={days[0].isoformat()}&to={days[1].isoformat()}"
    links = {
        "costs": costs,
        "alerts": f"{base}/v1/alerts?project={project}",
        "budget": f"{base}/v1/budgets/{quote(view.budget_id, safe='')}?project={project}",
    }
    currency = view.currency if _CURRENCY_RE.match(view.currency) else "XXX"  # ISO: no currency
    return AlertMessage(
        id=view.id,
        kind=view.kind,
        project=view.project,
        budget_id=view.budget_id,
        budget_name=view.budget_name,
        scope=view.scope,
        period=view.period,
        threshold_pct=view.threshold_pct,
        amount=view.amount,
        spent=view.spent,
        limit=view.limit,
        over_by=view.over_by,
        currency=currency,
        forecast=_forecast(view, bounds),
        top_drivers=await top_drivers(store, view, days),
        occurred_at=view.occurred_at,
        links=links,
    )


# --- the worker -----------------------------------------------------------------------------


@dataclass
class _Job:
    project: str
    delivery_id: str
    claimed: bytes  # the record as leased
    token: int  # the lease's end, which is its token
    webhook: WebhookRecord | None


def _stop_if_cancelled(cause: BaseException | None = None) -> None:
    """Raise CancelledError if this task was asked to stop but the request got lost.

    On Python 3.11, ``asyncio.wait_for`` drops a cancellation that arrives as the awaited
    operation completes (fixed in 3.12), and redis-py wraps every socket write in it: a loop
    that talks to Redis all the time would then survive ``task.cancel()``. The request still
    shows in ``Task.cancelling()``, so the loop checks it on every round. (A client library
    turning a cancelled call into an error of its own is caught the same way.)
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from cause


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 1] + "…"


class DeliveryWorker:
    """Dispatches alerts into the outbox and sends due deliveries. One per process; any
    number may run against the same Redis."""

    def __init__(
        self,
        store: Stores,
        config: DeliveryConfig,
        public_url: str,
        *,
        consumer: str | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], int] = _now_ms,
        allowlist: AllowList | Sequence[str] = (),
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.store = store
        # Opens the webhooks' stored URLs and secrets; None: the key from the environment
        # (TRAINLEDGER_SECRET_KEY or TRAINLEDGER_SECRET_KEY_FILE).
        self.sealer = sealer or load_sealer(None)
        self.config = config
        self.public_url = public_url
        # Hosts and networks exempt from the https and public-address rules (Settings).
        self.allowlist = (
            allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
        )
        self.resolver = resolver  # None: `service.webhooks.targets.resolver`, looked up per use
        self.ssl_context = ssl_context  # None: httpx's default verification (certifi)
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._rng = rng or random.Random()
        self._clock = clock

    # The loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver until cancelled. Errors (Redis away, a receiver misbehaving) are logged and
        the loop backs off; it never ends on its own unless delivery is disabled."""
        if not self.config.enabled:
            log.info("webhook delivery is disabled in this worker")
            return
        inflight: set[asyncio.Task[None]] = set()
        failures = 0
        try:
            async with self._http() as tls:
                while True:
                    try:
                        await self.dispatch()
                        free = self.config.concurrency - len(inflight)
                        if free > 0:
                            for job in await self.claim(free):
                                task = asyncio.create_task(self._attempt_logged(tls, job, {}))
                                inflight.add(task)
                                task.add_done_callback(inflight.discard)
                        failures = 0
                        pause = self.config.poll_s
                    except Exception as exc:
                        _stop_if_cancelled(exc)
                        failures += 1
                        pause = min(30.0, self.config.poll_s * 2 ** min(failures, 8))
                        log.warning(
                            "webhook delivery round failed (%s: %s); next in %.1f s",
                            type(exc).__name__,
                            exc,
                            pause,
                        )
                    _stop_if_cancelled()
                    await asyncio.sleep(pause)
        finally:
            for task in inflight:
                task.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)

    async def run_once(self) -> int:
        """One dispatch round and one send round, waiting for the sends. Returns the number
        of delivery attempts made (whatever their outcome)."""
        await self.dispatch()
        jobs = await self.claim(self.config.concurrency)
        if jobs:
            cache: dict[str, asyncio.Task[AlertMessage]] = {}
            async with self._http() as tls:
                await asyncio.gather(*(self._attempt_logged(tls, j, cache) for j in jobs))
        return len(jobs)

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[ssl.SSLContext]:
        """What the sends of a round share: the TLS context (building one loads the CA
        bundle). Each attempt opens its own connection to the address it checked
        (`send_pinned`), so there is no client or pool to share."""
        yield self.ssl_context or httpx.create_ssl_context()

    # Dispatch: alerts stream -> outbox --------------------------------------------------

    async def dispatch(self) -> int:
        """Move every new (or abandoned) alert of every project into the outbox. Returns the
        number of deliveries created."""
        webhooks = await load_webhooks(self.store, self.sealer)
        created = 0
        idle_ms = int(self.config.claim_idle_s * 1000)
        for project in await self.store.projects.projects():
            while True:
                entries = await self.store.webhooks.alerts_to_dispatch(
                    project, DELIVERY_GROUP, self.consumer, self.config.batch, idle_ms
                )
                for entry_id, fields_ in entries:
                    created += await self._dispatch_one(project, entry_id, fields_, webhooks)
                if len(entries) < self.config.batch:
                    break
        return created

    async def _dispatch_one(
        self,
        project: str,
        entry_id: str,
        fields_: dict[str, bytes] | None,
        webhooks: Sequence[WebhookRecord],
    ) -> int:
        now = self._clock()
        records: list[tuple[str, bytes]] = []
        view_kind: str | None = None
        if fields_ is not None:
            try:
                view = alert_view(entry_id, fields_)
                view_kind = view.kind
            except (KeyError, ValueError, msgspec.MsgspecError) as exc:
                log.error(
                    "alert %s of %s is unreadable (%s); not delivered", entry_id, project, exc
                )
            else:
                for webhook in webhooks:
                    if not wants(webhook, project, view.kind):
                        continue
                    did = delivery_id(view.id, webhook.id)
                    record = DeliveryRecord(
                        id=did,
                        alert_id=view.id,
                        webhook_id=webhook.id,
                        project=project,
                        entry=entry_id,
                        alert=view,
                        created_at=now,
                        next_at=now,
                    )
                    records.append((did, msgspec.json.encode(record)))
        created = await self.store.webhooks.dispatch_alert(
            project, DELIVERY_GROUP, entry_id, now, records
        )
        if fields_ is not None and view_kind is not None:
            ALERTS_FIRED.labels(view_kind).inc()
        return created

    # Send: outbox -> receivers --------------------------------------------------------------

    async def claim(self, limit: int) -> list[_Job]:
        """Lease up to `limit` due deliveries across the projects."""
        jobs: list[_Job] = []
        projects = await self.store.projects.projects()
        if not projects:
            return jobs
        webhooks = {w.id: w for w in await load_webhooks(self.store, self.sealer)}
        self._rng.shuffle(projects)  # no project starves the others
        for project in projects:
            if len(jobs) >= limit:
                break
            now = self._clock()
            token = now + max(int(self.config.lease_s * 1000), 1)
            for did, raw in await self.store.webhooks.claim_deliveries(
                project, now, token, limit - len(jobs)
            ):
                webhook_id = did.rsplit("|", 1)[-1]
                jobs.append(_Job(project, did, raw, token, webhooks.get(webhook_id)))
        return jobs

    async def _attempt_logged(
        self,
        tls: ssl.SSLContext,
        job: _Job,
        cache: dict[str, asyncio.Task[AlertMessage]],
    ) -> None:
        try:
            await self.attempt(tls, job, cache)
        except Exception as exc:  # Redis away: the lease runs out and another round retries
            _stop_if_cancelled(exc)
            text = str(exc)
            if job.webhook is not None:  # an error may quote the URL: never log its secrets
                hook = job.webhook
                text = scrub(text, secret_parts(hook.url, hook.format, hook.secret))
            log.warning(
                "delivery %s of %s not recorded (%s: %s); retried after its lease",
                job.delivery_id,
                job.project,
                type(exc).__name__,
                text,
            )

    async def _message(
        self, view: AlertView, cache: dict[str, asyncio.Task[AlertMessage]]
    ) -> AlertMessage:
        key = f"{view.project}|{view.id}"
        task = cache.get(key)
        if task is None:
            task = cache[key] = asyncio.ensure_future(
                alert_message(self.store, view, self.public_url)
            )
        return await asyncio.shield(task)

    async def attempt(
        self,
        tls: ssl.SSLContext,
        job: _Job,
        cache: dict[str, asyncio.Task[AlertMessage]],
    ) -> None:
        """Send one leased delivery and record the outcome.

        The target is checked and its host resolved again now, every address checked, and
        the request sent to a checked address (`send_pinned`); a refused target, a name that
        does not resolve, a 3xx (never followed) and any other non-2xx answer are failed
        attempts, retried with backoff and dead letters after `max_attempts`."""
        record = _delivery_decoder.decode(job.claimed)
        webhook = job.webhook
        if webhook is None:
            await self._finish(job, record, "failed", error="the webhook was deleted")
            return
        if webhook.unsealable is not None:  # the wrong key: retried, as the key may be fixed
            await self._failed_attempt(job, record, None, _clip(webhook.unsealable), None)
            return
        secrets_ = secret_parts(webhook.url, webhook.format, webhook.secret)
        try:
            target = check_target(webhook.url, self.allowlist)
        except UnsafeTarget as exc:  # nothing is sent
            refused = _clip(scrub(f"target refused: {exc}", secrets_))
            await self._failed_attempt(job, record, None, refused, None)
            return
        message = await self._message(record.alert, cache)
        try:
            request = build_request(
                message, webhook.format, webhook.url, webhook.secret, now=datetime.now(UTC)
            )
        except ValueError as exc:
            await self._finish(job, record, "failed", error=f"cannot build the message: {exc}")
            return
        headers = dict(request.headers)
        headers.setdefault("webhook-id", message.id)  # the dedup key, in every format
        headers.setdefault("user-agent", f"trainledger-webhooks/{__version__}")
        secrets_ = secret_parts(request.url, webhook.format, webhook.secret) + secrets_
        status: int | None = None
        retry_after: str | None = None
        error: str | None = None
        try:
            # Resolving and sending share one budget, which the lease outlasts.
            async with asyncio.timeout(self.config.timeout_s):
                # Looked up again now and every answer checked (DNS rebinding); the send
                # goes to these addresses and nowhere else.
                addresses = await resolve_target(target, self.allowlist, self.resolver)
                answer = await send_pinned(
                    target,
                    addresses,
                    method=request.method,
                    url=request.url,
                    headers=headers,
                    body=request.body,
                    timeout_s=self.config.timeout_s,
                    ssl_context=tls,
                )
            status = answer.status
            retry_after = answer.headers.get("retry-after")
            if 300 <= status < 400:
                where = answer.headers.get("location", "")
                error = f"HTTP {status}: redirect not followed" + (
                    f" (to {where})" if where else ""
                )
            elif not 200 <= status < 300:
                text = answer.head[:200].decode("utf-8", "replace")
                error = f"HTTP {status}: {text}" if text else f"HTTP {status}"
        except UnsafeTarget as exc:  # nothing was sent
            error = f"target refused: {exc}"
        except UnresolvedTarget as exc:  # nothing was sent
            error = f"target not resolved: {exc}"
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            error = type(exc).__name__ + (f": {exc}" if str(exc) else "")
        if error is None:
            await self._finish(job, record, "delivered", http_status=status, attempted=True)
            return
        await self._failed_attempt(job, record, status, _clip(scrub(error, secrets_)), retry_after)

    async def _failed_attempt(
        self,
        job: _Job,
        record: DeliveryRecord,
        status: int | None,
        error: str,
        retry_after: str | None,
    ) -> None:
        """Record a failed attempt: retry later, or a dead letter after `max_attempts`."""
        attempts = record.attempts + 1
        if attempts >= self.config.max_attempts:
            await self._finish(
                job, record, "failed", http_status=status, error=error, attempted=True
            )
            return
        delay = retry_delay(attempts, self.config, self._rng)
        asked = parse_retry_after(retry_after, datetime.now(UTC))
        if asked is not None:
            delay = max(delay, min(asked, self.config.retry_after_cap_s))
        await self._finish(
            job,
            record,
            "retry",
            http_status=status,
            error=error,
            attempted=True,
            delay_ms=math.ceil(delay * 1000),
        )

    async def _finish(
        self,
        job: _Job,
        record: DeliveryRecord,
        outcome: Literal["retry", "delivered", "failed"],
        *,
        http_status: int | None = None,
        error: str | None = None,
        attempted: bool = False,
        delay_ms: int = 0,
    ) -> None:
        now = self._clock()
        changes: dict[str, Any] = {"last_error": error}
        if attempted:
            changes.update(
                attempts=record.attempts + 1, last_attempt_at=now, last_status=http_status
            )
        if outcome == "retry":
            changes.update(next_at=now + delay_ms)
            score = now + delay_ms
        elif outcome == "delivered":
            changes.update(status="delivered", next_at=None, delivered_at=now)
            score = now
        else:
            changes.update(status="failed", next_at=None, failed_at=now)
            score = now
        updated = msgspec.structs.replace(record, **changes)
        kept = await self.store.webhooks.settle_delivery(
            job.project,
            job.delivery_id,
            job.token,
            job.claimed,
            msgspec.json.encode(updated),
            outcome,
            score,
        )
        if kept:
            if outcome == "retry":
                WEBHOOK_RETRIES.inc()
            else:
                WEBHOOK_DELIVERIES.labels(outcome).inc()
        if not kept:
            log.info("delivery %s: lease lost before its outcome was recorded", job.delivery_id)
        elif outcome == "failed":
            log.warning(
                "delivery %s of %s failed for good after %d attempts: %s",
                job.delivery_id,
                job.project,
                updated.attempts,
                error,
            )
