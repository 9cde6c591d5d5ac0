"""The batcher against the real service: durable with a spool (a SIGKILLed producer loses
no event it added), one refused event does not stop the others, and an outage longer than
the retries neither raises in `add` nor loses or doubles an event."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from trainledger.client import (
    AsyncClient,
    Client,
    RetryPolicy,
    ServiceUnreachable,
    Spool,
)

from tests.conftest import TEST_CARD, Api, ServerThread, event

# The batcher is the caller's side: one store is enough (ingest on each store is tested there).
pytestmark = pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)

FAST = RetryPolicy(attempts=30, base=0.01, cap=0.2)
SHORT = RetryPolicy(attempts=2, base=0.01, cap=0.01)  # gives up long before the outage ends
POLLS = 3000  # a bound on waiting (10 ms apart), never an assertion about speed
REPO = Path(__file__).resolve().parents[2]


def counted(client: Client, project: str = "llm") -> int:
    report = client.json("GET", "/v1/costs", params={"project": project, "group_by": "sku"})
    return int(report["total_events"])


def wait_for(condition: object) -> None:
    assert callable(condition)
    for _ in range(POLLS):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("gave up waiting")


def ready(api: Api) -> Client:
    client = Client(api.base_url, api.admin_token, retry=FAST)
    client.request("PUT", "/v1/rate-cards/default", json=TEST_CARD)
    return client


def poisoned() -> list[dict[str, object]]:
    """One event for a project the token does not cover, at the head, then 19 good ones."""
    return [event("p-bad", "1", project="other")] + [event(f"p-{n}", "1") for n in range(19)]


async def test_one_refused_event_does_not_hold_up_the_others(api: Api) -> None:
    limited = await api.token("ingest", ["llm"])
    heard: list[Exception] = []
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        with client.batcher(size=20, interval=3600, on_error=heard.append) as batcher:
            for e in poisoned():
                batcher.add(e)  # raises nothing
        assert counted(admin) == 19
        assert batcher.report.accepted == 19 and batcher.queued == 0
        assert [(r.status, r.event["id"]) for r in batcher.refused] == [(403, "p-bad")]
        assert batcher.refused_total == 1 and batcher.last_error is None
        assert any("1 events refused" in str(e) for e in heard)
        # Set aside for good: a later flush sends nothing again.
        batcher.flush()
        assert batcher.refused_total == 1


async def test_with_a_spool_a_refused_event_goes_to_failed_alone(api: Api, tmp_path: Path) -> None:
    limited = await api.token("ingest", ["llm"])
    spool = Spool(tmp_path / "spool")
    heard: list[Exception] = []
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        with client.batcher(size=20, interval=3600, spool=spool, on_error=heard.append) as b:
            for e in poisoned():
                b.add(e)
        assert counted(admin) == 19 and b.report.accepted == 19
        assert [str(e).split(" spooled")[0] for e in heard] == ["1"]
        assert spool.files() == []
        kept = [p for p in spool.failed.iterdir() if p.name.endswith(".ndjson")]
        assert [json.loads(line)["id"] for p in kept for line in p.read_text().splitlines()] == [
            "p-bad"
        ]


async def test_extend_with_a_spool_sets_aside_only_the_refused_event(
    api: Api, tmp_path: Path
) -> None:
    limited = await api.token("ingest", ["llm"])
    spool = Spool(tmp_path / "spool")
    heard: list[Exception] = []
    with ready(api) as admin, Client(api.base_url, limited, retry=FAST) as client:
        with client.batcher(size=20, interval=3600, spool=spool, on_error=heard.append) as b:
            b.extend(poisoned())  # one spool file of the 20
            assert len(spool.files()) == 1
        assert counted(admin) == 19 and b.report.accepted == 19
        assert [str(e).split(" spooled")[0] for e in heard] == ["1"]
        assert spool.files() == []
        [kept] = [p for p in spool.failed.iterdir() if p.name.endswith(".ndjson")]
        assert [json.loads(line)["id"] for line in kept.read_text().splitlines()] == ["p-bad"]
        assert [(e.kind, e.events) for e in spool.set_aside()] == [("refused", 1)]


CHILD = """
import sys
from trainledger.client import Client, Spool
from tests.conftest import event
url, token, directory = sys.argv[1:4]
client = Client(url, token)
batcher = client.batcher(size=1000, interval=3600, spool=Spool(directory))
for n in range(500):
    print("start", n, flush=True)
    batcher.add(event(f"k-{n}", "1"))
    print("added", n, flush=True)
