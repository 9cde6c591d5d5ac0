"""Webhook endpoints and the durable delivery of budget alerts to them.

The outbox lives in Redis, next to the alerts it delivers:

1. The ingest script appends every decided alert to the project's alerts stream. Each worker
   runs a dispatcher that reads that stream through the consumer group ``deliverers``
   (``XREADGROUP``), and claims entries another worker read but never acknowledged
   (``XAUTOCLAIM`` after ``claim_idle_s``: that worker died). For each alert (or each run of
   threshold alerts of one budget and period: one batch's crossings, told in one message
   about the highest) one Lua script creates a delivery record per matching webhook
   (``HSETNX``, so a second dispatch of the same alert creates nothing), queues it, and
   acknowledges the entries. An alert is therefore never lost between being decided and
   being queued, whatever crashes in between.
2. A sender leases due deliveries (a Lua script moves each one's queue score to the end of
   the lease, so no other worker takes it meanwhile), sends them with httpx, and records the
   outcome with another script that only writes while the lease is still its own: delivered,
   retry later (exponential backoff with full jitter, or the receiver's ``Retry-After`` if
   that is later), or failed after ``max_attempts`` (a dead letter, listed and redelivered
   over the API). A sender that dies mid-send loses its lease; the delivery is retried after
   it ends. Every attempt of one alert carries the same ``webhook-id`` (the alert id), so a
   receiver drops the duplicates an expired lease can cause.
3. One endpoint is sent one request at a time, in alert order (`ordering.EndpointLines`);
   different endpoints side by side. A delivery waiting for its retry does not hold the line.

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
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import httpx
import msgspec

from ...cancellation import raise_if_cancelled
from ...metrics import WEBHOOK_DELIVERIES, WEBHOOK_RETRIES
from ...storage.sealing import Sealer
from ..formats.build import build_request
from ..formats.message import Message, OutgoingRequest
from ..messages import alert_message
from ..registry import WebhookRecord, check_target, load_webhooks
from ..targets.checks import (
    AllowList,
    Resolver,
    Target,
    UnsafeTarget,
)
from ..targets.redaction import scrub, secret_parts
from .config import DeliveryConfig, parse_retry_after, retry_delay
from .deliveries import DeliveryRecord, delivery_decoder, now_ms
from .dispatch import dispatch_alerts
from .ordering import EndpointLines, entry_order
from .retry_log import log_retry
from .sending import send_checked
from .smtp import deliver_email

if TYPE_CHECKING:
    from ...stores import Stores

log = logging.getLogger("trainledger.webhooks")

_MAX_ERROR_CHARS = 300


@dataclass
class _Job:
    project: str
    delivery_id: str
    claimed: bytes  # the record as leased
    token: int  # the lease's end, which is its token
    webhook: WebhookRecord | None
    entry: tuple[int, int]  # its alert's stream entry: alert order


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
        clock: Callable[[], int] = now_ms,
        allowlist: AllowList | Sequence[str] = (),
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sealer: Sealer,
    ) -> None:
        self.store = store
        # Opens the webhooks' stored URLs and secrets (the key of the settings).
        self.sealer = sealer
        self.config = config
        self.public_url = public_url
        # Hosts and networks exempt from the https and public-address rules (Settings).
        self.allowlist = (
            allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
        )
        self.resolver = resolver  # None: `targets.checks.resolver`, looked up per use
        self.ssl_context = ssl_context  # None: httpx's default verification (certifi)
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._rng = rng or random.Random()
        self._clock = clock
        self._lines = EndpointLines()  # per webhook, one send at a time, in alert order

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
                                task = self._send_in_order(tls, job, {})
                                inflight.add(task)
                                task.add_done_callback(inflight.discard)
                        failures = 0
                        pause = self.config.poll_s
                    except Exception as exc:
                        raise_if_cancelled(exc)
                        failures += 1
                        pause = min(30.0, self.config.poll_s * 2 ** min(failures, 8))
                        log.warning(
                            "webhook delivery round failed (%s: %s); next in %.1f s",
                            type(exc).__name__,
                            exc,
                            pause,
                        )
                    raise_if_cancelled()
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
            cache: dict[str, asyncio.Task[Message]] = {}
            async with self._http() as tls:
                await asyncio.gather(*(self._send_in_order(tls, j, cache) for j in jobs))
        return len(jobs)

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[ssl.SSLContext]:
        """What the sends of a round share: the TLS context (building one loads the CA
        bundle). Each attempt opens its own connection to the address it checked
        (`send_pinned`), so there is no client or pool to share."""
        yield self.ssl_context or httpx.create_ssl_context()

    # Dispatch: alerts stream -> outbox (service/webhooks/dispatch.py) -------------------

    async def dispatch(self) -> int:
        """Move every new (or abandoned) alert of every project into the outbox. Returns the
        number of deliveries created."""
        return await dispatch_alerts(
            self.store, self.sealer, self.config, self.consumer, self._clock
        )

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
                entry = entry_order(delivery_decoder.decode(raw).entry)
                jobs.append(_Job(project, did, raw, token, webhooks.get(webhook_id), entry))
        jobs.sort(key=lambda job: job.entry)  # each endpoint is sent its alerts in order
        return jobs

    def _send_in_order(
        self,
        tls: ssl.SSLContext,
        job: _Job,
        cache: dict[str, asyncio.Task[Message]],
    ) -> asyncio.Task[None]:
        """Send `job` once the deliveries to its webhook started before it are done (sent,
        or their attempt recorded): one endpoint gets one request at a time, in alert order.
        Deliveries to different webhooks go out side by side."""

        def lease_left() -> bool:  # a send must end before its lease does
            if self._clock() + self.config.timeout_s * 1000 < job.token:
                return True
            log.info("delivery %s waits for the next round", job.delivery_id)
            return False

        return self._lines.start(
            job.delivery_id.rsplit("|", 1)[-1],
            lambda: self._attempt_logged(tls, job, cache),
            lease_left,
        )

    async def _attempt_logged(
        self,
        tls: ssl.SSLContext,
        job: _Job,
        cache: dict[str, asyncio.Task[Message]],
    ) -> None:
        try:
            await self.attempt(tls, job, cache)
        except Exception as exc:  # Redis away: the lease runs out and another round retries
            raise_if_cancelled(exc)
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
        self, record: DeliveryRecord, cache: dict[str, asyncio.Task[Message]]
    ) -> Message:
        view = record.alert
        key = f"{view.project}|{view.id}"
        task = cache.get(key)
        if task is None:
            task = cache[key] = asyncio.ensure_future(
                alert_message(self.store, view, self.public_url, record.also)
            )
        return await asyncio.shield(task)

    async def attempt(
        self,
        tls: ssl.SSLContext,
        job: _Job,
        cache: dict[str, asyncio.Task[Message]],
    ) -> None:
        """Send one leased delivery and record the outcome.

        The target is checked and its host resolved again now, every address checked, and
        the request sent to a checked address (`send_pinned`); a refused target, a name that
        does not resolve, a 3xx (never followed) and any other non-2xx answer are failed
        attempts, retried with backoff and dead letters after `max_attempts`."""
        record = delivery_decoder.decode(job.claimed)
        webhook = job.webhook
        if webhook is None:
            await self._finish(job, record, "failed", error="the webhook was deleted")
            return
        if webhook.unsealable is not None:  # the wrong key: retried, as the key may be fixed
            await self._failed_attempt(job, record, None, _clip(webhook.unsealable), None)
            return
        if webhook.format == "email":  # SMTP, not HTTP: service.webhooks.delivery.smtp
            await self._attempt_email(job, record, webhook, tls, cache)
            return
        secrets_ = secret_parts(webhook.url, webhook.format, webhook.secret)
        try:
            target = check_target(webhook.url, self.allowlist)
        except UnsafeTarget as exc:  # nothing is sent
            refused = _clip(scrub(f"target refused: {exc}", secrets_))
            await self._failed_attempt(job, record, None, refused, None)
            return
        message = await self._message(record, cache)
        try:
            request = build_request(
                message, webhook.format, webhook.url, webhook.secret, now=datetime.now(UTC)
            )
        except ValueError as exc:
            await self._finish(job, record, "failed", error=f"cannot build the message: {exc}")
            return
        secrets_ = secret_parts(request.url, webhook.format, webhook.secret) + secrets_
        status, retry_after, error = await self._send(tls, target, request, message.id)
        if error is None:
            await self._finish(job, record, "delivered", http_status=status, attempted=True)
            return
        await self._failed_attempt(job, record, status, _clip(scrub(error, secrets_)), retry_after)

    async def _attempt_email(
        self,
        job: _Job,
        record: DeliveryRecord,
        webhook: WebhookRecord,
        tls: ssl.SSLContext,
        cache: dict[str, asyncio.Task[Message]],
    ) -> None:
        """`attempt` for an email webhook (`delivery/smtp.py`): `last_status_code` holds
        the SMTP reply code, and a 5xx reply makes a dead letter at once."""
        outcome = await deliver_email(
            webhook, await self._message(record, cache), allowlist=self.allowlist,
            resolver=self.resolver, ssl_context=tls, timeout_s=self.config.timeout_s,
        )  # fmt: skip
        if outcome.error is not None and not outcome.permanent:
            await self._failed_attempt(job, record, outcome.code, _clip(outcome.error), None)
            return
        done: Literal["delivered", "failed"] = "failed" if outcome.error else "delivered"
        error = _clip(outcome.error) if outcome.error else outcome.note
        await self._finish(job, record, done, http_status=outcome.code, error=error, attempted=True)

    async def _send(
        self, tls: ssl.SSLContext, target: Target, request: OutgoingRequest, message_id: str
    ) -> tuple[int | None, str | None, str | None]:
        """Resolve the target, send the request to a checked address and judge the answer:
        (HTTP status or None, its Retry-After, the error or None when delivered)."""
        return await send_checked(
            target,
            request,
            message_id,
            allowlist=self.allowlist,
            resolver=self.resolver,
            timeout_s=self.config.timeout_s,
            ssl_context=tls,
        )

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
        if not kept:
            log.info("delivery %s: lease lost before its outcome was recorded", job.delivery_id)
        elif outcome == "retry":  # `error` was scrubbed of the webhook's secrets by the caller
            WEBHOOK_RETRIES.inc()
            log_retry(job.delivery_id, job.project, updated.attempts, score, http_status, error)
        else:
            WEBHOOK_DELIVERIES.labels(outcome).inc()
        if kept and outcome == "failed":
            log.warning(
                "delivery %s of %s failed for good after %d attempts: %s",
                job.delivery_id,
                job.project,
                updated.attempts,
                error,
            )
