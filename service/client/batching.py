"""What the sync and async batchers share: a bounded queue of encoded events, the state a
caller can watch (queued, last error, refused events), and the rule for a batch the service
refuses as a whole: split it until the refusal names single events, set those aside, send
the rest. No I/O here: `split_posts` says what to post, `deliver` (or the async batcher)
posts it; the batchers and the spool's drain split by this one rule."""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import ApiError, BatcherFull, ClientError
from .models import IngestReport

if TYPE_CHECKING:
    from .spool import Spool

# Memory is the queue when no spool is given: bounded, so an outage of hours makes `add`
# refuse (BatcherFull) rather than grow the caller's process without end.
DEFAULT_MAX_QUEUED = 100_000
# Refused events kept for inspection (the service would refuse them again: they are never
# resent); beyond this the oldest go, and `refused_total` still counts them.
MAX_REFUSED = 1_000
# Called from the batcher's thread (or task) with each error a flush met.
OnError = Callable[[Exception], None]

log = logging.getLogger("trainledger.client")


@dataclass(frozen=True)
class RefusedEvent:
    """One event the service refused on its own (a project the token may not reach, a body
    it cannot read): ``status`` and ``problem`` are its answer; ``line`` the event as JSON."""

    line: bytes
    status: int
    problem: dict[str, Any] | None

    @property
    def event(self) -> Any:
        return msgspec.json.decode(self.line)


@dataclass
class Delivery:
    """What the service said about one batch: its report, and the events it refused."""

    report: IngestReport
    refused: list[RefusedEvent]


# Yields the next part to post; is sent the answer (a report, or the ApiError refusing the
# part as a whole); returns the delivery when every event has its answer.
Posts = Generator[Sequence[bytes], IngestReport | ApiError, Delivery]


def split_posts(lines: Sequence[bytes]) -> Posts:
    """The posts that deliver `lines`: all of them at once, and when that is refused as a
    whole, each half in turn, down to the single events refused (about 2·log₂ n extra posts
    for one bad event among n, where one post an event would take n). A 403 that names an
    event's project (outside the token's projects) refuses at once every event of the part
    with that project, and the rest is posted: a batch all for such a project costs no post
    more, where halving would take 2n."""
    delivery = Delivery(IngestReport(accepted=0, duplicates=0), [])
    refused: list[tuple[int, RefusedEvent]] = []
    parts = [list(range(len(lines)))]  # indexes into `lines`, in order
    while parts:
        part = parts.pop()
        answer = yield [lines[i] for i in part]
        if isinstance(answer, IngestReport):
            delivery.report.add(_renumbered(answer, part), 0)
            continue
        alike = part if len(part) == 1 else _same_project(lines, part, answer)
        if alike:
            refused += [(i, RefusedEvent(lines[i], answer.status, answer.problem)) for i in alike]
            gone = set(alike)
            if rest := [i for i in part if i not in gone]:
                parts.append(rest)
        else:
            middle = len(part) // 2
            parts += [part[middle:], part[:middle]]  # the first half next: order is kept
    delivery.refused = [event for _, event in sorted(refused, key=lambda pair: pair[0])]
    return delivery


class _Project(msgspec.Struct):
    project: str | None = None


# How the service's 403 names an event outside the token's projects (events/routes.py).
_FORBIDDEN = re.compile(r"\$\[(\d+)\]\.project")
_project_of = msgspec.json.Decoder(_Project)


def _project(line: bytes) -> str | None:
    try:
        return _project_of.decode(line).project
    except msgspec.DecodeError:  # not a string: not grouped, the halves find it
        return None


def _same_project(lines: Sequence[bytes], part: list[int], refusal: ApiError) -> list[int]:
    """The events of `part` that `refusal` refuses by their project: when it is a 403 naming
    one event's project, all of that project (the token's projects decide, nothing else in
    them). Else none: the refusal says nothing of any one event."""
    errors = (refusal.problem or {}).get("errors")
    if refusal.status != 403 or not isinstance(errors, list) or not errors:
        return []
    named = (
        _FORBIDDEN.fullmatch(str(errors[0].get("field", "")))
        if isinstance(errors[0], dict)
        else None
    )
    if named is None or int(named[1]) >= len(part):
        return []
    project = _project(lines[part[int(named[1])]])
    if project is None:
        return []
    return [i for i in part if _project(lines[i]) == project]


def _renumbered(report: IngestReport, part: list[int]) -> IngestReport:
    """`report` of the posted `part`, its rejected events numbered as in the whole batch."""
    if not report.rejected:
        return report
    rejected = [
        msgspec.structs.replace(r, index=part[r.index]) if 0 <= r.index < len(part) else r
        for r in report.rejected
    ]
    return msgspec.structs.replace(report, rejected=rejected)


