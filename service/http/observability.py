"""Request ids, structured JSON logs and the Prometheus wiring of the HTTP app.

Every request gets an id: the caller's `X-Request-ID` when it is a short token of safe
characters, otherwise a new one. It is echoed in the response, attached to every log line
written while the request is handled, and written with the access line (method, path,
status, duration). Domain metrics are in `service/metrics.py`.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.exceptions import (
    ClientException,
    MethodNotAllowedException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    TooManyRequestsException,
    ValidationException,
)
from litestar.logging.config import LoggingConfig
from litestar.middleware import ASGIMiddleware
from litestar.plugins.problem_details import ProblemDetailsException
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController
from litestar.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "x-request-id"
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_SCOPE_KEY = "trainledger.request_id"

_EXPECTED_STATUSES = {400, 401, 403, 404, 405, 409, 413, 415, 422, 429}
_EXPECTED_EXCEPTIONS: set[type[Exception]] = {
    ProblemDetailsException,
    ClientException,
    ValidationException,
    NotAuthorizedException,
    PermissionDeniedException,
    NotFoundException,
    MethodNotAllowedException,
    TooManyRequestsException,
}

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
access_log = logging.getLogger("trainledger.access")


class RequestIdMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        incoming = ""
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        rid = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        # Errors raised by inner middleware (a 401 from auth, a 503 when Redis is away) are
        # answered by Litestar outside this middleware, so the id and the start time travel in
        # the scope and `answer_started` (a `before_send` hook, which sees every answer)
        # echoes the id and writes the access line with the status actually sent.
        scope[_SCOPE_KEY] = (rid, time.perf_counter())  # type: ignore[literal-required]
        token = request_id.set(rid)
        try:
            await next_app(scope, receive, send)
        finally:
            request_id.reset(token)


async def answer_started(message: Message, scope: Scope) -> None:
    """`before_send` hook: the request id on every answer, and one access line per answer."""
    if message["type"] != "http.response.start":
        return
    seen = scope.get(_SCOPE_KEY)
    if not isinstance(seen, tuple):
        return
    rid, started = seen
    MutableScopeHeaders.from_message(message)[REQUEST_ID_HEADER] = rid
    method, path, status = scope.get("method", ""), scope.get("path", ""), message["status"]
    access_log.info(
        "%s %s %d",
        method,
        path,
        status,
        extra={
            "fields": {
                "request_id": rid,
                "method": method,
                "path": path,
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        },
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,  # tells the workers of `serve --workers N` apart
        }
        rid = request_id.get()
        if rid is not None:
            doc["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def logging_config(fmt: str, level: str = "info") -> LoggingConfig:
    """The service's, Litestar's and uvicorn's logs on stderr, as JSON (or text) lines.

    Used by `create_app` only when `TRAINLEDGER_LOG_FORMAT` is set (as `trainledger serve`
    does, in every worker process), so tests and embedding apps keep their own logging.
    Records are formatted in the thread that logs them (a plain stream handler, no queue),
    so the request id of the task at hand is the one written.
    """
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    lvl = level.upper()
    loggers: dict[str, dict[str, Any]] = {
        name: {"level": lvl, "handlers": [], "propagate": True}
        for name in ("litestar", "trainledger", "uvicorn", "uvicorn.error")
    }
    # uvicorn's own access lines would repeat ours, without the request id.
    loggers["uvicorn.access"] = {"level": "CRITICAL", "handlers": [], "propagate": False}
    return LoggingConfig(
        formatters={"standard": formatter},
        handlers={"console": {"class": "logging.StreamHandler", "formatter": "standard"}},
        root={"handlers": ["console"], "level": lvl},
        loggers=loggers,
        # Tracebacks for what the service did not expect; an answered 4xx (or a 503 it
        # chose to give) is an access line, not an error.
        log_exceptions="always",
        disable_stack_trace={*_EXPECTED_STATUSES, *_EXPECTED_EXCEPTIONS},
    )


PROMETHEUS = PrometheusConfig(
    app_name="trainledger",
    prefix="trainledger",
    # Path templates (/v1/budgets/{budget_id}), not raw paths: bounded label values.
    group_path=True,
    exclude=["^/metrics"],
)


class MetricsController(PrometheusController):
    """`GET /metrics` in the Prometheus text format, public like `/healthz` (no tenant data)."""

    path = "/metrics"
    include_in_schema = False
