"""The asynchronous client: `AsyncClient` and `AsyncBatcher`, the same contract as
`Client` and `Batcher` (sync.py) on asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self

import httpx

from .errors import ApiError
from .models import (
    NDJSON,
    Event,
    IngestReport,
    encode_event,
    event_list,
    ndjson,
    read_report,
)
from .retry import RetryPolicy, retry_after_seconds, retryable_error, retryable_status
from .sync import DEFAULT_BATCH, BatcherError, OnRetry

if TYPE_CHECKING:
    from .spool import Spool


class AsyncClient:
    """`Client` on asyncio: every request retries connection errors, timeouts, 429 and 5xx
    under `retry`; other errors raise `ApiError`. `async with`, or `await aclose()`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        on_retry: OnRetry | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _wait(
        self, retry: int, cause: int | Exception, response: httpx.Response | None
    ) -> None:
        after = retry_after_seconds(response.headers.get("retry-after")) if response else None
        delay = self.retry.delay(retry, after, self._rng)
        if self.on_retry is not None:
            self.on_retry(retry + 1, delay, cause)
        await self._sleep(delay)

    async def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The answer to a request, retried under the policy (see `Client.send`)."""
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                response = await self.http.request(method, path, **kwargs)
            except Exception as exc:
                if last or not retryable_error(exc):
                    raise
                await self._wait(retry, exc, None)
                continue
            if last or not retryable_status(response.status_code):
                return response
            await self._wait(retry, response.status_code, response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def request(
        self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        response = await self.send(method, path, **kwargs)
        if response.status_code >= 400 and response.status_code not in ok:
            raise ApiError(response)
        return response

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.request(method, path, **kwargs)).json()

    async def post_ndjson(self, lines: Sequence[bytes]) -> IngestReport:
        response = await self.send(
            "POST", "/v1/events", content=ndjson(lines), headers={"Content-Type": NDJSON}
        )
        if response.status_code in (200, 422):
            report = read_report(response.content)
            if report is not None:
                return report
        raise ApiError(response)

    async def post_events(
        self, events: Event | Iterable[Event], *, batch_size: int = DEFAULT_BATCH
    ) -> IngestReport:
        """Post one event or many (see `Client.post_events`)."""
        many = event_list(events)
        total = IngestReport(accepted=0, duplicates=0)
        for first in range(0, len(many), batch_size):
            lines = [encode_event(e) for e in many[first : first + batch_size]]
            total.add(await self.post_ndjson(lines), first)
        return total

    def batcher(
        self, *, size: int = 1_000, interval: float = 5.0, spool: Spool | None = None
    ) -> AsyncBatcher:
        return AsyncBatcher(self, size=size, interval=interval, spool=spool)


class AsyncBatcher:
    """`Batcher` on asyncio: a task flushes every `interval` seconds; `add` flushes when
    `size` are waiting; `aclose()` (or leaving `async with`) flushes what is left, to the
    spool when the service cannot take it (else raises `BatcherError`)."""

    def __init__(
        self, client: AsyncClient, *, size: int = 1_000, interval: float = 5.0, spool: Spool | None
    ) -> None:
        if size < 1 or interval <= 0:
            raise ValueError("size must be at least 1 and interval positive")
        self.client = client
        self.size = size
        self.interval = interval
        self.spool = spool
        self.report = IngestReport(accepted=0, duplicates=0)
        self.last_error: Exception | None = None
        self._queue: list[bytes] = []
        self._sending = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def add(self, event: Event) -> None:
        self._queue.append(encode_event(event))
        if len(self._queue) >= self.size:
            await self.flush()

    async def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            await self.add(event)

    async def flush(self) -> None:
        async with self._sending:
            while self._queue:
                batch = self._queue[: self.size]
                report = await self.client.post_ndjson(batch)
                del self._queue[: len(batch)]
                self.report.add(report, 0)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
                self.last_error = None
            except Exception as exc:
                self.last_error = exc

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.flush()
        except Exception as exc:
            left, self._queue = self._queue, []
            if self.spool is None:
                raise BatcherError(left, exc) from exc
            import msgspec

            self.spool.put([msgspec.json.decode(line) for line in left])
