"""The synchronous client: `Client` (requests with the retry policy, `post_events`) and
`Batcher` (collects events, flushes on size and on time, from a background thread)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
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

if TYPE_CHECKING:
    from .spool import DrainReport, Spool

DEFAULT_BATCH = 5_000
# A hook that learns of each retry (attempt number, the wait, the status or the error).
OnRetry = Callable[[int, float, "int | Exception"], None]


class Client:
    """A client for one trainledger service. Every request retries connection errors,
    timeouts, 429 and 5xx with `retry` (backoff with full jitter, Retry-After honoured);
    any other 4xx/5xx raises `ApiError`. Use it as a context manager, or `close()` it."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        on_retry: OnRetry | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            follow_redirects=False,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests -----------------------------------------------------------------------

    def _wait(self, retry: int, cause: int | Exception, response: httpx.Response | None) -> None:
        after = retry_after_seconds(response.headers.get("retry-after")) if response else None
        delay = self.retry.delay(retry, after, self._rng)
        if self.on_retry is not None:
            self.on_retry(retry + 1, delay, cause)
        self._sleep(delay)

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The answer to a request, retried under the policy; the last answer (any status)
        once retrying is over; raises the transport error when the last try had no answer."""
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                response = self.http.request(method, path, **kwargs)
            except Exception as exc:
                if last or not retryable_error(exc):
                    raise
                self._wait(retry, exc, None)
                continue
            if last or not retryable_status(response.status_code):
                return response
            self._wait(retry, response.status_code, response)
        raise AssertionError("unreachable")  # pragma: no cover

    def request(
        self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        """`send`, raising ApiError for a 4xx/5xx answer unless its status is in `ok`."""
        response = self.send(method, path, **kwargs)
        if response.status_code >= 400 and response.status_code not in ok:
            raise ApiError(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    @contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """A streamed answer; opening it retries like any request (not once it streams)."""
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                with self.http.stream(method, path, **kwargs) as response:
                    if not last and retryable_status(response.status_code):
                        response.read()
                        cause: int | Exception = response.status_code
                    else:
                        if response.status_code >= 400:
                            response.read()
                            raise ApiError(response)
                        yield response
                        return
            except httpx.TransportError as exc:
                if last or not retryable_error(exc):
                    raise
                self._wait(retry, exc, None)
                continue
            self._wait(retry, cause, response)

    # --- events -------------------------------------------------------------------------

    def post_ndjson(self, lines: Sequence[bytes]) -> IngestReport:
        """Post events already encoded as JSON (one a line) as one batch."""
        response = self.send(
            "POST", "/v1/events", content=ndjson(lines), headers={"Content-Type": NDJSON}
        )
        if response.status_code in (200, 422):
            report = read_report(response.content)
            if report is not None:  # 422 with a report: every event rejected
                return report
        raise ApiError(response)

    def post_events(
        self, events: Event | Iterable[Event], *, batch_size: int = DEFAULT_BATCH
    ) -> IngestReport:
        """Post one event or many (in batches of `batch_size`); one report for all of them,
        rejected events indexed from the first event given."""
        many = event_list(events)
        total = IngestReport(accepted=0, duplicates=0)
        for first in range(0, len(many), batch_size):
            lines = [encode_event(e) for e in many[first : first + batch_size]]
            total.add(self.post_ndjson(lines), first)
        return total

    def batcher(
        self, *, size: int = 1_000, interval: float = 5.0, spool: Spool | None = None
    ) -> Batcher:
        """A `Batcher` posting through this client (see there)."""
        return Batcher(self, size=size, interval=interval, spool=spool)

    def drain(self, spool: Spool, *, batch_size: int = DEFAULT_BATCH) -> DrainReport:
        """Send what `spool` holds (`Spool.drain`)."""
        return spool.drain(self, batch_size=batch_size)


class Batcher:
    """Collects events and posts them in batches: when `size` are waiting, and every
    `interval` seconds from a background thread. `flush()` posts everything waiting now;
    `close()` (or leaving the `with` block) stops the thread and flushes.

    Nothing is lost: events stay queued until the service answered for them; when a flush
    gives up (the service unreachable past the client's retries) they stay queued for the
    next one, and at `close()` they go to `spool` when one is given (else `close` raises
    `BatcherError` holding them)."""

    def __init__(
        self, client: Client, *, size: int = 1_000, interval: float = 5.0, spool: Spool | None
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
        self._lock = threading.Lock()  # guards _queue and report
        self._sending = threading.Lock()  # one post at a time, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="trainledger-batcher", daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._queue)

    def add(self, event: Event) -> None:
        """Queue one event; posts a batch now when `size` are waiting."""
        line = encode_event(event)
        with self._lock:
            self._queue.append(line)
            full = len(self._queue) >= self.size
        if full:
            self.flush()

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.add(event)

    def flush(self) -> None:
        """Post everything waiting, `size` at a time. Raises what the client raised when
        the service cannot take them now (they stay queued)."""
        with self._sending:
            while True:
                with self._lock:
                    batch = self._queue[: self.size]
                if not batch:
                    return
                report = self.client.post_ndjson(batch)
                with self._lock:
                    del self._queue[: len(batch)]
                    self.report.add(report, 0)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
                self.last_error = None
            except Exception as exc:  # kept for close(); the events stay queued
                self.last_error = exc

    def close(self) -> None:
        """Stop the timer and flush; what cannot be sent goes to the spool (or raises)."""
        self._stop.set()
        self._thread.join()
        try:
            self.flush()
        except Exception as exc:
            with self._lock:
                left, self._queue = self._queue, []
            if self.spool is None:
                raise BatcherError(left, exc) from exc
            import msgspec

            self.spool.put([msgspec.json.decode(line) for line in left])


class BatcherError(Exception):
    """`Batcher.close` could not send these events (JSON lines) and had no spool for them."""

    def __init__(self, lines: list[bytes], cause: Exception) -> None:
        super().__init__(f"{len(lines)} events not sent: {cause}")
        self.lines = lines
