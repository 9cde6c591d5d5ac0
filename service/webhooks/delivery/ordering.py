"""Keeping alert order per endpoint: a worker sends one endpoint one request at a time, each
after the one started before it has finished, oldest alert first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id ("1796183824306-0") as a sortable pair: alert order."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class EndpointLines:
    """One line of sends per endpoint: `start(key, send)` runs `send()` once the send
    started last for `key` has finished (whatever its outcome); sends for different keys
    run side by side."""

    def __init__(self) -> None:
        self._last: dict[str, asyncio.Task[None]] = {}

    def start(
        self,
        key: str,
        send: Callable[[], Awaitable[None]],
        still_worth_it: Callable[[], bool] = lambda: True,
    ) -> asyncio.Task[None]:
        """`still_worth_it` is asked after waiting for the one before: False skips the send
        (its lease would end mid-send; it is claimed again later, still in order)."""
        before = self._last.get(key)

        async def run() -> None:
            if before is not None:
                await asyncio.wait([before])
                if not still_worth_it():
                    return
            await send()

        task = asyncio.create_task(run())
        self._last[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._last.get(key) is done:
                del self._last[key]

        task.add_done_callback(forget)
        return task
