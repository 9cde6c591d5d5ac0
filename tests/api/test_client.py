"""trainledger.client against the real service: posts, batches, the spool, retries."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from trainledger.client import (
    AsyncClient,
    Client,
    ClientError,
    EventIn,
    RetryPolicy,
    ServiceUnreachable,
    Spool,
    event_id,
)
from trainledger.config import Settings

from tests.conftest import TEST_CARD, Api, ServerThread, event, free_port, make_admin_token

FAST = RetryPolicy(attempts=30, base=0.01, cap=0.2)
POLLS = 2000  # a bound on waiting for the batcher's timer, never an assertion about speed


def counted(client: Client, project: str = "llm") -> int:
    report = client.json("GET", "/v1/costs", params={"project": project, "group_by": "sku"})
    return int(report["total_events"])


def ready(api: Api) -> Client:
    client = Client(api.base_url, api.admin_token, retry=FAST)
    client.request("PUT", "/v1/rate-cards/default", json=TEST_CARD)
    return client


async def test_post_one_or_many_typed_or_plain(api: Api) -> None:
    with ready(api) as client:
        hour_ago = datetime.now(UTC) - timedelta(hours=1)
        typed = EventIn(
            id=event_id("job", 1),
            time=hour_ago,
            project="llm",
            sku="gpu.h100.hour",
            quantity=Decimal("2.5"),
        )
        one = client.post_events(typed)
        assert (one.accepted, one.duplicates, one.rejected) == (1, 0, [])
        many = [event(f"e-{n}", "1") for n in range(7)] + [event("bad", "1", sku="no.such")]
        report = client.post_events(many, batch_size=3)
        assert (report.accepted, report.duplicates) == (7, 0)
        # Indexed from the first event given, across batches.
        assert [(r.index, r.id) for r in report.rejected] == [(7, "bad")]
        again = client.post_events([typed, *many[:7]])
        assert (again.accepted, again.duplicates) == (0, 8)
        assert counted(client) == 8


async def test_batcher_flushes_on_size_on_time_and_on_close(api: Api) -> None:
    with ready(api) as client:
        with client.batcher(size=4, interval=3600) as batcher:
            batcher.extend(event(f"s-{n}", "1") for n in range(9))
            # Two full batches go from the batcher's thread (add never posts); one waits.
            for _ in range(POLLS):
                if batcher.waiting == 1:
                    break
                time.sleep(0.01)
            assert batcher.waiting == 1
            assert counted(client) == 8
        assert counted(client) == 9  # close sent the last one
        assert batcher.report.accepted == 9

        with client.batcher(size=1000, interval=0.05) as timed:
            timed.extend(event(f"t-{n}", "1") for n in range(3))
            for _ in range(POLLS):
                if timed.waiting == 0:
                    break
                time.sleep(0.01)
            assert timed.waiting == 0  # the timer sent them, not the size
            assert counted(client) == 12


async def test_batcher_close_spools_what_the_service_cannot_take(api: Api, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    down = Client(f"http://127.0.0.1:{free_port()}", api.admin_token, retry=RetryPolicy(2, 0.0))
    with down, down.batcher(size=100, interval=3600, spool=spool) as batcher:
        batcher.extend(event(f"k-{n}", "1") for n in range(5))
    assert spool.pending() == 5
    with ready(api) as client:
        drained = spool.drain(client)
        assert (drained.accepted, drained.files_sent) == (5, 1)  # extend: one file
        assert spool.pending() == 0
        assert counted(client) == 5


async def test_drain_sends_everything_and_sets_aside_a_refused_file(
    api: Api, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    for n in range(5):
        spool.put([event(f"d-{n}-{k}", "1") for k in range(3)])
    spool.put([event("x-1", "1", project="other")])  # a project the token may not reach
    spool.put([event("d-0-0", "1")])  # already in the spool: counted once
    limited = await api.token("ingest", ["llm"])
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        report = spool.drain(client, batch_size=4)
        assert (report.accepted, report.duplicates, report.files_failed) == (15, 1, 1)
        assert spool.files() == []
        failed = sorted(p.name for p in spool.failed.iterdir())
        assert len(failed) == 2  # the file and the service's answer beside it
        problem = json.loads((spool.failed / failed[1]).read_text())
        assert problem["status"] == 403
        assert counted(admin) == 15


async def test_429s_are_retried_until_every_event_is_counted(clean_redis: str) -> None:
    settings = Settings(redis_url=clean_redis, rate_limit_per_second=3)
    server = await asyncio.to_thread(lambda: ServerThread(clean_redis, settings).start())
    token = await make_admin_token(clean_redis)
    statuses: list[int | Exception] = []
    try:
        client = Client(
            server.base_url, token, retry=FAST, on_retry=lambda n, wait, why: statuses.append(why)
        )
        with client:
            client.request("PUT", "/v1/rate-cards/default", json=TEST_CARD)
            report = client.post_events([event(f"r-{n}", "1") for n in range(24)], batch_size=2)
            assert (report.accepted, report.duplicates) == (24, 0)
            assert 429 in statuses
            assert counted(client) == 24
    finally:
        await asyncio.to_thread(server.stop)


def test_connect_errors_are_retried_then_raised() -> None:
    waits: list[float] = []
    client = Client(
        f"http://127.0.0.1:{free_port()}",
        "tl_unused",
        retry=RetryPolicy(attempts=4, base=0.01, cap=0.01),
        sleep=waits.append,
    )
    with client, pytest.raises(ServiceUnreachable) as raised:
        client.post_events(event("c-1", "1"))
    assert len(waits) == 3  # four tries, three waits between them
    # A trainledger error, which code catching httpx's still catches; httpx's is the cause.
    assert isinstance(raised.value, ClientError) and isinstance(raised.value, httpx.HTTPError)
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert raised.value.attempts == 4


async def test_async_client_and_batcher(api: Api) -> None:
    async with AsyncClient(api.base_url, api.admin_token, retry=FAST) as client:
        await client.request("PUT", "/v1/rate-cards/default", json=TEST_CARD)
        one = await client.post_events(event("a-0", "1"))
        assert one.accepted == 1
        async with client.batcher(size=3, interval=3600) as batcher:
            await batcher.extend(event(f"a-{n}", "1") for n in range(1, 8))
            for _ in range(POLLS):  # full batches go from the batcher's task
                if batcher.waiting == 1:
                    break
                await asyncio.sleep(0.01)
            assert batcher.waiting == 1
        assert batcher.report.accepted == 7
        report = await client.json("GET", "/v1/costs", params={"project": "llm"})
        assert report["total_events"] == 8
