"""Webhook endpoints as a token manages them: register, list and delete only within its
projects. A token limited to some projects sees only webhooks limited to those projects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..auth.model import Principal
from ..storage.sealing import Sealer
from .registry import (
    WebhookCreated,
    WebhookError,
    WebhookIn,
    WebhookRecord,
    WebhookView,
    create_webhook,
    created_view,
    load_webhooks,
    webhook_view,
)
from .targets import AllowList

if TYPE_CHECKING:
    from ..stores import Stores


class WebhookForbidden(Exception):
    """The token may not watch `project` (the `index`th of the request's projects)."""

    def __init__(self, project: str, index: int) -> None:
        super().__init__(project, index)
        self.project = project
        self.index = index


class WebhookNotFound(Exception):
    def __init__(self, webhook_id: str) -> None:
        super().__init__(webhook_id)
        self.webhook_id = webhook_id


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
