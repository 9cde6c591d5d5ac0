"""Per-token rate limit shared by every worker: a one-second window counted in Redis.

Litestar's own rate-limit middleware keeps a per-client history that each worker reads and
writes back (so concurrent workers can lose each other's counts) and answers without
`Retry-After`; this one counts with one atomic `INCR` and says when to come back.
"""

from __future__ import annotations

import time
from typing import Any

from litestar.middleware import AbstractMiddleware
from litestar.types import Receive, Scope, Send

from service.domain.auth import Principal
from service.http.problems import problem


class TokenRateLimitMiddleware(AbstractMiddleware):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = scope.get("user")
        state: Any = scope["app"].state
        limit: int = state.settings.rate_limit_per_second
        if isinstance(principal, Principal) and limit > 0:
            now = time.time()
            second = int(now)
            count = await state.services.store.count_request(principal.token_id, second)
            if count > limit:
                raise problem(
                    429,
                    "Too many requests",
                    f"this token may make {limit} requests a second; retry after the window",
                    kind="rate-limited",
                    headers={"Retry-After": "1", "RateLimit-Limit": str(limit)},
                )
        await self.app(scope, receive, send)