def deliver(
    post: Callable[[Sequence[bytes]], IngestReport],
    lines: Sequence[bytes],
    refusal: ApiError | None = None,
) -> Delivery:
    """Post `lines` through `post` by `split_posts`. `refusal`: the service's answer to all of
    them, when they were already posted together (not posted again). Raises what `post`
    raises that is not a refusal of the body (an outage: nothing is set aside)."""
    posts = split_posts(lines)
    part = next(posts)
    answer: IngestReport | ApiError | None = refusal
    while True:
        if answer is None:
            try:
                answer = post(part)
            except ApiError as exc:
                if not exc.refused_batch:
                    raise
                answer = exc
        try:
            part = posts.send(answer)
        except StopIteration as done:
            delivery: Delivery = done.value
            return delivery
        answer = None


class EventQueue:
    """The batcher's state, guarded by one lock (taken briefly; never across a post)."""

    def __init__(self, max_queued: int, on_error: OnError | None) -> None:
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self.max_queued = max_queued
        self.on_error = on_error
        self.report = IngestReport(accepted=0, duplicates=0)
        self.last_error: Exception | None = None
        self.refused: deque[RefusedEvent] = deque(maxlen=MAX_REFUSED)
        self.refused_total = 0
        self._lines: list[bytes] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._lines)

    def admit(self, lines: Sequence[bytes]) -> int:
        """Queue these (all or none: BatcherFull when they do not fit); the count now queued."""
        with self._lock:
            if len(self._lines) + len(lines) > self.max_queued:
                raise BatcherFull(lines[0], self.max_queued, self.last_error)
            self._lines.extend(lines)
            return len(self._lines)

    def head(self, size: int, whole: bool = False) -> list[bytes]:
        """The next batch to send; with `whole`, only a full one."""
        with self._lock:
            return [] if whole and len(self._lines) < size else self._lines[:size]

    def take_all(self) -> list[bytes]:
        with self._lock:
            left, self._lines = self._lines, []
            return left

    def answered(self, count: int, delivery: Delivery) -> None:
        """The first `count` queued events have their answer: off the queue, into the report."""
        with self._lock:
            del self._lines[:count]
            self.report.add(delivery.report, 0)
            self.refused.extend(delivery.refused)
            self.refused_total += len(delivery.refused)
        for refused in delivery.refused:
            log.warning("event refused by the service (HTTP %d), set aside", refused.status)
        if delivery.refused:
            self.notify(RefusedEvents(delivery.refused))

    def add_report(self, report: IngestReport) -> None:
        with self._lock:
            self.report.add(report, 0)

    def succeeded(self) -> None:
        self.last_error = None

    def failed(self, error: Exception) -> None:
        """A flush gave up (the events stay queued): remember why, and tell the callback."""
        self.last_error = error
        self.notify(error)

    def notify(self, error: Exception) -> None:
        """Tell the callback; a broken callback stops nothing."""
        if self.on_error is not None:
            try:
                self.on_error(error)
            except Exception:
                log.exception("the batcher's on_error callback failed")


class BatcherView:
    """What a caller can watch on either batcher: the answers so far, why the last flush
    gave up, the events set aside, and what is still waiting."""

    _queue: EventQueue
    spool: Spool | None

    @property
    def report(self) -> IngestReport:
        """The service's answers so far (with a spool: for every event the drains sent)."""
        return self._queue.report

    @property
    def last_error(self) -> Exception | None:
        return self._queue.last_error

    @property
    def refused(self) -> list[RefusedEvent]:
        """Events the service refused on their own, kept here when there is no spool."""
        return list(self._queue.refused)

    @property
    def refused_total(self) -> int:
        return self._queue.refused_total

    @property
    def queued(self) -> int:
        """Events in memory, not yet answered for."""
        return len(self._queue)

    @property
    def waiting(self) -> int:
        """Events not yet answered for: in memory, and in the spool when there is one (which
        counts every producer's events in it, and reads its files)."""
        return len(self._queue) + (self.spool.pending() if self.spool is not None else 0)


class RefusedEvents(ClientError):
    """Given to `on_error` (and kept as `last_error`) when events were set aside."""

    def __init__(self, refused: list[RefusedEvent]) -> None:
        statuses = sorted({r.status for r in refused})
        super().__init__(f"{len(refused)} events refused (HTTP {statuses}), set aside")
        self.refused = refused
