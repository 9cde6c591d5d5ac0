"""The batcher's own rules, no service needed: splitting a refused batch down to the events
refused, the bounded queue, `add` never raising a transport error, write-through to a spool."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.client import (
    ApiError,
    AsyncClient,
    BatcherError,
    BatcherFull,
    Client,
    ClientError,
    IngestReport,
    RetryPolicy,
    ServiceUnreachable,
    Spool,
)
from trainledger.client.batching import deliver

POLLS = 2000  # a bound on waiting for the batcher's thread, never an assertion about speed


def refusal(status: int = 403) -> ApiError:
    return ApiError(httpx.Response(status, json={"status": status, "detail": "not yours"}))


def forbidden(index: int) -> ApiError:
    """The service's 403 for an event outside the token's projects: it names the event."""
    body = {
        "status": 403,
        "detail": f"this token may not write to project (event {index})",
        "errors": [{"field": f"$[{index}].project", "reason": "outside the token's projects"}],
    }
    return ApiError(httpx.Response(403, json=body))


@given(n=st.integers(1, 200), data=st.data())
def test_a_refused_batch_is_split_down_to_the_events_refused(n: int, data: st.DataObject) -> None:
    projects = data.draw(st.lists(st.sampled_from("okxy"), min_size=n, max_size=n))
    lines = [f'{{"id":"e{i}","project":"{p}"}}'.encode() for i, p in enumerate(projects)]
    # Refused for a project outside the token's (x, y), or for what the refusal does not
    # name (bad): the service checks the projects first and names the first event outside.
    outside = set(data.draw(st.lists(st.sampled_from("xy"), unique=True)))
    bad = set(data.draw(st.lists(st.integers(0, n - 1), max_size=4)))
    names = data.draw(st.booleans())  # an older service: a 403 naming no event
    refused = sorted(bad | {i for i, p in enumerate(projects) if p in outside})
    # The spool's drain hands over the refusal it already had for the whole batch.
    known = bool(refused) and data.draw(st.booleans())
    accepted: list[bytes] = []
    posted: list[int] = []

    def answer(part: Sequence[bytes]) -> ApiError | None:
        indexes = [lines.index(line) for line in part]
        for at, i in enumerate(indexes):
            if projects[i] in outside:
                return forbidden(at) if names else refusal()
        # The service refuses a body as a whole when any of its events is refused.
        return refusal(400) if any(i in bad for i in indexes) else None

    def post(part: Sequence[bytes]) -> IngestReport:
        posted.append(len(part))
        if (refused_as_a_whole := answer(part)) is not None:
            raise refused_as_a_whole
        accepted.extend(part)
        return IngestReport(accepted=len(part), duplicates=0)

    delivery = deliver(post, lines, answer(lines) if known else None)
    assert accepted == [line for i, line in enumerate(lines) if i not in refused]  # once, in order
    assert [r.line for r in delivery.refused] == [lines[i] for i in refused]
    assert {r.status for r in delivery.refused} <= {400, 403}
    assert delivery.report.accepted == n - len(refused)
    assert not known or n not in posted  # what was refused already is not posted again
    # Each refused event costs at most two posts a level: never one post per event.
    count = len(posted) + known
    assert count <= 1 + 2 * len(refused) * math.ceil(math.log2(n) + 1)
    if names and not bad:  # a project outside the token's costs one post, however many events
        assert count <= 1 + len(outside)


def test_a_failure_that_is_not_a_refusal_stops_the_delivery() -> None:
    def post(part: Sequence[bytes]) -> IngestReport:
        raise ApiError(httpx.Response(503, json={"status": 503, "detail": "busy"}))

    with pytest.raises(ApiError) as raised:
        deliver(post, [b'{"id":"a"}', b'{"id":"b"}'], refusal())
    assert raised.value.status == 503  # raised, not taken for a refused event


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def down() -> Client:
    """A client of a service that is not there, giving up after two quick tries."""
    policy = RetryPolicy(attempts=2, base=0.0, cap=0.0)
    return Client(f"http://127.0.0.1:{closed_port()}", "tl_unused", retry=policy)


def wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(POLLS):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("gave up waiting")


def event(n: int) -> dict[str, str]:
    return {"id": f"u-{n}", "time": "2026-11-20T00:00:00Z", "project": "p", "sku": "s"}


def test_add_never_raises_a_transport_error_and_the_queue_is_bounded() -> None:
    heard: list[Exception] = []
    with down() as client:
        batcher = client.batcher(size=2, interval=0.01, max_queued=5, on_error=heard.append)
        for n in range(5):
            batcher.add(event(n))  # the thread's flushes fail; add does not
        wait_for(lambda: isinstance(batcher.last_error, ServiceUnreachable))
        assert batcher.queued == 5 and heard
        assert all(isinstance(e, ClientError) for e in heard)
        with pytest.raises(BatcherFull) as full:
            batcher.add(event(5))  # nothing dropped silently: the caller has it back
        assert (
            full.value.line == b'{"id":"u-5","time":"2026-11-20T00:00:00Z","project":"p","sku":"s"}'
        )
        with pytest.raises(ServiceUnreachable):
            batcher.flush()  # asked for, it says why
        with pytest.raises(BatcherError) as left:
            batcher.close()
        assert len(left.value.lines) == 5 and isinstance(left.value, ClientError)


def test_with_a_spool_add_is_durable_before_it_returns(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    with down() as client:
        batcher = client.batcher(size=100, interval=3600, spool=spool)
        batcher.add(event(0))
        assert spool.pending() == 1  # on disk now: a SIGKILL from here loses nothing
        batcher.extend(event(n) for n in range(1, 251))
        assert spool.pending() == 251 and len(spool.files()) == 4  # 1 + 100 + 100 + 50
        assert batcher.queued == 0
        batcher.close()  # the service is away: they stay in the spool, nothing raised
    assert spool.pending() == 251


def test_a_spool_that_cannot_take_an_event_leaves_it_in_memory(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.new.rmdir()
    spool.new.write_text("not a directory")  # every put fails, as on a broken disk
    with down() as client:
        batcher = client.batcher(size=100, interval=3600, spool=spool)
        batcher.add(event(0))
        assert batcher.queued == 1 and isinstance(batcher.last_error, OSError)
        with pytest.raises(BatcherError) as left:
            batcher.close()  # neither the service nor the spool took it: the caller has it
        assert len(left.value.lines) == 1


async def test_the_async_batcher_waits_out_an_outage_alike() -> None:
    policy = RetryPolicy(attempts=2, base=0.0, cap=0.0)
    heard: list[Exception] = []
    async with AsyncClient(f"http://127.0.0.1:{closed_port()}", "tl", retry=policy) as client:
        batcher = client.batcher(size=2, interval=0.01, max_queued=5, on_error=heard.append)
        await batcher.extend(event(n) for n in range(5))  # the task's flushes fail; add does not
        for _ in range(POLLS):
            if isinstance(batcher.last_error, ServiceUnreachable):
                break
            await asyncio.sleep(0.01)
        assert isinstance(batcher.last_error, ServiceUnreachable) and heard
        with pytest.raises(BatcherFull):
            await batcher.add(event(5))
        with pytest.raises(BatcherError) as left:
            await batcher.aclose()
        assert len(left.value.lines) == 5
