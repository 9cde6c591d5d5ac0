"""Webhook endpoints for budget alerts, and the deliveries to them (with their dead letters)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from ..auth.model import Principal
from ..events.routes import ProjectParam
from ..http.deps import Services
from ..http.problems import invalid, problem
from ..http.security import requires
from .delivery import (
    DeliveryPage,
    DeliveryStatus,
    RedeliverIn,
    RedeliverReport,
    WebhookCreated,
    WebhookError,
    WebhookIn,
    WebhookRecord,
    WebhookView,
    create_webhook,
    created_view,
    list_deliveries,
    load_webhooks,
    redeliver,
    webhook_view,
)


def _visible(principal: Principal, webhook: WebhookRecord) -> bool:
    """A token limited to some projects sees only webhooks limited to those projects."""
    if principal.projects is None:
        return True
    return webhook.projects is not None and all(principal.can_access(p) for p in webhook.projects)


class WebhookController(Controller):
    path = "/v1/webhooks"
    tags = ["webhooks"]

    @post(
        "/",
        guards=[requires("admin")],
        summary="Register a webhook for budget alerts",
        description="Formats: standard (Standard Webhooks, signed; the `whsec_` secret is "
        "generated when not given and shown only in this answer), slack, feishu and dingtalk "
        "(signed when a secret is given), wecom. `projects` and `kinds` narrow which alerts "
        "it receives (null: all). Alerts decided from now on are delivered to it. The URL "
        "must be https and its host must resolve only to public addresses, unless the host "
        "is on TRAINLEDGER_WEBHOOK_ALLOWLIST; a refused URL is a 422 naming `$.url` and the "
        "reason.",
    )
    async def create(
        self,
        data: JSONBody[WebhookIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> WebhookCreated:
        principal = request.user
        if principal.projects is not None:
            if data.projects is None:
                raise invalid(
                    "$.projects",
                    "this token is limited to some projects: name the projects to watch",
                )
            for i, project in enumerate(data.projects):
                if not principal.can_access(project):
                    raise problem(
                        403,
                        "Forbidden",
                        f"this token may not access project {project!r}",
                        kind="forbidden",
                        field=f"$.projects[{i}]",
                    )
        try:
            record = await create_webhook(
                services.store,
                data,
                services.settings.webhook_allowlist,
                sealer=services.sealer,
            )
        except WebhookError as exc:
            raise invalid(exc.field, exc.reason) from exc
        return created_view(record)

    @get("/", guards=[requires("admin")], summary="Registered webhooks (never their secrets)")
    async def list_webhooks(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> list[WebhookView]:
        return [
            webhook_view(w)
            for w in await load_webhooks(services.store, services.sealer)
            if _visible(request.user, w)
        ]

    @delete(
        "/{webhook_id:str}",
        guards=[requires("admin")],
        summary="Delete a webhook",
        description="Its pending deliveries fail (as dead letters) instead of being sent.",
        status_code=204,
    )
    async def remove(
        self,
        webhook_id: FromPath[str],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> None:
        webhooks = await load_webhooks(services.store, services.sealer)
        found = [w for w in webhooks if w.id == webhook_id]
        if not found or not _visible(request.user, found[0]):
            raise problem(404, "Not found", f"no webhook {webhook_id!r}", kind="not-found")
        await services.store.webhooks.delete_webhook(webhook_id)

    @get(
        "/deliveries",
        guards=[requires("read")],
        summary="Deliveries of a project's alerts",
        description="`pending` (ordered by next attempt), `failed` (dead letters, by failure "
        "time) or `delivered`; without `status`, all of them in that order.",
    )
    async def deliveries(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        status: Annotated[
            DeliveryStatus | None, QueryParameter(description="pending, failed or delivered")
        ] = None,
        offset: Annotated[int, QueryParameter(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
    ) -> DeliveryPage:
        return await list_deliveries(services.store, project, status, offset, limit)

    @post(
        "/deliveries/redeliver",
        guards=[requires("admin")],
        status_code=200,
        summary="Send failed deliveries again",
        description="`ids: null` redelivers every failed delivery of the project. Each gets a "
        "fresh set of attempts and keeps its webhook-id.",
    )
    async def redeliver(
        self,
        project: ProjectParam,
        data: JSONBody[RedeliverIn],
        services: NamedDependency[Services],
    ) -> RedeliverReport:
        return await redeliver(services.store, project, data.ids)
