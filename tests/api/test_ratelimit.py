"""Per-token rate limit, counted in Redis and so shared by every worker."""

from __future__ import annotations

import asyncio
import time

from trainledger.config import Settings

from tests.conftest import Api, ServerThread, make_admin_token


async def test_limit_is_shared_by_workers_and_says_when_to_retry(clean_redis: str) -> None:
    settings = Settings(redis_url=clean_redis, rate_limit_per_second=5)
    servers = await asyncio.gather(
        asyncio.to_thread(lambda: ServerThread(clean_redis, settings).start()),
        asyncio.to_thread(lambda: ServerThread(clean_redis, settings).start()),
    )
    token = await make_admin_token(clean_redis)
    try:
        apis = [Api(s.base_url, token, clean_redis) for s in servers]
        clients = [a.client() for a in apis]
        start = time.time()
        answers = await asyncio.gather(*[clients[i % 2].get("/v1/projects") for i in range(40)])
        end = time.time()
        for c in clients:
            await c.aclose()
        ok = [r for r in answers if r.status_code == 200]
        limited = [r for r in answers if r.status_code == 429]
        assert len(ok) + len(limited) == 40
        # At most 5 a second for the token, across both servers, over the seconds spanned.
        assert len(ok) <= 5 * (int(end) - int(start) + 1)
        assert limited
        assert limited[0].headers["retry-after"] == "1"
        assert limited[0].json()["status"] == 429
        # Another token has its own budget; health checks are never limited.
        other = await make_admin_token(clean_redis)
        async with apis[0].client(other) as c:
            assert (await c.get("/v1/projects")).status_code == 200
            assert (await c.get("/healthz")).status_code == 200
    finally:
        for s in servers:
            await asyncio.to_thread(s.stop)
