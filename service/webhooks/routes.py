"""Webhook endpoints for budget alerts, and the deliveries to them (with their dead letters)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from ..auth.model import Principal
from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .delivery.deliveries import (
    DeliveryPage,
    DeliveryStatus,
    RedeliverIn,
    RedeliverReport,
    list_deliveries,
    redeliver,
)
from .registry import (
    AlertKindName,
    WebhookCreated,
    WebhookIn,
    WebhookView,
)
from .service import (
    SampleDelivery,
    register_webhook,
    remove_webhook,
    send_test_message,
    visible_webhooks,
)


class WebhookController(Controller):
    path = "/v1/webhooks"
    tags = ["webhooks"]

    @post(
        "/",
        guards=[requires("admin")],
        summary="Register a webhook for budget alerts",
        description="Formats: standard (Standard Webhooks, signed; the `whsec_` secret is "
        "generated when not given and shown only in this answer), slack, feishu and dingtalk "
        "(signed when a secret is given), wecom, teams (a Teams Workflows webhook, Adaptive "
        "Card), and email (the URL is `smtp://host[:port]` or `smtps://host[:port]`, `email` "
        "names the sender, the recipients, the TLS mode and the login user, `secret` is the "
        "SMTP password, never shown again). `projects` and `kinds` narrow which alerts "
        "it receives (null: all). Alerts decided from now on are delivered to it. The URL "
        "must be https (smtp: TLS) and its host must resolve only to public addresses, unless "
        "the host is on TRAINLEDGER_WEBHOOK_ALLOWLIST; a refused URL is a 422 naming `$.url` "
        "and the reason.",
        operation_id="postWebhook",
        request_example={
            "url": "https://hooks.example.com/trainledger",
            "format": "standard",
            "projects": ["llm-7b"],
            "kinds": ["threshold", "forecast"],
        },
    )
    async def create(
        self,
        data: JSONBody[WebhookIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> WebhookCreated:
        return await register_webhook(
            services.store,
            services.sealer,
            request.user,
            data,
            services.settings.webhook_allowlist,
        )

    @get(
        "/",
        guards=[requires("admin")],
        summary="Registered webhooks (never their secrets)",
        operation_id="getWebhooks",
        description=(
            "The registered webhooks, with their URL, format and projects; never their secrets."
        ),
    )
    async def list_webhooks(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> list[WebhookView]:
        return await visible_webhooks(services.store, services.sealer, request.user)

    @delete(
        "/{webhook_id:str}",
        guards=[requires("admin")],
        summary="Delete a webhook",
        description="Its pending deliveries fail (as dead letters) instead of being sent.",
        status_code=204,
        operation_id="deleteWebhook",
    )
    async def remove(
        self,
        webhook_id: FromPath[str],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> None:
        await remove_webhook(services.store, services.sealer, request.user, webhook_id)

    @post(
        "/{webhook_id:str}/test",
        guards=[requires("admin")],
        status_code=200,
        summary="Send a signed sample message to a webhook",
        description="Sends one made-up alert of the alert kind `kind` (marked `test`, a new "
        "id each time; default `threshold`: a batch that crossed 50, 80 and 100 % of a "
        "sample budget; `evaluation_regression`: a sample experiment's benchmark fallen past "
        "the tolerance against the baseline, with its rework exposure) in the webhook's "
        "format, signed with its secret and checked as every delivery is, and answers what "
        "became of it: `delivered` (the endpoint answered 2xx; an email webhook's SMTP "
        "server accepted it), its status code (email: the SMTP reply code), or the "
        "error. A kind the webhook does not receive is sent too (it is a test); `subscribed` "
        "says whether it would receive real alerts of that kind. Sent once, not retried, not "
        "listed with the deliveries. A webhook outside the token's projects is a 404.",
        operation_id="postWebhookTest",
    )
    async def send_test(
        self,
        webhook_id: FromPath[str],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
        kind: Annotated[
            AlertKindName,
            QueryParameter(
                description="the alert kind of the sample: threshold (the default), "
                "forecast, growth or evaluation_regression"
            ),
        ] = "threshold",
    ) -> SampleDelivery:
        return await send_test_message(
            services.store,
            services.sealer,
            request.user,
            webhook_id,
            kind=kind,
            public_url=services.settings.public_url,
            config=services.settings.webhook_delivery,
            allowlist=services.settings.webhook_allowlist,
        )

    @get(
        "/deliveries",
        guards=[requires("read")],
        summary="Deliveries of a project's alerts",
        description="`pending` (ordered by next attempt), `failed` (dead letters, by failure "
        "time) or `delivered`; without `status`, all of them in that order.",
        operation_id="getWebhookDeliveries",
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
        operation_id="postWebhookRedelivery",
        request_example={"ids": ["1767225600000-0"]},
    )
    async def redeliver(
        self,
        project: ProjectParam,
        data: JSONBody[RedeliverIn],
        services: NamedDependency[Services],
    ) -> RedeliverReport:
        return await redeliver(services.store, project, data.ids)
