"""The synchronous client: `Client` (requests with the retry policy, `post_events`) and
`Batcher` (collects events, flushes on size and on time, from a background thread)."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self

import httpx
import msgspec

from ..events.model import EventIn
from .batching import (
    DEFAULT_MAX_QUEUED,
    BatcherView,
    Delivery,
    EventQueue,
    OnError,
    RefusedEvent,
    deliver,
)
from .errors import ApiError, BatcherError, ClientError, ServiceUnreachable
from .models import (
    NDJSON,
    Event,
    IngestReport,
    RejectedEvent,
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

if TYPE_CHECKING:
    from .spool import DrainReport, Spool

__all__ = ["DEFAULT_BATCH", "Batcher", "BatcherError", "Client", "OnRetry", "RefusedEvent"]

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

    def send(
        self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any
    ) -> httpx.Response:
        """The answer to a request, retried under the policy; the last answer (any status)
        once retrying is over; raises `ServiceUnreachable` when the last try had no answer.
        `idempotent` (default: GET, HEAD, OPTIONS, DELETE) says whether the request may be
        repeated after an unknown outcome (a timeout, a 502); if not, only refusals (429, 503)
        and requests that never left are retried."""
        repeatable = idempotent_method(method) if idempotent is None else idempotent
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                response = self.http.request(method, path, **kwargs)
            except Exception as exc:
                if last or not retryable_error(exc, repeatable):
                    raise unreachable(self.url, exc, retry + 1) from exc
                self._wait(retry, exc, None)
                continue
            if last or not retryable_status(response.status_code, repeatable):
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
        """A streamed answer; opening it retries like any request. Once its body is being
        read a failure is not retried (part of it was consumed): it raises to the caller."""
        response = self._open_stream(method, path, **kwargs)
        try:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response)
            yield response
        finally:
            response.close()

    def _open_stream(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                request = self.http.build_request(method, path, **kwargs)
                response = self.http.send(request, stream=True)
            except Exception as exc:
                if last or not retryable_error(exc):
                    raise unreachable(self.url, exc, retry + 1) from exc
                self._wait(retry, exc, None)
                continue
            if last or not retryable_status(response.status_code):
                return response
            response.read()
            response.close()
            self._wait(retry, response.status_code, response)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- events -------------------------------------------------------------------------

    def post_ndjson(self, lines: Sequence[bytes]) -> IngestReport:
        """Post events already encoded as JSON (one a line) as one batch."""
        # Idempotent by the events' ids: a post repeated after a timeout counts nothing twice.
        response = self.send(
            "POST",
            "/v1/events",
            idempotent=True,
            content=ndjson(lines),
            headers={"Content-Type": NDJSON},
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
        self,
        *,
        size: int = 1_000,
        interval: float = 5.0,
        spool: Spool | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED,
        on_error: OnError | None = None,
    ) -> Batcher:
        """A `Batcher` posting through this client (see there)."""
        return Batcher(
            self,
            size=size,
            interval=interval,
            spool=spool,
            max_queued=max_queued,
            on_error=on_error,
        )

    def drain(self, spool: Spool, *, batch_size: int = DEFAULT_BATCH) -> DrainReport:
        """Send what `spool` holds (`Spool.drain`)."""
        return spool.drain(self, batch_size=batch_size)


def unreachable(url: str, error: Exception, attempts: int) -> Exception:
    """The error to raise once a request had no answer: httpx's transport errors become
    `ServiceUnreachable` (a trainledger error); anything else is a bug, raised as it is."""
    if isinstance(error, httpx.TransportError):
        return ServiceUnreachable(url, error, attempts)
    return error


class Batcher(BatcherView):
    """Collects events and posts them in batches of `size`, from a background thread: as
    soon as `size` are waiting, and every `interval` seconds. `add` never posts, so it never
    waits for the network and never raises a transport error. `flush()` posts what is
    waiting now (and raises when it cannot); `close()` (or leaving the `with` block) stops
    the thread and flushes.

    Nothing is lost. Without a spool, events stay in memory until the service has answered
    for them (at most `max_queued`: beyond, `add` raises `BatcherFull` with the event), and
    `close` raises `BatcherError` holding what it could not send. With `spool`, `add` writes
    the event to the spool before it returns (durable: it survives a SIGKILL of the caller),
    and the thread drains the spool; what is not sent stays there for the next drain (the
    agent's, `spool flush`, or this batcher's). An event the service refuses on its own (a
    403 for a project the token does not cover) is split from the good ones and set aside:
    in the spool's `failed/`, or without a spool in `refused` (the last `MAX_REFUSED`);
    it is never sent again. `last_error` is why the last flush gave up (None once one
    succeeds); `on_error(error)` hears of each failure and refusal, from the thread."""

    def __init__(
        self,
        client: Client,
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
        self._sending = threading.Lock()  # one flush at a time, in order
        self._spooled = 0  # events put since the last drain
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainledger-batcher", daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- adding ---------------------------------------------------------------------------

    def add(self, event: Event) -> None:
        """Keep one event: in the spool (durable when this returns) when there is one, else
        in memory. Never posts; raises only `BatcherFull` (memory at its bound) and
        `ValueError` (the spool refuses an event without an id)."""
        self._keep([event])

    def extend(self, events: Iterable[Event]) -> None:
        """`add` for many: with a spool, one file for each `size` of them (one fsync each)."""
        many = list(events)
        for first in range(0, len(many), self.size):
            self._keep(many[first : first + self.size])

    def _keep(self, events: Sequence[Event]) -> None:
        if not events:
            return
        if self.spool is not None:
            try:
                self.spool.put([as_mapping(e) for e in events])
            except OSError as exc:  # a full disk, permissions: keep them in memory instead
                self._queue.failed(exc)
            else:
                self._spooled += len(events)  # a hint for the thread: no lock needed
                if self._spooled >= self.size:
                    self._wake.set()
                return
        queued = self._queue.admit([encode_event(e) for e in events])
        if queued >= self.size:
            self._wake.set()

    # --- sending --------------------------------------------------------------------------

    def flush(self) -> None:
        """Post everything waiting now, `size` at a time, and drain the spool (unless another
        drainer has it). Raises `ServiceUnreachable` or `ApiError` when the service cannot
        take them now: they stay queued (or spooled) for the next flush."""
        self._flush(whole=False)

    def _flush(self, whole: bool) -> None:
        """With `whole`, only full batches (`size` reached: the rest waits for the timer)."""
        with self._sending:
            try:
                while batch := self._queue.head(self.size, whole):
                    self._queue.answered(len(batch), self._deliver(batch))
                if self.spool is not None:
                    self._spooled = 0
                    self._drain(self.spool)
            except Exception as exc:
                self._queue.failed(exc)
                raise
            self._queue.succeeded()

    def _deliver(self, batch: list[bytes]) -> Delivery:
        return deliver(self.client.post_ndjson, batch)

    def _drain(self, spool: Spool) -> None:
        try:
            drained = spool.drain(self.client, batch_size=self.size)
        except SpoolBusy:  # an agent is draining it: the events are in good hands
            return
        self._queue.add_report(drain_report(drained))
        if drained.files_failed:
            self._queue.notify(set_aside(spool, drained))

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.interval)  # by `size` reached, else the timer
            self._wake.clear()
            if self._stop.is_set():
                return  # close() flushes
            with contextlib.suppress(Exception):  # kept as last_error; the events stay
                self._flush(whole=woken)

    def close(self) -> None:
        """Stop the thread and flush. What cannot be sent: with a spool, it stays there (or
        goes there from memory); without one, `BatcherError` holds it."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        try:
            self.flush()
        except Exception as exc:
            left = self._queue.take_all()
            if not left:
                return  # all in the spool, for the next drain
            if self.spool is not None:
                try:
                    self.spool.put([msgspec.json.decode(line) for line in left])
                    return
                except OSError:
                    pass
            raise BatcherError(left, exc) from exc


def drain_report(drained: DrainReport) -> IngestReport:
    """A spool drain's answers as an ingest report."""
    rejected = msgspec.convert(drained.rejected, list[RejectedEvent])
    return IngestReport(accepted=drained.accepted, duplicates=drained.duplicates, rejected=rejected)


def set_aside(spool: Spool, drained: DrainReport) -> ClientError:
    """What `on_error` hears when a drain set spooled files aside."""
    return ClientError(
        f"{drained.events_refused} spooled events refused by the service, set aside in "
        f"{spool.failed} (the other events of their files were sent)"
    )


def as_mapping(event: Event) -> Any:
    """An event as the spool takes it: a mapping (a typed event's fields as JSON values)."""
    return msgspec.to_builtins(event) if isinstance(event, EventIn) else event
