"""The asynchronous client: `AsyncClient` and `AsyncBatcher`, the same contract as
`Client` and `Batcher` (sync.py) on asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import httpx
import msgspec

from .batching import (
    DEFAULT_MAX_QUEUED,
    BatcherView,
    Delivery,
    EventQueue,
    OnError,
    split_posts,
)
from .errors import ApiError, BatcherError
from .models import (
    NDJSON,
    Event,
    IngestReport,
    encode_event,
    event_list,
    ndjson,
    read_report,
)
from .retry import (
    RetryPolicy,
    idempotent_method,
    retry_after_seconds,
    retryable_error,
    retryable_status,
)
from .spool_files import SpoolBusy
from .sync import DEFAULT_BATCH, OnRetry, as_mapping, drain_report, set_aside, unreachable

if TYPE_CHECKING:
    from .spool import Spool
    from .sync import Client


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

    async def send(
        self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any
    ) -> httpx.Response:
        """The answer to a request, retried under the policy (see `Client.send`)."""
        repeatable = idempotent_method(method) if idempotent is None else idempotent
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                response = await self.http.request(method, path, **kwargs)
            except Exception as exc:
                if last or not retryable_error(exc, repeatable):
                    raise unreachable(self.url, exc, retry + 1) from exc
                await self._wait(retry, exc, None)
                continue
            if last or not retryable_status(response.status_code, repeatable):
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
        # Idempotent by the events' ids: a post repeated after a timeout counts nothing twice.
        response = await self.send(
            "POST",
            "/v1/events",
            idempotent=True,
            content=ndjson(lines),
            headers={"Content-Type": NDJSON},
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
        self,
        *,
        size: int = 1_000,
        interval: float = 5.0,
        spool: Spool | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED,
        on_error: OnError | None = None,
    ) -> AsyncBatcher:
        return AsyncBatcher(
            self,
            size=size,
            interval=interval,
            spool=spool,
            max_queued=max_queued,
            on_error=on_error,
        )


class AsyncBatcher(BatcherView):
    """`Batcher` on asyncio, the same contract: `add` never posts (a task sends, as soon as
    `size` are waiting and every `interval` seconds), so it never awaits the network nor
    raises a transport error; with `spool` it writes the event there before it returns (in
    a worker thread: the fsync does not stall the loop), and the task drains the spool;
    refused events are set aside; `aclose()` (or leaving `async with`) flushes what is left,
    to the spool when the service cannot take it (else raises `BatcherError`)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        size: int = 1_000,
        interval: float = 5.0,
        spool: Spool | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED,
        on_error: OnError | None = None,
    ) -> None:
        if size < 1 or interval <= 0:
            raise ValueError("size must be at least 1 and interval positive")
        self.client = client
        self.size = size
        self.interval = interval
        self.spool = spool
        self._queue = EventQueue(max_queued, on_error)
        self._spooled = 0
        self._sending = asyncio.Lock()
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _start(self) -> None:
        if self._task is None and not self._closing:
            self._task = asyncio.create_task(self._run())

    async def add(self, event: Event) -> None:
        await self._keep([event])

    async def extend(self, events: Iterable[Event]) -> None:
        many = list(events)
        for first in range(0, len(many), self.size):
            await self._keep(many[first : first + self.size])

    async def _keep(self, events: Sequence[Event]) -> None:
        if not events:
            return
        self._start()
        if self.spool is not None:
            try:
                await asyncio.to_thread(self.spool.put, [as_mapping(e) for e in events])
            except OSError as exc:  # a full disk, permissions: keep them in memory instead
                self._queue.failed(exc)
            else:
                self._spooled += len(events)
                if self._spooled >= self.size:
                    self._wake.set()
                return
        if self._queue.admit([encode_event(e) for e in events]) >= self.size:
            self._wake.set()

    async def flush(self) -> None:
        """See `Batcher.flush`."""
        await self._flush(whole=False)

    async def _flush(self, whole: bool) -> None:
        async with self._sending:
            try:
                while batch := self._queue.head(self.size, whole):
                    self._queue.answered(len(batch), await self._deliver(batch))
                if self.spool is not None:
                    self._spooled = 0
                    await self._drain(self.spool)
            except Exception as exc:
                self._queue.failed(exc)
                raise
            self._queue.succeeded()

    async def _deliver(self, batch: list[bytes]) -> Delivery:
        posts = split_posts(batch)
        part = next(posts)
        while True:
            try:
                answer: IngestReport | ApiError = await self.client.post_ndjson(part)
            except ApiError as exc:
                if not exc.refused_batch:
                    raise
                answer = exc
            try:
                part = posts.send(answer)
            except StopIteration as done:
                delivery: Delivery = done.value
                return delivery

    async def _drain(self, spool: Spool) -> None:
        # The spool drains with a blocking client: run it in a thread whose posts go
        # through this loop's client.
        bridge = _LoopPoster(self.client, asyncio.get_running_loop())
        try:
            drained = await asyncio.to_thread(
                spool.drain, cast("Client", bridge), batch_size=self.size
            )
        except SpoolBusy:
            return
        self._queue.add_report(drain_report(drained))
        if drained.files_failed:
            self._queue.notify(set_aside(spool, drained))

    async def _run(self) -> None:
        while not self._closing:
            woken = False  # by `size` reached, else the timer
            with contextlib.suppress(TimeoutError):
                woken = await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            if self._closing:
                return  # aclose() flushes
            with contextlib.suppress(Exception):  # kept as last_error; the events stay
                await self._flush(whole=woken)

    async def aclose(self) -> None:
        """Stop the task (its flush in flight finishes: a spool drain runs in a thread that
        cancelling would not stop) and flush; what cannot be sent as `Batcher.close`."""
        if self._task is not None:
            self._closing = True
            self._wake.set()
            await self._task
            self._task = None
        try:
            await self.flush()
        except Exception as exc:
            left = self._queue.take_all()
            if not left:
                return
            if self.spool is not None:
                try:
                    self.spool.put([msgspec.json.decode(line) for line in left])
                    return
                except OSError:
                    pass
            raise BatcherError(left, exc) from exc


class _LoopPoster:
    """`post_ndjson` for a thread, run on the event loop's `AsyncClient`."""

    def __init__(self, client: AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop

    def post_ndjson(self, lines: Sequence[bytes]) -> IngestReport:
        future = asyncio.run_coroutine_threadsafe(self.client.post_ndjson(lines), self.loop)
        return future.result()
