"""Request ids, structured JSON logs and the Prometheus wiring of the HTTP app.

Every request gets an id: the caller's `X-Request-ID` when it is a short token of safe
characters, otherwise a new one. It is echoed in the response, attached to every log line
written while the request is handled, and written with the access line (method, path,
status, duration). Domain metrics are in `service/metrics.py`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
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
from litestar.plugins.prometheus import (
    PrometheusConfig,
    PrometheusMiddleware,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import Counter, Gauge, Histogram

from ..errors import Problem
from ..storage.connection import STORE_UNAVAILABLE
from .bodies import ClientGone

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
    ClientGone,  # a client that left mid-body: its access line says 499
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
        # 32 hex characters from the OS's random source, as uuid4().hex gave (5x cheaper).
        rid = incoming if _SAFE_ID.match(incoming) else os.urandom(16).hex()
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
        # An answer given before any route was found (a 404 for an unknown path, a 405):
        # Litestar sends it without the app's middleware, so it gets its id and line here.
        rid = os.urandom(16).hex()
        MutableScopeHeaders.from_message(message)[REQUEST_ID_HEADER] = rid
        token = request_id.set(rid)
        try:
            _access_line(scope, message["status"], rid, None)
        finally:
            request_id.reset(token)
        return
    rid, started = seen
    MutableScopeHeaders.from_message(message)[REQUEST_ID_HEADER] = rid
    _access_line(scope, message["status"], rid, started)


def _access_line(scope: Scope, status: int, rid: str, started: float | None) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return  # (the level `serve --log-level warning` runs at): skip building the line
    method, path = scope.get("method", ""), scope.get("path", "")
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
                "duration_ms": (
                    None if started is None else round((time.perf_counter() - started) * 1000, 3)
                ),
            }
        },
    )


# What a log line may not carry as it is: C0 and C1 controls (line breaks among them), DEL,
# the line and paragraph separators and the bidirectional formatting characters. A request
# path is percent-decoded (`%0a` is a newline): written raw, it could forge a log line.
_UNSAFE_LOG_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_log_text(text: str) -> str:
    """`text` with every character of `_UNSAFE_LOG_TEXT` written as a visible escape
    (``\\n`` becomes ``\\x0a``), so that one record is one line."""
    return _UNSAFE_LOG_TEXT.sub(_escape_char, text)


class TextFormatter(logging.Formatter):
    """`--log-format text`: one line per record, ``time level logger: message``, then the
    extra fields as ``key=value``; control and bidirectional characters in any of them (and in
    a traceback, whose line breaks become ``\\x0a``) escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = escape_log_text(super().format(record))
        rid = request_id.get()
        if rid is not None:
            line += " request_id=" + escape_log_text(rid)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                if key != "request_id":
                    line += f" {escape_log_text(str(key))}={escape_log_text(str(value))}"
        return line


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


def log_exception(logger: Any, scope: Scope, tb: list[str]) -> None:
    """Litestar's `exception_logging_handler`, called once per exception it answers: an
    unexpected one at ERROR with its traceback ("Uncaught exception", as Litestar's own), a
    storage outage it answered 503 (`STORE_UNAVAILABLE`, by kind: `BusyLoadingError` is a
    `ConnectionError`) at WARNING without one. The service handled the outage (the caller
    was told to retry); a traceback per request paged operators for it. (Litestar's
    `disable_stack_trace` matches exact classes only, so it missed the subclasses.)"""
    exc = sys.exc_info()[1]
    if isinstance(exc, Problem):
        return  # a feature's error, answered by its kind (service/errors.py): expected
    path = scope.get("path", "")
    if isinstance(exc, STORE_UNAVAILABLE):
        logger.warning(
            "storage unavailable, answered 503 (%s %r): %s: %s",
            scope.get("method", ""),
            path,
            type(exc).__name__,
            exc,
        )
        return
    logger.exception("Uncaught exception (connection_type=%s, path=%r):", scope["type"], path)


