"""The client's retry policy: exponential backoff with full jitter, Retry-After honoured."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.client.retry import (
    RetryPolicy,
    retry_after_seconds,
    retryable_error,
    retryable_status,
)


@given(retry=st.integers(0, 200), seed=st.integers(0, 2**32))
def test_backoff_is_drawn_from_zero_to_the_capped_exponential(retry: int, seed: int) -> None:
    policy = RetryPolicy(base=0.25, cap=30.0)
    ceiling = min(30.0, 0.25 * 2**retry)
    assert 0.0 <= policy.backoff(retry, random.Random(seed)) <= ceiling


def test_backoff_spreads_over_its_whole_range_and_grows() -> None:
    # Full jitter: the draws cover [0, ceiling], not a band near the ceiling, and the
    # ceiling doubles per retry until the cap.
    policy = RetryPolicy(base=1.0, cap=8.0)
    rng = random.Random(7)
    for retry, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (10, 8.0)]:
        draws = [policy.backoff(retry, rng) for _ in range(2000)]
        assert max(draws) <= ceiling
        assert min(draws) < ceiling * 0.05
        assert max(draws) > ceiling * 0.95


def test_retry_after_is_honoured_and_capped() -> None:
    policy = RetryPolicy(base=0.5, cap=1.0, max_retry_after=60.0)
    rng = random.Random(1)
    for _ in range(200):
        wait = policy.delay(0, 7.0, rng)
        assert 7.0 <= wait <= 7.5  # at least what the service asked, a little jitter
        assert 60.0 <= policy.delay(0, 3600.0, rng) <= 60.5
    # Without a Retry-After: the backoff.
    assert policy.delay(0, None, random.Random(3)) == policy.backoff(0, random.Random(3))


def test_retry_after_header_forms() -> None:
    now = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("1") == 1.0
    assert retry_after_seconds(" 120 ") == 120.0
    assert retry_after_seconds("Sun, 01 Nov 2026 12:00:30 GMT", now) == 30.0
    assert retry_after_seconds("Sun, 01 Nov 2026 11:00:00 GMT", now) == 0.0  # past: now
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("-5") is None
    assert retry_after_seconds("1.5") is None  # delay-seconds is an integer


def test_what_is_retried() -> None:
    for status in (408, 429, 500, 502, 503, 504, 599):
        assert retryable_status(status), status
    for status in (200, 201, 204, 400, 401, 403, 404, 409, 413, 415, 422, 501):
        assert not retryable_status(status), status
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/events")
    assert retryable_error(httpx.ConnectError("refused", request=request))
    assert retryable_error(httpx.ReadTimeout("slow", request=request))
    assert retryable_error(httpx.RemoteProtocolError("closed", request=request))
    assert not retryable_error(httpx.UnsupportedProtocol("ftp", request=request))
    assert not retryable_error(ValueError("a bug"))


def test_a_policy_needs_one_attempt() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base=-1)
