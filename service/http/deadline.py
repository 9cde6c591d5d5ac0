"""A bound on how long a request waits for the store (Redis Cluster: `request_timeout_ms`).

While a cluster master fails over, a command can wait on the dead node (a connect timeout,
redis-py's retries with a fresh slot map each, a script that never answers) and a batch of
several projects waits on each in turn. A caller must get the documented 503 instead of
being held: if no answer has started after `Connection.request_timeout` seconds, the request is
answered `503` (`Retry-After: 1`, outcome unknown) and its handler is left to finish in the
background, its late answer dropped. The handler is not cancelled: a cancellation inside
redis-py's cluster client (while it reads a new slot map) closes every connection of every
node, under other requests' feet. Once an answer has started (a long export streaming), it
runs to its end.

It also answers 503, not 500, when redis-py fails with an error that is not a storage error
(`RuntimeError` "the handler is closed", `AttributeError` on a writer that is None: a
connection closed under a request while a node died, as redis-py 8.1 does when it resets
its cluster client): see `raised_inside_redis`.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from .problems import storage_unavailable

log = logging.getLogger("trainledger")


def raised_inside_redis(exc: BaseException) -> bool:
    """Whether `exc` was raised inside redis-py (or below it, in asyncio's transports),
    called from this service's code: the frames after the service's last one include one
    of the `redis` package."""
    frames: list[str] = []
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename.replace("\\", "/"))
        tb = tb.tb_next
    ours = [i for i, name in enumerate(frames) if "/service/" in name]
    below = frames[ours[-1] + 1 :] if ours else frames
    return any("/redis/" in name for name in below)


def _forget(task: asyncio.Future[None]) -> None:
    """The late handler finished: its outcome went nowhere; note a failure for the log."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("a request answered 503 after its deadline then failed: %r", task.exception())


class StoreDeadlineMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        store: Any = getattr(scope["app"].state, "store", None)  # `Stores`
        bound: float | None = getattr(getattr(store, "connection", None), "request_timeout", None)
        if bound is None:
            await next_app(scope, receive, send)
            return
        started = late = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if late:
                return  # answered 503 already: the late answer goes nowhere
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        task = asyncio.ensure_future(next_app(scope, receive, guarded_send))
        done, _ = await asyncio.wait({task}, timeout=bound)  # (the task is not cancelled)
        if not done:
            if started:  # an answer is under way: let it finish
                await task
                return
            late = True
            task.add_done_callback(_forget)
            raise storage_unavailable(
                f"the ledger's Redis did not answer within {round(bound * 1000)} ms "
                "(request_timeout_ms)"
            )
        try:
            task.result()
        except (RuntimeError, AttributeError) as exc:
            if started or not raised_inside_redis(exc):
                raise
            raise storage_unavailable(
                f"the connection to the ledger's Redis failed ({type(exc).__name__})"
            ) from exc
