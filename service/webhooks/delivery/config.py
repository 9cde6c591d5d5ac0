"""How the delivery worker paces itself, and the retry schedule it follows."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class DeliveryConfig:
    """How the delivery worker paces itself. Durations in seconds. Defaults suit production;
    each is a setting (`Settings.webhook_*`, service/config/settings.py)."""

    enabled: bool = True  # False: `DeliveryWorker.run` returns at once (deliveries wait)
    max_attempts: int = 8  # attempts before a delivery becomes a dead letter
    base_delay_s: float = 60.0  # retry n waits uniform(0, min(max_delay, base × 2^(n-1)))
    max_delay_s: float = 6 * 3600.0
    retry_after_cap_s: float = 3600.0  # a receiver's Retry-After is honoured up to this
    lease_s: float = 60.0  # a sender holds a delivery this long; must exceed timeout_s
    poll_s: float = 1.0  # pause between rounds of the worker loop
    claim_idle_s: float = 30.0  # an alert read but unacknowledged this long is taken over
    timeout_s: float = 5.0  # whole HTTP attempt: connect, send, first 2 KiB of the answer
    concurrency: int = 16  # deliveries in flight per worker
    batch: int = 100  # alerts read per project and round

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.concurrency < 1 or self.batch < 1:
            raise ValueError("max_attempts, concurrency and batch must be at least 1")
        for name in ("base_delay_s", "max_delay_s", "retry_after_cap_s", "claim_idle_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.poll_s <= 0 or self.timeout_s <= 0:
            raise ValueError("poll_s and timeout_s must be positive")
        if self.lease_s <= self.timeout_s:
            raise ValueError("lease_s must be longer than timeout_s (or two senders overlap)")


def retry_delay(attempts: int, config: DeliveryConfig, rng: random.Random) -> float:
    """Seconds before the next attempt after `attempts` failed ones: full jitter over an
    exponentially growing, capped window."""
    window = min(config.max_delay_s, config.base_delay_s * 2 ** min(attempts - 1, 60))
    return rng.uniform(0, window)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` header as seconds from `now`: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)
