"""The Litestar application: wiring only. Rules live in `service.domain`; keys live in storage."""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import ClientException, ValidationException
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import ScalarRenderPlugin
from litestar.plugins.problem_details import ProblemDetailsConfig, ProblemDetailsPlugin
from litestar.types import ControllerRouterHandler, Empty

from .. import __version__
from ..analysis.routes import AnalysisController
from ..auth.routes import TokenController
from ..bills.routes import BillController
from ..budgets.routes import AlertController, BudgetController
from ..config import Settings
from ..config.handoff import handed_down
from ..costs.routes import CostsController
from ..dashboard.routes import DashboardController
from ..dashboard.routes import root as dashboard_root
from ..errors import Problem
from ..evaluations.routes import CostEffectController, EvaluationController
from ..events.routes import EventsController
from ..export.routes import ExportController
from ..ingest.service import Ingestor
from ..jobs.routes import JobController
from ..jobs.worker import JobWorker
from ..ledger.folding import Folder
from ..metrics import time_redis_commands
from ..plans.routes import PlanController
from ..projects.routes import ProjectController
from ..ratecards.catalog import RateCards
from ..ratecards.routes import RateCardController
from ..runtime import tune_garbage_collector
from ..spend_metrics.routes import MetricsController
from ..spend_metrics.service import SpendGauges
from ..storage.connection import STORE_UNAVAILABLE, StoreError
from ..storage.processes import exit_with_parent
from ..storage.sealing import Sealer, load_sealer
from ..stores import Stores
from ..waste.routes import ExperimentController, ReportController
from ..webhooks.delivery.worker import DeliveryWorker
from ..webhooks.routes import WebhookController
from .bodies import BoundedRequest, ClientGone, client_gone_answer
from .deadline import StoreDeadlineMiddleware
from .deps import Services
from .health import StoreReachability, healthz, readyz
from .observability import (
    PROMETHEUS,
    RequestIdMiddleware,
    answer_started,
    logging_config,
)
from .openapi import (
    API_TAGS,
    add_request_examples,
    add_wire_schemas,
    describe_schemas,
    document_csv_answers,
    document_problems,
    security_components,
    simplify_nullable_enums,
)
from .problems import (
    from_client_error,
    from_problem,
    from_validation,
    learn_query_names,
    redis_unavailable,
)
from .ratelimit import TokenRateLimitMiddleware
from .security import BearerTokenMiddleware

log = logging.getLogger("trainledger")


def build_services(settings: Settings, store: Stores, sealer: Sealer) -> Services:
    rate_cards = RateCards(store)
    folder = Folder(store) if settings.fold_in_workers else None
    ingestor = Ingestor(
        store,
        rate_cards,
        dedup_window_days=settings.dedup_window_days,
        max_future_skew_hours=settings.max_future_skew_hours,
        log_retention_days=settings.log_retention_days,
        folder=folder,
        dead_letter_limit=settings.dead_letter_limit,
    )
    gauges = SpendGauges(settings.metrics_spend)
    return Services(settings, store, rate_cards, ingestor, folder, sealer, gauges)


SWEEP_INTERVAL_SECONDS = 3600.0


async def sweep_forever(store: Stores) -> None:
    """Forget event ids older than the deduplication window, once an hour, in every worker.

    Several workers sweeping at once is harmless: a sweep only deletes what has expired.
    """
    while True:
        await asyncio.sleep(SWEEP_INTERVAL_SECONDS * random.uniform(0.5, 1.0))
        try:
            today = (datetime.now(UTC) - datetime(1970, 1, 1, tzinfo=UTC)).days
            for project in await store.projects.projects():
                removed = await store.ingest.sweep_seen(project, today)
                if removed:
                    log.info("forgot %d expired event ids of project %s", removed, project)
        except StoreError as exc:  # Redis away for a while: try again next round
            log.warning("expired-id sweep failed: %s", exc)


# In the order the OpenAPI document lists their operations.
_ROUTE_HANDLERS: list[ControllerRouterHandler] = [
    healthz,
    readyz,
    MetricsController,
    RateCardController,
    EventsController,
    CostsController,
    ProjectController,
    TokenController,
    BudgetController,
    AlertController,
    PlanController,
    AnalysisController,
    ReportController,
    ExperimentController,
    ExportController,
    WebhookController,
    DashboardController,
    dashboard_root,
    EvaluationController,
    CostEffectController,
    JobController,
    BillController,
]


def _start_background(
    app: Litestar, settings: Settings, store: Stores, sealer: Sealer
) -> list[asyncio.Task[None]]:
    """Wire the app's state on `store` and start its background tasks: the expired-id sweep,
    the webhook deliveries, the store's reachability and (when workers fold) the folder."""
    services = app.state.services = build_services(settings, store, sealer)
    app.state.store = store
    app.state.settings = settings
    worker = DeliveryWorker(
        store,
        settings.webhook_delivery,
        settings.public_url,
        allowlist=settings.webhook_allowlist,
        sealer=sealer,
    )
    app.state.delivery_worker = worker
    reach = app.state.store_reachability = StoreReachability(
        store, settings.healthz_unreachable_seconds
    )
    jobs = app.state.job_worker = JobWorker(store, services.rate_cards)
    background = [
        asyncio.create_task(sweep_forever(store)),
        asyncio.create_task(worker.run()),
        asyncio.create_task(jobs.run()),
        asyncio.create_task(reach.run()),
    ]
    if services.folder is not None:
        background.append(asyncio.create_task(services.folder.run()))
    return background


