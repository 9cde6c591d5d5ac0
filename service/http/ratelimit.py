"""Per-token rate limit shared by every worker: a one-second window counted in Redis.

Litestar's own rate-limit middleware keeps a per-client history that each worker reads and
writes back (so concurrent workers can lose each other's counts) and answers without
`Retry-After`; this one counts with one atomic `INCRBY` and says when to come back.

A worker claims its requests from the shared window in small grants (`grant_size`: 1 below
200 requests a second, then up to 64, or as many as are waiting) and spends them locally, so
a busy token costs one Redis round trip per grant instead of one per request. The shared
counter only ever hands out `limit` requests a second in all, so the limit is never
exceeded; a grant left unspent when its second ends is lost, so near the limit a token may
get slightly fewer.

The shared counter of a second lives in one slot (on a Redis Cluster, on one shard, a
different one from second to second). While its node cannot be reached (a master failing
over), a worker does not make every project wait for that one shard: it *fails open*,
counting the token's requests itself, at most `limit` a second in this worker, for at most
`FAIL_OPEN_SECONDS` in a row; past that, requests are answered 503 until the counter can be
reached again. So during a failover a token may get up to `limit` a second from each worker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from ..auth.model import Principal
from ..storage.connection import NODE_DOWN_ERRORS
from ..stores import Stores
from .problems import problem

# The longest a worker counts requests itself while the shared counter cannot be reached.
FAIL_OPEN_SECONDS = 30.0


def grant_size(limit: int) -> int:
    """Requests a worker claims at once under a limit of `limit` a second (when alone)."""
    return max(1, min(64, limit // 100))


class _Grants:
    """This worker's unspent requests per token, for the current second only.

    One claim per token is in flight at a time; requests arriving meanwhile wait for it and
    it claims enough for them too, so a burst neither queues claim after claim nor claims
    more of the shared window than it uses (which other workers would then miss).
    """

    def __init__(self) -> None:
        self.second = 0
        self.left: dict[str, int] = {}
        self.claiming: dict[str, asyncio.Event] = {}
        self.waiting: dict[str, int] = {}
        # Since when (monotonic) the shared counter could not be reached; None: it can.
        self.failing_since: float | None = None
        # Requests counted by this worker alone in the current second, while failing open.
        self.local: dict[str, int] = {}
        self.local_second = 0

    def take(self, token_id: str, second: int) -> bool:
        if second > self.second:
            self.second = second
            self.left.clear()
        elif second < self.second:
            return False  # a grant of an earlier second is spent or lost
        left = self.left.get(token_id, 0)
        if left <= 0:
            return False
        self.left[token_id] = left - 1
        return True

    async def acquire(self, store: Stores, token_id: str, limit: int) -> bool:
        """Whether one more request of this token fits in this second's limit."""
        while True:
            second = int(time.time())
            if self.take(token_id, second):
                return True
            claim = self.claiming.get(token_id)
            if claim is None:
                break
            self.waiting[token_id] = self.waiting.get(token_id, 0) + 1
            try:
                await claim.wait()
            finally:
                self.waiting[token_id] -= 1
        done = self.claiming[token_id] = asyncio.Event()
        try:
            want = min(limit, max(grant_size(limit), self.waiting.get(token_id, 0) + 1))
            try:
                count = await store.tokens.count_request(token_id, second, want)
                self.failing_since = None
            except NODE_DOWN_ERRORS:
                if not self._may_fail_open():
                    raise
                count = self._count_locally(token_id, second, want)
            # Of the `want` just counted, those within the limit are ours to spend, in the
            # second they were counted in.
            granted = min(want, max(0, limit - (count - want)))
            if second > self.second:
                self.second = second
                self.left.clear()
            if second == self.second and granted > 1:
                self.left[token_id] = self.left.get(token_id, 0) + granted - 1
        finally:
            del self.claiming[token_id]
            done.set()
        return granted > 0  # one of them is this request's, even if its second has passed

    def _may_fail_open(self) -> bool:
        """The shared counter's node is down: whether this worker may count by itself still
        (for at most FAIL_OPEN_SECONDS in a row; past that the storage error stands: 503)."""
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        return now - self.failing_since <= FAIL_OPEN_SECONDS

    def _count_locally(self, token_id: str, second: int, want: int) -> int:
        """`count_request`, counted in this worker alone."""
        if second != self.local_second:
            self.local_second = second
            self.local.clear()
        count = self.local[token_id] = self.local.get(token_id, 0) + want
        return count


class TokenRateLimitMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        state: Any = scope["app"].state
        limit: int = state.settings.rate_limit_per_second
        if isinstance(principal, Principal) and limit > 0:
            grants: _Grants | None = getattr(state, "rate_grants", None)
            if grants is None:
                grants = state.rate_grants = _Grants()
            if not await grants.acquire(state.services.store, principal.token_id, limit):
                raise problem(
                    429,
                    "Too many requests",
                    f"this token may make {limit} requests a second; retry after the window",
                    kind="rate-limited",
                    headers={"Retry-After": "1", "RateLimit-Limit": str(limit)},
                )
        await next_app(scope, receive, send)
