"""A cancel that a library dropped still ends the task that was cancelled.

On Python 3.11, `asyncio.wait_for` drops a cancel that arrives as the awaited operation
completes (fixed in 3.12), and redis-py wraps every socket write in it: a task that talks to
Redis all the time is cancelled in that window often (a folder with no pause between rounds,
on most cancels), carries on as if nothing happened, and a single `task.cancel()` (pytest's
close of its event loop, a shutdown) then waits for it forever. The request still shows in
`Task.cancelling()` (nothing took it back with `uncancel()`), so a loop checks it on every
round and after every store call.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelled(cause: BaseException | None = None) -> None:
    """Raise CancelledError if this task was asked to stop, even though no await raised it
    (`cause`: an error a client library turned the cancel into)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from cause