def logging_config(fmt: str, level: str = "info") -> LoggingConfig:
    """The service's, Litestar's and uvicorn's logs on stderr, as JSON (or text) lines.

    Used by `create_app` only when `TRAINLEDGER_LOG_FORMAT` is set (as `trainledger serve`
    does, in every worker process), so tests and embedding apps keep their own logging.
    Records are formatted in the thread that logs them (a plain stream handler, no queue),
    so the request id of the task at hand is the one written.
    """
    formatter: dict[str, Any] = {"()": JsonFormatter if fmt == "json" else TextFormatter}
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
        exception_logging_handler=log_exception,
    )


class LeanPrometheusMiddleware(PrometheusMiddleware):
    """Litestar's Prometheus middleware with the same metrics, names and labels (method, path
    template, status code, app name), for less work per request.

    Litestar's middleware builds a `Request` and parses its URL (only to replace the path by the
    template), looks each labelled series up through `labels()` four times, and wraps `send`
    with `functools.wraps`: ~125k instructions of a one-event post's ~2M. Here the series
    of each (method, path, status) are looked up once and kept. Configurations this does not
    cover (extra labels, exemplars, excluded methods, raw paths) use Litestar's code.
    """

    def __init__(self, app: ASGIApp, config: PrometheusConfig) -> None:
        super().__init__(app, config)
        self._lean = (
            config.group_path
            and not config.labels
            and config.exemplars is None
            and not config.excluded_http_methods
        )
        # (method, path template) -> its in-progress gauge; (method, path template, status)
        # -> its request counter, duration histogram and error counter (None below 500).
        self._in_progress: dict[tuple[str, str], Gauge] = {}
        self._finished: dict[tuple[str, str, int], tuple[Counter, Histogram, Counter | None]] = {}

    def _labels(self, method: str, path: str, status: int) -> dict[str, str | int | float]:
        # The order of Litestar's default labels: it names the series' label names.
        return {
            "method": method,
            "path": path,
            "status_code": status,
            "app_name": self._config.app_name,
        }

    def _gauge(self, method: str, path: str) -> Gauge:
        gauge = self._in_progress.get((method, path))
        if gauge is None:
            labels = self._labels(method, path, 200)
            gauge = self.requests_in_progress(labels).labels(*labels.values())
            self._in_progress[(method, path)] = gauge
        return gauge

    def _series(
        self, method: str, path: str, status: int
    ) -> tuple[Counter, Histogram, Counter | None]:
        series = self._finished.get((method, path, status))
        if series is None:
            labels = self._labels(method, path, status)
            values = labels.values()
            errors = None
            if status >= HTTP_500_INTERNAL_SERVER_ERROR:
                errors = self.requests_error_count(labels).labels(*values)
            series = (
                self.request_count(labels).labels(*values),
                self.request_time(labels).labels(*values),
                errors,
            )
            self._finished[(method, path, status)] = series
        return series

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._lean:
            await super().__call__(scope, receive, send)
            return
        method: str = scope["method"] if scope["type"] == ScopeType.HTTP else scope["type"]
        path: str = scope["path_template"]
        started = time.perf_counter()
        # As Litestar's: the status of the answer sent through here (200 when the answer
        # goes out from further out, e.g. after a 401 raised by auth), and the duration up
        # to the last body message (0 when none went through here).
        status = 200
        duration = 0.0

        async def timed_send(message: Message) -> None:
            nonlocal status, duration
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                duration = time.perf_counter() - started
            await send(message)

        in_progress = self._gauge(method, path)
        in_progress.inc()
        try:
            await self.app(scope, receive, timed_send)
        finally:
            in_progress.dec()
            count, seconds, errors = self._series(method, path, status)
            if errors is not None:
                errors.inc()
            count.inc()
            seconds.observe(duration)


PROMETHEUS = PrometheusConfig(
    app_name="trainledger",
    prefix="trainledger",
    # Path templates (/v1/budgets/{budget_id}), not raw paths: bounded label values.
    group_path=True,
    exclude=["^/metrics"],
    middleware_class=LeanPrometheusMiddleware,
)
