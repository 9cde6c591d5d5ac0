"""Faults, with nothing lost and nothing counted twice.

Every test here starts `trainledger serve` as a real subprocess and breaks something real
under a sustained load: the service is SIGKILLed mid-request, its Valkey is SIGKILLed and
restarted on its append-only file, a webhook receiver is down, then slower than the send
timeout, then failing, and several service processes ingest one project at once. The client
retries every batch that got no 2xx answer (connection errors included), as a real exporter
does; the expected totals are computed here, independently, from the rate card and the
distinct events sent, with `Decimal`, and compared with `/v1/costs`, the project's counters,
the event log (the FOCUS export streams it; a rebuild prices it again), and the alerts.

Gaps these fill beside tests/system/test_restart.py (a clean SIGTERM restart, a Valkey killed
after the writes), tests/api/test_webhooks.py (receivers in-process) and
tests/system/test_workers.py.
No wall-clock assertions: waiting is bounded polling; order is shown with events.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from trainledger.config import as_variables, delivery_settings
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.stores import Stores
from trainledger.webhooks.delivery.config import DeliveryConfig

from tests.api.test_budgets import this_month
from tests.conftest import (
    TEST_CARD,
    TEST_SECRET_KEY,
    event,
    free_port,
    make_admin_token,
    wait_until_ready,
)

REPO = Path(__file__).resolve().parents[2]
POLL_INTERVAL = 0.05
MAX_POLLS = 1200  # a bound on waiting (about a minute), never an assertion about speed
MAX_SENDS = 400  # attempts per batch before the client gives up (about 20 s of retrying)
EPOCH_START, FAR_FUTURE = "2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z"  # the whole log
RETRY_PAUSE = 0.05  # the test client's pause between retries (it does not sleep Retry-After)
ANSWER_GRACE = 1.0  # how long a frozen service's last answers get to reach the client

# Quick webhook retries for a test; the lease must exceed the timeout (DeliveryConfig checks).
FAST_DELIVERY = DeliveryConfig(
    max_attempts=10_000,  # never a dead letter here: every alert must get through
    base_delay_s=0.05,
    max_delay_s=0.3,
    lease_s=6.0,
    poll_s=0.05,
    claim_idle_s=1.0,
    # The "slow" receiver below holds requests longer than this; a 200 answered at once must
    # never miss it (that would be a second, legitimate, delivery of the same alert).
    timeout_s=3.0,
)

pytestmark = pytest.mark.slow
# The webhook and multi-process tests fault nothing in Redis: one backend (the embedded
# Valkey) keeps the file within its time budget; the SIGKILL test runs on every backend.
ONE_BACKEND = pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)


# --- the service as a subprocess ------------------------------------------------------------


class Service:
    """`python -m trainledger.cli serve` on an external Redis, as a subprocess the test can kill.

    The port is kept across restarts, so the client goes on posting to the same address."""

    def __init__(
        self,
        redis_url: str,
        data_dir: Path,
        log: Path,
        workers: int = 1,
        delivery: DeliveryConfig | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.data_dir = data_dir
        self.log_path = log
        self.workers = workers
        self.delivery = delivery or FAST_DELIVERY
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
        env.update(as_variables(**delivery_settings(self.delivery)))
        env["TRAINLEDGER_REDIS_URL"] = self.redis_url
        env["TRAINLEDGER_SECRET_KEY"] = TEST_SECRET_KEY  # an external Redis needs one given
        env["TRAINLEDGER_DATA_DIR"] = str(self.data_dir)
        env["TRAINLEDGER_PUBLIC_URL"] = self.base_url
        # Webhook targets on loopback are refused unless allowed (the SSRF allow-list).
        env["TRAINLEDGER_WEBHOOK_ALLOWLIST"] = "127.0.0.1"
        return env

    def start(self) -> Service:
        """Start and wait until /readyz answers 200 (blocking: call it in a thread)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainledger.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(self.workers),
                    "--log-level",
                    "warning",
                ],
                cwd=REPO,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_ready(self.proc, self.base_url, self.log)
        return self

    def sigkill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "not running"
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM (uvicorn's supervisor takes its workers down with it), SIGKILL if ignored."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """A factory of `Service`s (not started); whatever still runs at the end is stopped."""
    made: list[Service] = []

    def make(redis_url: str, **kw: Any) -> Service:
        s = Service(
            redis_url, tmp_path / f"data-{len(made)}", tmp_path / f"serve-{len(made)}.log", **kw
        )
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A data dir whose unix socket path fits in sun_path (the pytest basetemp may not)."""
    path = Path(tempfile.mkdtemp(prefix="tl-faults-"))
    try:
        yield path / "valkey"
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- the events and their exact expected cost ------------------------------------------------


def card_prices() -> tuple[dict[str, Decimal], dict[str, list[tuple[Decimal | None, Decimal]]]]:
    """Flat unit prices and graduated tiers, read from the test's rate card."""
    flat: dict[str, Decimal] = {}
    tiers: dict[str, list[tuple[Decimal | None, Decimal]]] = {}
    for sku in TEST_CARD["skus"]:  # type: ignore[attr-defined]
        if "tiers" in sku:
            tiers[sku["code"]] = [
                (Decimal(t["up_to"]) if "up_to" in t else None, Decimal(t["unit_price"]))
                for t in sku["tiers"]
            ]
        else:
            flat[sku["code"]] = Decimal(sku["unit_price"])
    return flat, tiers


def graduated(quantity: Decimal, tiers: list[tuple[Decimal | None, Decimal]]) -> Decimal:
    """The cost of a month's cumulative quantity through the tiers. With quantities of at
    most one decimal place no part needs rounding, so the sum over events equals this
    whatever the order in which they were applied."""
    cost, lower = Decimal(0), Decimal(0)
    for up_to, price in tiers:
        upper = quantity if up_to is None else min(quantity, up_to)
        if upper > lower:
            cost += (upper - lower) * price
        if up_to is None or quantity <= up_to:
            break
        lower = up_to
    return cost


SKUS = ["gpu.h100.hour", "storage.hot.gb_day", "network.cross_region.gb", "gpu.h100.reserved.hour"]


def fault_event(n: int, project: str, when: str) -> dict[str, object]:
    """Event number `n`: always the same body for the same n (a retry resends it verbatim)."""
    sku = SKUS[n % 4]
    quantity = {
        "gpu.h100.hour": f"{n % 7 + 1}.25",
        "storage.hot.gb_day": f"{n % 13}.5",
        "network.cross_region.gb": str(n % 5 + 1),
        "gpu.h100.reserved.hour": f"{n % 3 + 1}.5",
    }[sku]
    stage = ("pretrain", "data_prep", "eval")[n % 3]
    return event(f"ev-{n}", quantity, sku=sku, project=project, time=when, stage=stage)


@dataclass
class Workload:
    """Batches whose id ranges overlap (the tail of each is the head of the next), and what
    the distinct events among them must cost."""

    project: str
    batches: list[list[dict[str, object]]]
    distinct: dict[str, dict[str, object]]

    @classmethod
    def make(cls, project: str, count: int, size: int, step: int) -> Workload:
        assert step < size, "batches must overlap"
        when = this_month()
        batches = [
            [fault_event(n, project, when) for n in range(i * step, i * step + size)]
            for i in range(count)
        ]
        distinct = {str(e["id"]): e for b in batches for e in b}
        return cls(project, batches, distinct)

    def cost_by_sku(self) -> dict[str, Decimal]:
        flat, tiers = card_prices()
        quantity: Counter[str] = Counter()
        for e in self.distinct.values():
            quantity[str(e["sku"])] += Decimal(str(e["quantity"]))  # type: ignore[assignment]
        return {
            sku: graduated(q, tiers[sku]) if sku in tiers else q * flat[sku]
            for sku, q in quantity.items()
        }

    def total(self) -> Decimal:
        return sum(self.cost_by_sku().values(), Decimal(0))

    def events_by_sku(self) -> Counter[str]:
        return Counter(str(e["sku"]) for e in self.distinct.values())


# --- a client that retries until acknowledged ------------------------------------------------


@dataclass
class Tally:
    """What the retrying client saw."""

    acked: int = 0
    accepted: int = 0
    duplicates: int = 0
    in_flight: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # transport error type or status
    unavailable: list[httpx.Response] = field(default_factory=list)  # the 503 answers


async def post_until_acked(
    base_url: str, token: str, batches: list[list[dict[str, object]]], tally: Tally, clients: int
) -> None:
    """`clients` concurrent senders take batches from one queue; each batch is sent again
    until it gets a 2xx answer. A 4xx other than 408/429 is a failure of the test."""
    queue: asyncio.Queue[list[dict[str, object]]] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)

    async def sender() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as c:
            while not queue.empty():
                batch = queue.get_nowait()
                for _ in range(MAX_SENDS):
                    tally.in_flight += 1
                    try:
                        r = await c.post("/v1/events", json=batch)
                    except httpx.TransportError as exc:
                        tally.errors[type(exc).__name__] += 1
                    else:
                        if 200 <= r.status_code < 300:
                            body = r.json()
                            assert body["rejected"] == [], body
                            tally.acked += 1
                            tally.accepted += body["accepted"]
                            tally.duplicates += body["duplicates"]
                            break
                        tally.errors[str(r.status_code)] += 1
                        if r.status_code == 503:
                            tally.unavailable.append(r)
                        elif r.status_code < 500 and r.status_code not in (408, 429):
                            raise AssertionError(f"not retryable: {r.status_code} {r.text}")
                    finally:
                        tally.in_flight -= 1
                    await asyncio.sleep(RETRY_PAUSE)
                else:
                    raise AssertionError(f"a batch was never acknowledged: {tally}")

    await asyncio.gather(*(sender() for _ in range(clients)))


