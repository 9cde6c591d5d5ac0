"""Domain metrics for Prometheus, in one place.

HTTP request counts and latencies come from Litestar's Prometheus middleware (see
`service/http/observability.py`); these are the ledger's own figures. Labels are bounded
sets only (no project names, ids or URLs), so the public `/metrics` reveals no tenant data
and its size does not grow with use. Spend per project is added only for a scrape with a
token that may read it, computed at scrape time (service/spend_metrics).

With several worker processes (`trainledger serve --workers N`) the command sets
`PROMETHEUS_MULTIPROC_DIR` before the workers start, and `/metrics` sums the workers'
files (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Histogram

if TYPE_CHECKING:
    from .stores import Stores

EVENTS_ACCEPTED = Counter(
    "trainledger_events_accepted", "Usage events accepted and counted (first time seen)"
)
EVENTS_DUPLICATE = Counter(
    "trainledger_events_duplicate", "Usage events answered as duplicates (id already counted)"
)
EVENTS_REJECTED = Counter(
    "trainledger_events_rejected",
    "Usage events rejected, by the field at fault (`body` when the item could not be decoded)",
    ["reason"],
)
DEAD_LETTERS_DROPPED = Counter(
    "trainledger_dead_letters_dropped",
    "Stored rejected events (dead letters) dropped, oldest first, to keep each project's "
    "within its limit (TRAINLEDGER_DEAD_LETTER_LIMIT)",
)
ALERTS_FIRED = Counter(
    "trainledger_alerts_fired", "Alerts taken from the alert streams for delivery", ["kind"]
)
WEBHOOK_DELIVERIES = Counter(
    "trainledger_webhook_deliveries",
    "Webhook deliveries finished, by outcome (delivered, or failed for good)",
    ["outcome"],
)
WEBHOOK_RETRIES = Counter(
    "trainledger_webhook_retries", "Failed webhook attempts that will be tried again"
)
REDIS_SECONDS = Histogram(
    "trainledger_redis_command_seconds",
    "Round trip of each Redis command the service sends (scripts included), by command",
    ["command"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
)

_INDEX = re.compile(r"^\$(\[\d+\])?\.?")
_KNOWN_FIELDS = frozenset(
    {"id", "time", "project", "sku", "quantity", "stage", "experiment", "owner", "tags"}
)


def rejection_reason(field: str | None) -> str:
    """The label for a rejected event: the top-level field at fault, from a fixed set."""
    name = _INDEX.sub("", field or "").split(".", 1)[0].split("[", 1)[0]
    if name in _KNOWN_FIELDS:
        return name
    return "body" if name in ("", "$") else "other"


def count_ingest(accepted: int, duplicates: int, rejected_fields: Iterable[str | None]) -> None:
    if accepted:
        EVENTS_ACCEPTED.inc(accepted)
    if duplicates:
        EVENTS_DUPLICATE.inc(duplicates)
    for field in rejected_fields:
        EVENTS_REJECTED.labels(rejection_reason(field)).inc()


def time_redis_commands(store: Stores) -> None:
    """Observe the round trip of every command the store sends: through its client's
    `execute_command`, and on its lane (service/storage/lane.py).

    redis-py has no hook for this; every single command (EVALSHA included) goes through
    that one method of the client, so the instance's method is wrapped. Pipelines are not
    observed command by command.
    """
    client: Any = store.connection.client
    inner: Callable[..., Awaitable[Any]] = client.execute_command
    # The histogram of each command name as sent (b"EVALSHA", "HGETALL"...): `labels()` takes
    # a lock and builds the label tuple on every call, a few µs on every command.
    by_name: dict[Any, Histogram] = {}

    def histogram(command: Any) -> Histogram:
        name = command.decode() if isinstance(command, bytes) else str(command)
        series = REDIS_SECONDS.labels(name.split(" ", 1)[0].upper())
        if isinstance(command, str | bytes) and len(by_name) < 1000:  # names are few
            by_name[command] = series
        return series

    async def execute_command(*args: Any, **options: Any) -> Any:
        command = args[0]
        series = by_name.get(command) if isinstance(command, str | bytes) else None
        if series is None:
            series = histogram(command)
        started = time.perf_counter()
        try:
            return await inner(*args, **options)
        finally:
            series.observe(time.perf_counter() - started)

    client.execute_command = execute_command

    def on_lane_command(command: str, seconds: float) -> None:
        series = by_name.get(command) or histogram(command)
        series.observe(seconds)

    store.connection.on_lane_command = on_lane_command
