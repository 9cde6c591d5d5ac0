"""`GET /metrics`: the Prometheus text page; with a token that may read, the spend gauges of
the token's projects too."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.response import Response
from prometheus_client import CONTENT_TYPE_LATEST

from ..http.deps import Services
from ..http.security import scrape_principal
from .service import exposition


class MetricsController(Controller):
    """Public like `/healthz` without a token (no tenant data); spend is per project, so it
    is shown only to a scrape whose bearer token may read those projects."""

    path = "/metrics"
    include_in_schema = False

    @get()
    async def metrics(
        self, request: Request[Any, Any, Any], services: NamedDependency[Services]
    ) -> Response[bytes]:
        principal = await scrape_principal(request)
        page = await exposition(
            services.spend_gauges, services.store, services.rate_cards, principal
        )
        return Response(page, headers={"Content-Type": CONTENT_TYPE_LATEST})