"""


def test_a_producer_killed_mid_stream_loses_no_event_it_added(api: Api, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, api.base_url, api.admin_token, str(spool.directory)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines = []
    for line in child.stdout:
        lines.append(line.split())
        if len(lines) >= 400:  # 200 added, mid-stream: SIGKILL, as an OOM killer does
            child.send_signal(signal.SIGKILL)
            break
    child.wait()
    lines += [line.split() for line in child.stdout.read().splitlines()]
    assert child.returncode == -signal.SIGKILL
    added = sum(1 for word, _ in lines if word == "added")
    started = sum(1 for word, _ in lines if word == "start")
    assert 200 <= added < 500
    with ready(api) as client:
        flush = subprocess.run(
            [
                *(sys.executable, "-m", "trainledger.cli", "spool", "flush"),
                *("--spool", str(spool.directory), "--url", api.base_url),
                *("--token", api.admin_token),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert flush.returncode == 0, flush.stderr
        total = counted(client)
        again = spool.drain(client)  # nothing left, nothing sent twice
    # Every event whose add() returned is counted, once; the one being added may be too.
    assert added <= total <= started
    assert again.events == 0 and spool.pending() == 0


def test_add_waits_out_an_outage_longer_than_the_retries(api: Api) -> None:
    caller = threading.get_ident()
    posted_from: set[int] = set()
    heard: list[Exception] = []
    with ready(api) as admin:
        admin.json("GET", "/v1/costs", params={"project": "llm"})
    server = ServerThread(api.redis_url)  # a second service on the same store: stopped below
    server.start()
    client = Client(
        server.base_url,
        api.admin_token,
        retry=SHORT,
        on_retry=lambda n, wait, why: posted_from.add(threading.get_ident()),
    )
    with client, client.batcher(size=10, interval=0.05, on_error=heard.append) as batcher:
        batcher.extend(event(f"o-{n}", "1") for n in range(25))
        wait_for(lambda: batcher.queued == 0)
        server.stop()
        for n in range(25, 90):
            batcher.add(event(f"o-{n}", "1"))  # never raises, never posts in this thread
        wait_for(lambda: isinstance(batcher.last_error, ServiceUnreachable))
        assert batcher.queued > 0 and heard and caller not in posted_from
        server = ServerThread(api.redis_url, port=server.port)
        server.start()
        wait_for(lambda: batcher.queued == 0)
        batcher.extend(event(f"o-{n}", "1") for n in range(80, 100))  # 10 sent twice
    try:
        assert batcher.last_error is None
        with Client(server.base_url, api.admin_token, retry=FAST) as reader:
            assert counted(reader) == 100
        assert batcher.report.accepted == 100 and batcher.report.duplicates == 10
    finally:
        server.stop()


async def test_async_batcher_writes_through_and_sets_aside(api: Api, tmp_path: Path) -> None:
    limited = await api.token("ingest", ["llm"])
    spool = Spool(tmp_path / "spool")
    with ready(api) as admin:
        async with AsyncClient(api.base_url, limited, retry=FAST) as client:
            async with client.batcher(size=20, interval=3600, spool=spool) as spooled:
                await spooled.add(event("a-s-0", "1"))
                assert spool.pending() == 1  # durable before add returned
            async with client.batcher(size=20, interval=3600) as batcher:
                await batcher.extend(poisoned())
        assert counted(admin) == 20
        assert [r.event["id"] for r in batcher.refused] == ["p-bad"]
        assert spool.pending() == 0
