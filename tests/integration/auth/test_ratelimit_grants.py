"""The rate limiter's local grants against a real Redis: a burst below the limit is never
refused, and no more than the limit is ever admitted, however the claims interleave."""

from __future__ import annotations

import asyncio
import time

from trainledger.http.ratelimit import _Grants, grant_size
from trainledger.storage.keys import Keys
from trainledger.stores import Stores


async def test_a_burst_below_the_limit_is_admitted_with_few_claims(store: Stores) -> None:
    grants = _Grants()
    start = int(time.time())
    results = await asyncio.gather(*[grants.acquire(store, "tok-a", 1000) for _ in range(300)])
    end = int(time.time())
    assert all(results)
    # Concurrent requests wait for the claim in flight instead of claiming each: what was
    # taken from the shared window stays close to what was used.
    claimed = 0
    for second in range(start, end + 1):
        claimed += int(await store.connection.client.get(Keys.rate_window("tok-a", second)) or 0)
    assert 300 <= claimed <= 300 + grant_size(1000) * (end - start + 1)


async def test_never_more_than_the_limit_across_workers(store: Stores) -> None:
    workers = [_Grants(), _Grants(), _Grants()]  # three processes' books, one shared window
    start = int(time.time())
    results = await asyncio.gather(
        *[workers[i % 3].acquire(store, "tok-b", 250) for i in range(900)]
    )
    end = int(time.time())
    admitted = sum(results)
    assert admitted <= 250 * (end - start + 1)
    assert admitted >= 1 and not all(results)


async def test_small_limits_are_counted_one_request_at_a_time(store: Stores) -> None:
    grants = _Grants()
    start = int(time.time())
    results = [await grants.acquire(store, "tok-c", 5) for _ in range(12)]
    end = int(time.time())
    assert sum(results) <= 5 * (end - start + 1)
    assert results[:5] == [True] * 5 or end > start
    assert grant_size(5) == 1 and grant_size(199) == 1 and grant_size(1_000_000) == 64
