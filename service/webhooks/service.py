"""Webhook endpoints as a token manages them: register, list and delete only within its
projects. A token limited to some projects sees only webhooks limited to those projects."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import msgspec

from ..auth.model import Principal
from ..errors import Forbidden, NotFound
from ..storage.sealing import Sealer
from .delivery.config import DeliveryConfig
from .delivery.sending import send_checked
from .delivery.smtp import deliver_email
from .formats.build import build_request
from .registry import (
    AlertKindName,
    WebhookCreated,
    WebhookError,
    WebhookFormat,
    WebhookIn,
    WebhookRecord,
    WebhookView,
    check_target,
    create_webhook,
    created_view,
    load_webhooks,
    webhook_view,
)
from .samples import sample_for
from .targets.checks import AllowList, Resolver, UnsafeTarget
from .targets.redaction import scrub, secret_parts

if TYPE_CHECKING:
    from ..stores import Stores


class WebhookForbidden(Forbidden):
    """The token may not watch `project` (the `index`th of the request's projects)."""

    def __init__(self, project: str, index: int) -> None:
        super().__init__(project, index)
        self.project = project
        self.index = index

    def problem_detail(self) -> str:
        return f"this token may not access project {self.project!r}"

    def problem_members(self) -> dict[str, Any]:
        return {"field": f"$.projects[{self.index}]"}


class WebhookNotFound(NotFound):
    def __init__(self, webhook_id: str) -> None:
        super().__init__(webhook_id)
        self.webhook_id = webhook_id

    def problem_detail(self) -> str:
        return f"no webhook {self.webhook_id!r}"


def visible(principal: Principal, webhook: WebhookRecord) -> bool:
    """A token limited to some projects sees only webhooks limited to those projects."""
    if principal.projects is None:
        return True
    return webhook.projects is not None and all(principal.can_access(p) for p in webhook.projects)


async def register_webhook(
    store: Stores,
    sealer: Sealer,
    principal: Principal,
    data: WebhookIn,
    allowlist: AllowList | Sequence[str],
) -> WebhookCreated:
    """Raises WebhookError (a request that cannot be) or WebhookForbidden, before any write."""
    if principal.projects is not None:
        if data.projects is None:
            raise WebhookError(
                "$.projects", "this token is limited to some projects: name the projects to watch"
            )
        for i, project in enumerate(data.projects):
            if not principal.can_access(project):
                raise WebhookForbidden(project, i)
    record = await create_webhook(store, data, allowlist, sealer=sealer)
    return created_view(record)


async def visible_webhooks(
    store: Stores, sealer: Sealer, principal: Principal
) -> list[WebhookView]:
    return [webhook_view(w) for w in await load_webhooks(store, sealer) if visible(principal, w)]


async def remove_webhook(
    store: Stores, sealer: Sealer, principal: Principal, webhook_id: str
) -> None:
    """Raises WebhookNotFound (also for one the token may not see)."""
    webhooks = await load_webhooks(store, sealer)
    found = [w for w in webhooks if w.id == webhook_id]
    if not found or not visible(principal, found[0]):
        raise WebhookNotFound(webhook_id)
    await store.webhooks.delete_webhook(webhook_id)


class SampleDelivery(msgspec.Struct, kw_only=True):
    """What became of a test message: sent once, never retried, never in the outbox."""

    webhook_id: str
    format: WebhookFormat
    kind: AlertKindName  # the alert kind of the sample sent
    # whether the webhook receives real alerts of that kind (its `kinds`); a test is sent anyway
    subscribed: bool
    message_id: str  # its webhook-id header (the standard format's signed id)
    delivered: bool  # the endpoint answered 2xx (email: the SMTP server accepted it)
    status_code: int | None  # the endpoint's answer, if it answered (email: the SMTP reply)
    error: str | None  # why it was not delivered (secrets in the URL never shown)


async def send_test_message(
    store: Stores,
    sealer: Sealer,
    principal: Principal,
    webhook_id: str,
    *,
    kind: AlertKindName = "threshold",
    public_url: str,
    allowlist: AllowList | Sequence[str],
    config: DeliveryConfig | None = None,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> SampleDelivery:
    """Send a made-up alert of kind ``kind`` (`samples.sample_for`) to a webhook the token
    may see, in its format and signed with its secret as every delivery is, through the same
    target checks. A kind the webhook does not receive (its `kinds`) is sent too, since it
    is a test; the answer's `subscribed` says so. Raises WebhookNotFound (also for one the
    token may not see)."""
    found = [w for w in await load_webhooks(store, sealer) if w.id == webhook_id]
    if not found or not visible(principal, found[0]):
        raise WebhookNotFound(webhook_id)
    webhook = found[0]
    allow = allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
    now = datetime.now(UTC)
    project = webhook.projects[0] if webhook.projects else None
    message = sample_for(kind, project, public_url, now)
    secrets_ = secret_parts(webhook.url, webhook.format, webhook.secret)

    def result(status: int | None, error: str | None) -> SampleDelivery:
        return SampleDelivery(
            webhook_id=webhook.id,
            format=webhook.format,
            kind=kind,
            subscribed=webhook.kinds is None or kind in webhook.kinds,
            message_id=message.id,
            delivered=error is None,
            status_code=status,
            error=scrub(error, secrets_) if error is not None else None,
        )

    if webhook.unsealable is not None:
        return result(None, webhook.unsealable)
    timeout_s = (config or DeliveryConfig()).timeout_s
    tls = ssl_context or httpx.create_ssl_context()
    if webhook.format == "email":  # one SMTP session, as a delivery makes (`delivery/smtp.py`)
        mailed = await deliver_email(
            webhook, message, allowlist=allow, resolver=resolver, ssl_context=tls,
            timeout_s=timeout_s,
        )  # fmt: skip
        return result(mailed.code, mailed.error)
    try:
        target = check_target(webhook.url, allow)
        request = build_request(message, webhook.format, webhook.url, webhook.secret, now=now)
    except (UnsafeTarget, ValueError) as exc:
        return result(None, f"not sent: {exc}")
    secrets_ = secret_parts(request.url, webhook.format, webhook.secret) + secrets_
    status, _, error = await send_checked(
        target,
        request,
        message.id,
        allowlist=allow,
        resolver=resolver,
        timeout_s=timeout_s,
        ssl_context=tls,
    )
    return result(status, error)