async def _stop_background(background: list[asyncio.Task[None]]) -> None:
    for task in background:
        task.cancel()
    # Bounded: a task whose Redis call swallows the cancellation must not hold up the
    # shutdown (what it was doing is safe to abandon: folds and deliveries are atomic).
    done, stuck = await asyncio.wait(background, timeout=5)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("background task failed: %r", task.exception())
    for task in stuck:
        log.warning("background task %s did not stop in time", task.get_coro())


def _lifespan(
    settings: Settings, url: str | None
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        if url is None:
            raise RuntimeError(
                "no Redis URL: set TRAINLEDGER_REDIS_URL or start with `trainledger serve`"
            )
        # `trainledger serve` made sure there is one.
        sealer = load_sealer(
            settings.data_dir, key=settings.secret_key, key_file=settings.secret_key_file
        )
        store = Stores.from_url(url)
        time_redis_commands(store)
        background = _start_background(app, settings, store, sealer)
        try:
            yield
        finally:
            await _stop_background(background)
            await store.close()

    return lifespan


def _provide_services(state: State) -> Services:
    services: Services = state.services
    return services


def _problem_details() -> ProblemDetailsPlugin:
    return ProblemDetailsPlugin(
        ProblemDetailsConfig(
            enable_for_all_http_exceptions=True,
            exception_to_problem_detail_map={
                ValidationException: from_validation,
                ClientException: from_client_error,
                # Every feature error, by its kind (service/errors.py).
                Problem: from_problem,
                # Redis away, or a cluster shard failing over: outcome unknown; retry.
                **dict.fromkeys(STORE_UNAVAILABLE, redis_unavailable),
            },
        )
    )


def _openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="trainledger",
        version=__version__,
        description="Cost ledger for foundation-model training.",
        path="/docs",
        render_plugins=[ScalarRenderPlugin()],
        security=[{"bearer": []}],
        components=security_components(),
        tags=API_TAGS,
    )


def create_app(settings: Settings | None = None, redis_url: str | None = None) -> Litestar:
    """The ASGI app. `redis_url` (or `settings.redis_url`) must point at a running server;
    the CLI starts the embedded Valkey first when none is configured."""
    settings = settings or Settings.from_env()
    app = Litestar(
        route_handlers=list(_ROUTE_HANDLERS),
        lifespan=[_lifespan(settings, redis_url or settings.redis_url)],
        before_send=[answer_started],
        logging_config=(
            logging_config(settings.log_format, settings.log_level)
            if settings.log_format
            else Empty
        ),
        dependencies={"services": Provide(_provide_services, sync_to_thread=False)},
        # The API reference and the metrics are public (a scrape with a token gets spend too:
        # spend_metrics/routes.py checks it); everything else needs a token.
        middleware=[
            RequestIdMiddleware(),
            PROMETHEUS.middleware,
            StoreDeadlineMiddleware(),
            DefineMiddleware(BearerTokenMiddleware, exclude=["^/docs", "^/metrics"]),
            TokenRateLimitMiddleware(),
        ],
        plugins=[_problem_details()],
        openapi_config=_openapi_config(),
        # Every route's but the ingest route's (service/http/bodies.py).
        request_max_body_size=settings.max_json_body_bytes,
        request_class=BoundedRequest,
        exception_handlers={ClientGone: client_gone_answer},
        debug=False,
    )
    learn_query_names(
        handler for route in app.routes for handler in getattr(route, "route_handlers", [])
    )
    add_wire_schemas(app)
    document_problems(app)
    document_csv_answers(app)
    add_request_examples(app)
    describe_schemas(app)
    simplify_nullable_enums(app)
    return app


def _share_the_interpreter_finely() -> None:
    """A fold sums its batches in a thread (service/ledger/folding.py); with Python's default
    5 ms switch interval a request waits up to 5 ms for the interpreter while it runs. 1 ms
    keeps the requests' share of it fine-grained."""
    sys.setswitchinterval(0.001)


def serve_app() -> Litestar:
    """The app as `trainledger serve` runs it (one per worker process): `create_app` plus
    process-wide tuning that an app embedded in another process (the tests) must not get."""
    handoff = handed_down()  # the settings `serve` built, whole
    app = create_app(handoff.settings if handoff is not None else None)
    if handoff is not None:
        exit_with_parent(handoff.serve_pid)  # a worker process leaves with `serve`
    app.on_startup.append(tune_garbage_collector)
    app.on_startup.append(_share_the_interpreter_finely)
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the app, as checked in at `openapi/openapi.json`."""
    # No connection is made: the Redis client is created in the lifespan, which is not run.
    app = create_app(Settings(), redis_url="redis://127.0.0.1:1/0")
    return app.openapi_schema.to_schema()
