"""The log line of a delivery attempt that failed and will be retried: one per attempt, with
the delivery id, the attempt number and when the next one is due (issue 18: a receiver that is
down must show in the logs long before the last attempt fails)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

log = logging.getLogger("trainledger.webhooks")


def log_retry(
    delivery_id: str,
    project: str,
    attempt: int,
    next_at_ms: int,
    http_status: int | None,
    error: str | None,
) -> None:
    """`error` must already be scrubbed of the webhook's secrets (the worker does it): the
    line never shows a URL's secret parts or a signing secret."""
    next_at = datetime.fromtimestamp(next_at_ms / 1000, UTC).isoformat(timespec="seconds")
    log.warning(
        "delivery %s of %s: attempt %d failed (%s); next attempt at %s",
        delivery_id,
        project,
        attempt,
        error,
        next_at,
        extra={
            "fields": {
                "delivery_id": delivery_id,
                "project": project,
                "attempt": attempt,
                "next_attempt_at": next_at,
                "http_status": http_status,
            }
        },
    )
