"""When to retry a request and how long to wait: exponential backoff with full jitter,
and the service's `Retry-After` when it sends one.

Retrying a post is safe: an event's id is its idempotency key, so an event the service
already counted comes back as a duplicate, never as a second count. Pure: no I/O, no clock
(the caller passes the time and the random source).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

# 408 request timeout, 429 too many requests, and every 5xx but 501 (not implemented: the
# same request would never work).
RETRY_STATUSES = frozenset({408, 429} | set(range(500, 600))) - {501}


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; before retry n (0-based) a wait drawn uniformly from
    [0, min(cap, base · 2ⁿ)] (AWS's "full jitter": clients that failed together do not
    retry together), or the service's Retry-After (at most `max_retry_after`) plus up to
    `base` of jitter."""

    attempts: int = 8
    base: float = 0.25
    cap: float = 30.0
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base < 0 or self.cap < 0 or self.max_retry_after < 0:
            raise ValueError("base, cap and max_retry_after must not be negative")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number `retry` (0 for the first retry) with no Retry-After."""
        ceiling = min(self.cap, self.base * 2.0 ** min(retry, 64))
        return rng.uniform(0.0, ceiling)

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait before retry number `retry`: the service's Retry-After when it gave one
        (it knows when it will take more), else the backoff."""
        if retry_after is None:
            return self.backoff(retry, rng)
        return min(self.max_retry_after, retry_after) + rng.uniform(0.0, self.base)


NO_RETRY = RetryPolicy(attempts=1)


def retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES


def retryable_error(error: Exception) -> bool:
    """A connection refused or reset, a timeout, a broken answer: the moment, not the request.
    (An unsupported URL scheme is a mistake in the request: not retried.)"""
    return isinstance(error, httpx.TransportError) and not isinstance(
        error, httpx.UnsupportedProtocol
    )


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (RFC 9110 §10.2.3: delay-seconds or an
    HTTP-date), None when absent or unreadable; a date in the past is 0."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())