async def wait_for(check: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    for _ in range(MAX_POLLS):
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        await asyncio.sleep(POLL_INTERVAL)
    raise AssertionError(f"gave up waiting: {what}")


# --- checking the totals every way they can be read ------------------------------------------


def money(value: str) -> Decimal:
    return Decimal(value)


async def assert_exact(base_url: str, token: str, work: Workload) -> None:
    """/v1/costs, the project's counters, the event log (the FOCUS export streams it) and a
    rebuild from that log all agree with the independently computed figures."""
    expected_by_sku = work.cost_by_sku()
    expected_total = work.total()
    project = work.project
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as c:
        r = await c.get("/v1/costs", params={"project": project, "group_by": "sku"})
        assert r.status_code == 200, r.text
        costs = r.json()
        assert money(costs["total_cost"]) == expected_total
        assert costs["total_events"] == len(work.distinct)
        rows = {row["key"]["sku"]: row for row in costs["rows"]}
        assert {k: money(v["cost"]) for k, v in rows.items()} == expected_by_sku
        assert {k: v["events"] for k, v in rows.items()} == dict(work.events_by_sku())

        meta = (await c.get(f"/v1/projects/{project}")).json()
        assert meta["accepted_events"] == len(work.distinct), meta

        # The log: every distinct event exactly once, and nothing else.
        flat, _ = card_prices()
        r = await c.get(
            "/v1/export/focus",
            params={
                "project": project,
                "from": "2000-01-01T00:00:00Z",
                "to": "2100-01-01T00:00:00Z",
            },
        )
        assert r.status_code == 200, r.text[:500]
        exported = list(csv.DictReader(io.StringIO(r.text)))
        per_event: dict[str, Decimal] = {}
        rows_per_event: Counter[str] = Counter()
        for row in exported:
            per_event[row["x_EventId"]] = per_event.get(row["x_EventId"], Decimal(0)) + money(
                row["BilledCost"]
            )
            rows_per_event[row["x_EventId"]] += 1
        assert per_event.keys() == work.distinct.keys()
        assert sum(per_event.values(), Decimal(0)) == expected_total
        for event_id, e in work.distinct.items():
            sku = str(e["sku"])
            if sku in flat:  # one row, at the flat price: a doubled log entry would show here
                assert rows_per_event[event_id] == 1
                assert per_event[event_id] == Decimal(str(e["quantity"])) * flat[sku]
            else:  # a tiered event crosses at most one boundary (its quantity is below 13)
                assert rows_per_event[event_id] <= 2

        # Pricing the log again reproduces the kept totals exactly.
        r = await c.post(f"/v1/projects/{project}/rebuild")
        assert r.status_code == 200, r.text
        rebuilt = r.json()
        assert rebuilt["events"] == len(work.distinct)
        assert not rebuilt["changed"], rebuilt
        assert money(rebuilt["cost_after"]) == expected_total


async def put_card(base_url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text


def kill_between_apply_and_answer(
    svc: Service, redis_url: str, project: str, tally: Tally, min_acked: int, total: int
) -> int:
    """SIGKILL the service while a batch it applied has not been answered; return how many
    events the store then holds as accepted. Runs in a thread of its own (its own loop).

    Once `min_acked` batches are acknowledged, poll the project's accepted-event counter;
    when it runs ahead of what the client has been acknowledged, freeze the service
    (SIGSTOP: it can send nothing more) and give the client a moment to read any answer
    already on its way. If the counter is still ahead, an applied batch's answer never
    left the process: kill it there. Otherwise let it go on (SIGCONT) and try again."""
    assert svc.proc is not None
    pid = svc.proc.pid

    async def watch() -> int:
        store = Stores.from_url(redis_url)

        async def applied() -> int:
            return int((await store.projects.project_meta(project)).get("accepted", 0))

        try:
            for _ in range(1_000_000):
                if tally.acked == total:
                    raise AssertionError("the client finished first: make the workload bigger")
                if tally.acked < min_acked:
                    await asyncio.sleep(0.001)
                    continue
                if await applied() <= tally.accepted:
                    continue
                os.kill(pid, signal.SIGSTOP)
                await asyncio.sleep(ANSWER_GRACE)  # a script already sent runs on; answers land
                now = await applied()
                if now > tally.accepted:
                    svc.sigkill()  # SIGKILL ends a stopped process too
                    return now
                os.kill(pid, signal.SIGCONT)
            raise AssertionError("never caught a batch between its apply and its answer")
        finally:
            await store.close()

    return asyncio.run(watch())


# --- 1. the service SIGKILLed mid-request ----------------------------------------------------


async def test_service_sigkilled_mid_ingest_loses_nothing_and_counts_nothing_twice(
    clean_redis: str, services: Callable[..., Service]
) -> None:
    token = await make_admin_token(clean_redis)
    svc = await asyncio.to_thread(services(clean_redis).start)
    await put_card(svc.base_url, token)
    work = Workload.make("kill9", count=36, size=200, step=150)  # 5,450 distinct events
    tally = Tally()
    client = asyncio.create_task(post_until_acked(svc.base_url, token, work.batches, tally, 3))

    # Kill once a third is acknowledged, between a batch's apply and its answer.
    applied = await asyncio.to_thread(
        kill_between_apply_and_answer, svc, clean_redis, work.project, tally, 12, len(work.batches)
    )
    assert tally.accepted < applied
    assert not client.done(), "the client finished before the kill: make the workload bigger"
    await wait_for(lambda: sum(tally.errors.values()) > 0, "the client to see the kill")
    await asyncio.to_thread(svc.start)  # the same port: the client just goes on retrying
    await asyncio.wait_for(client, timeout=120)

    assert tally.acked == len(work.batches)
    # Requests were cut off mid-flight (not merely refused while the service was down).
    cut_off = {k for k in tally.errors if k not in ("ConnectError", "ConnectTimeout")}
    assert cut_off, tally.errors
    # A batch the killed process applied was never acknowledged: its retry found duplicates
    # only. So the acknowledged accepted events fall short of the distinct ones, and yet
    # every answer together covers every event sent exactly once.
    assert tally.accepted < len(work.distinct)
    assert tally.accepted + tally.duplicates == sum(len(b) for b in work.batches)
    await assert_exact(svc.base_url, token, work)


# --- 2. Valkey SIGKILLed mid-ingest and restarted on its append-only file ------------------


async def test_valkey_sigkilled_mid_ingest_answers_503_and_recovers_by_itself(
    short_dir: Path, services: Callable[..., Service]
) -> None:
    valkey = EmbeddedValkey(short_dir)  # appendonly yes, appendfsync everysec: the defaults
    url = valkey.start()
    restarted: EmbeddedValkey | None = None
    svc: Service | None = None
    try:
        token = await make_admin_token(url)
        svc = await asyncio.to_thread(services(url).start)
        assert svc.proc is not None
        pid = svc.proc.pid
        await put_card(svc.base_url, token)
        work = Workload.make("valkey9", count=40, size=200, step=150)  # 6,050 distinct events
        tally = Tally()
        client = asyncio.create_task(post_until_acked(svc.base_url, token, work.batches, tally, 3))

        await wait_for(lambda: tally.acked >= 10 or client.done(), "the first acknowledgements")
        assert not client.done(), "the client finished before the kill: make the workload bigger"
        valkey.kill()  # SIGKILL: no shutdown, no flush of anything not yet written
        # While it is down the service answers 503 + Retry-After, and keeps running.
        await wait_for(lambda: len(tally.unavailable) >= 30, "503 answers while Valkey is down")
        assert not client.done()
        restarted = EmbeddedValkey(short_dir)
        assert restarted.start() == url  # the same data dir, socket and append-only file
        await asyncio.wait_for(client, timeout=120)

        # The service was never restarted: it reconnected by itself.
        assert svc.proc.poll() is None and svc.proc.pid == pid
        assert tally.acked == len(work.batches)
        # Every failed answer was a 503 problem document asking to retry; no 500, no hang.
        assert set(tally.errors) == {"503"}, tally.errors
        for r in tally.unavailable:
            assert int(r.headers["retry-after"]) >= 1
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["status"] == 503
        assert tally.accepted + tally.duplicates == sum(len(b) for b in work.batches)
        await assert_exact(svc.base_url, token, work)
    finally:
        if svc is not None:
            await asyncio.to_thread(svc.stop)
        if restarted is not None:
            restarted.stop()
        valkey.stop()


# --- 3. a webhook receiver that is down, then slow, then failing -----------------------------


class Receiver:
    """A webhook receiver: an ASGI app served by uvicorn in the test's own event loop.

    `mode` decides each answer when the request arrives: "ok" answers 200, "fail" 500, and
    "hold" keeps the request open until `release` is set (then answers 500) or until the
    sender hangs up at its timeout (then there is no one to answer; the request is recorded
    in `abandoned`). Every arrival, answer and abandoned request is recorded by webhook-id.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.mode = "ok"
        self.release = asyncio.Event()
        self.arrived = asyncio.Event()
        self.arrivals: list[str] = []
        self.answers: list[tuple[str, str, int]] = []  # (webhook-id, mode, status)
        self.abandoned: list[str] = []
        # Per webhook-id, the alerts its message tells: its own and the lower thresholds of
        # the same budget the same batch crossed (`also_crossed`).
        self.told: dict[str, list[str]] = {}
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        more, body = True, b""
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        webhook_id = headers.get("webhook-id", "")
        also = json.loads(body)["data"]["also_crossed"]
        self.told[webhook_id] = [webhook_id, *(a["id"] for a in also)]
        mode = self.mode
        self.arrivals.append(webhook_id)
        self.arrived.set()
        if mode == "hold":
            # With the body read, the next message is `http.disconnect`: the sender gave up.
            hung_up = asyncio.ensure_future(receive())
            released = asyncio.ensure_future(self.release.wait())
            await asyncio.wait({hung_up, released}, return_when=asyncio.FIRST_COMPLETED)
            released.cancel()
            if hung_up.done():
                self.abandoned.append(webhook_id)
                return
            hung_up.cancel()
        status = 200 if mode == "ok" else 500
        self.answers.append((webhook_id, mode, status))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b"{}"})

    async def start(self) -> None:
        config = uvicorn.Config(
            self, host="127.0.0.1", port=self.port, log_level="error", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        await wait_for(lambda: self._server is not None and self._server.started, "receiver")

    async def stop(self) -> None:
        self.release.set()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, timeout=30)

    def delivered(self) -> Counter[str]:
        """Alerts told by successful deliveries (answered 200), each time one was."""
        return Counter(
            alert
            for webhook_id, _, status in self.answers
            if status == 200
            for alert in self.told[webhook_id]
        )


@contextlib.asynccontextmanager
async def receiving(receiver: Receiver) -> AsyncIterator[Receiver]:
    try:
        yield receiver
    finally:
        await receiver.stop()


class Ledger:
    """The few calls the webhook tests make, with one admin token."""

    def __init__(self, base_url: str, token: str, project: str) -> None:
        self.project = project
        self.client = httpx.AsyncClient(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    async def ingest(self, event_id: str, hours: str) -> None:
        r = await self.client.post(
            "/v1/events",
            json=[event(event_id, hours, project=self.project, time=this_month())],
        )
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text

    async def webhook(self, url: str) -> None:
        r = await self.client.post("/v1/webhooks", json={"url": url, "format": "standard"})
        assert r.status_code == 201, r.text

    async def budget(self, amount: str, thresholds: list[int]) -> str:
        body = {"project": self.project, "name": "faults", "amount": amount}
        r = await self.client.post("/v1/budgets", json={**body, "thresholds": thresholds})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def alerts(self) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/alerts", params={"project": self.project})
        assert r.status_code == 200, r.text
        return list(r.json())

    async def deliveries(self, status: str) -> list[dict[str, Any]]:
        params = {"project": self.project, "status": status, "limit": 1000}
        r = await self.client.get("/v1/webhooks/deliveries", params=params)
        assert r.status_code == 200, r.text
        return list(r.json()["items"])


@ONE_BACKEND
async def test_receiver_down_slow_failing_gets_every_alert_once_and_ingest_goes_on(
    clean_redis: str, services: Callable[..., Service]
) -> None:
    token = await make_admin_token(clean_redis)
    svc = await asyncio.to_thread(services(clean_redis).start)
    rx = Receiver()  # not started yet: its port refuses connections
    async with receiving(rx), contextlib.AsyncExitStack() as stack:
        ledger = Ledger(svc.base_url, token, "hooks")
        stack.push_async_callback(ledger.client.aclose)
        await put_card(svc.base_url, token)
        await ledger.webhook(rx.url + "/hook")
        await ledger.budget("100", [5, 10, 15, 20, 25, 30, 35, 40])  # gpu.h100.hour is 2.50

        # Down: two alerts (5 and 10 %) in one message, each attempt refused.
        await ledger.ingest("down-1", "5")  # 12.50

        async def refused_twice() -> bool:
            pending = await ledger.deliveries("pending")
            return len(pending) == 1 and all(d["attempts"] >= 2 for d in pending)

        await wait_for(refused_twice, "the delivery to be refused twice")
        assert {d["last_error"].split(":")[0] for d in await ledger.deliveries("pending")} == {
            "ConnectError"
        }

        # Slow: the receiver holds every request beyond the sender's timeout.
        rx.mode = "hold"
        await rx.start()
        await asyncio.wait_for(rx.arrived.wait(), timeout=60)
        # Ingestion goes on while the sender still waits for its first answer: 10 posts, each
        # accepted, and two more alerts decided (15 and 20 %). Were alerts sent on the ingest
        # path, the post crossing 15 % would wait out the sender's timeout first.
        for i in range(10):
            await ledger.ingest(f"slow-{i}", "0.4")  # 1.00 each: 22.50
        assert rx.abandoned == [], "the sender gave up on its first request during the posts"
        assert rx.answers == []
        # The sender times out, hangs up and tries the same webhook-id again.
        await wait_for(lambda: len(rx.abandoned) > 0, "the sender's timeout")
        await wait_for(lambda: rx.arrivals.count(rx.abandoned[0]) >= 2, "a retry after the timeout")
        await ledger.ingest("slow-last", "2")  # 5.00: 27.50, crosses 25 %
        assert rx.answers == []  # nothing was answered during the slow phase

        # Failing: every answer is a 500, held requests included; two more alerts.
        rx.mode = "fail"
        rx.release.set()
        await ledger.ingest("fail-1", "4")  # 10.00: 37.50, crosses 30 and 35 %

        def failures() -> int:
            return sum(1 for _, mode, _ in rx.answers if mode == "fail")

        await wait_for(lambda: failures() >= 10, "500 answers")

        # Recovered: every alert delivered, and one more decided meanwhile (40 %).
        rx.mode = "ok"
        await ledger.ingest("ok-1", "2")  # 5.00: 42.50

        async def all_delivered() -> bool:
            if await ledger.deliveries("pending"):
                return False
            done = await ledger.deliveries("delivered")
            told = {d["alert_id"] for d in done} | {a for d in done for a in d["also_alert_ids"]}
            return len(told) == 8

        await wait_for(all_delivered, "every alert delivered")
        fired = await ledger.alerts()
        messages = len(await ledger.deliveries("delivered"))
        assert await ledger.deliveries("failed") == []

    decided = {a["id"] for a in fired}
    assert sorted(a["threshold_pct"] for a in fired) == [5, 10, 15, 20, 25, 30, 35, 40]
    # Exactly once by webhook-id: one 200 answer per message, and every alert told by
    # exactly one answered message, whatever failed before it (a batch's crossings of the
    # budget share a message: 5 and 10 %, 30 and 35 %).
    assert rx.delivered() == dict.fromkeys(decided, 1)
    assert set(rx.arrivals) <= decided
    assert {a for w in set(rx.arrivals) for a in rx.told[w]} == decided
    modes = Counter(mode for _, mode, _ in rx.answers)
    assert modes["fail"] >= 10 and modes["ok"] == messages <= 6, modes
    assert set(rx.abandoned) <= decided


# --- 4. several service processes on one project ----------------------------------------------


@ONE_BACKEND
async def test_worker_processes_ingesting_one_project_count_exactly_and_alert_once(
    clean_redis: str, services: Callable[..., Service]
) -> None:
    token = await make_admin_token(clean_redis)
    rx = Receiver()
    async with receiving(rx):
        await rx.start()
        # Two serve commands on the same Redis: one with two worker processes, one with one.
        pair = [services(clean_redis, workers=2), services(clean_redis, workers=1)]
        await asyncio.gather(*(asyncio.to_thread(s.start) for s in pair))
        await put_card(pair[0].base_url, token)
        work = Workload.make("multi", count=30, size=120, step=100)  # 3,020 distinct events
        ledger = Ledger(pair[1].base_url, token, work.project)
        try:
            await ledger.webhook(rx.url + "/hook")
            # Spend reaches about 115 % of the amount: 25, 50, 75 and 100 % are crossed.
            amount = (work.total() / Decimal("1.15")).quantize(Decimal("0.01"))
            budget_id = await ledger.budget(str(amount), [25, 50, 75, 100, 125])
            # Every batch goes to both services at once, from three clients each.
            tallies = [Tally(), Tally()]
            await asyncio.gather(
                *(
                    post_until_acked(s.base_url, token, work.batches, t, 3)
                    for s, t in zip(pair, tallies, strict=True)
                )
            )
            sent = 2 * sum(len(b) for b in work.batches)
            assert sum(t.accepted for t in tallies) == len(work.distinct)
            assert sum(t.accepted + t.duplicates for t in tallies) == sent
            await assert_exact(pair[0].base_url, token, work)

            fired = await ledger.alerts()
            assert sorted(a["threshold_pct"] for a in fired) == [25, 50, 75, 100]
            assert {(a["kind"], a["budget_id"]) for a in fired} == {("threshold", budget_id)}

            async def all_delivered() -> bool:
                if await ledger.deliveries("pending"):
                    return False
                done = await ledger.deliveries("delivered")
                told = {d["alert_id"] for d in done} | {
                    a for d in done for a in d["also_alert_ids"]
                }
                return len(told) == 4

            await wait_for(all_delivered, "every alert delivered")
            messages = len(await ledger.deliveries("delivered"))
        finally:
            await ledger.client.aclose()
    # Three processes ran a deliverer each; every alert reached the receiver once (crossings
    # a deliverer read together share a message).
    assert rx.delivered() == {a["id"]: 1 for a in fired}
    assert len(rx.arrivals) == messages
