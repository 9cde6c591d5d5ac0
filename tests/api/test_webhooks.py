"""Webhook delivery of budget alerts, end to end, against real receivers.

Every receiver here is a real HTTP server on 127.0.0.1 (``http.server`` in a thread) that
records what it is sent and answers as the test scripts it to; signatures are checked with
the published algorithms (the ``standardwebhooks`` reference library and an independent
HMAC here for Standard Webhooks, the vendors' documented algorithms for Feishu and DingTalk).
Alerts are produced the real way: a budget, then events posted to the ledger over HTTP.

Two ways of running the delivery worker:

* inside the ledger's own event loop, next to the HTTP server, as the app's lifespan does
  (`ledger(..., FAST)`), for the end-to-end behaviour;
* by hand, one `run_once()` round at a time from the test (`ledger(..., QUIET)`, whose
  own worker is disabled), where the test must look between two attempts.

No wall-clock assertions: waiting is bounded polling, and timing is asserted on the stored
attempt times.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import standardwebhooks
from litestar import Litestar
from trainledger.config import Settings, as_variables, delivery_settings
from trainledger.storage.keys import Keys
from trainledger.stores import Stores
from trainledger.webhooks.delivery.config import DeliveryConfig, parse_retry_after, retry_delay
from trainledger.webhooks.delivery.dispatch import DELIVERY_GROUP
from trainledger.webhooks.delivery.worker import DeliveryWorker
from trainledger.webhooks.formats.signing import generate_secret
from trainledger.webhooks.registry import check_target
from trainledger.webhooks.routes import WebhookController
from trainledger.webhooks.targets.checks import UnsafeTarget
from trainledger.webhooks.targets.redaction import redacted_url

from tests.api.test_budgets import this_month
from tests.api.test_ingest import post, put_card
from tests.conftest import (
    TEST_SEALER,
    Api,
    ServerThread,
    event,
    free_port,
    make_admin_token,
    sync_client,
)

PUBLIC_URL = "https://ledger.example.test"
POLL_INTERVAL = 0.02
MAX_POLLS = 1500  # a bound on waiting (about 30 s), never an assertion about speed

# Worker settings for the end-to-end tests: quick retries, short leases.
FAST = DeliveryConfig(
    max_attempts=50,
    base_delay_s=0.05,
    max_delay_s=0.3,
    lease_s=2.0,
    poll_s=0.05,
    claim_idle_s=1.0,
    timeout_s=1.0,
)
# The ledger's own worker disabled: the test runs a worker by hand.
QUIET = DeliveryConfig(enabled=False)
# For a worker driven by hand: every retry due at once unless the receiver asks otherwise.
BY_HAND = DeliveryConfig(max_attempts=10, base_delay_s=0, lease_s=10.0, timeout_s=5.0)

# The receivers here listen on loopback over http, which the ledger only sends to when
# allow-listed (service/webhooks/targets/checks.py; tests/system/test_webhook_targets.py: rules).
LOOPBACK = ("127.0.0.1",)

FEISHU_SECRET = "feishu-bot-secret-0123"
DINGTALK_SECRET = "SEC0123456789abcdef0123456789abcdef"


# --- a real receiver ------------------------------------------------------------------------


@dataclass
class Received:
    path: str  # with the query string
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """An HTTP server on a loopback port. `answers[path]` queues (status, headers) answers
    for that path, then it answers 200; while `hold` is set to an unset Event, every request
    waits for it before answering."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[Received] = []
        self.answers: dict[str, list[tuple[int, dict[str, str]]]] = {}
        self.hold: threading.Event | None = None
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.received.append(Received(self.path, headers, body))
                    queue = receiver.answers.get(urlsplit(self.path).path)
                    status, extra = queue.pop(0) if queue else (200, {})
                receiver.arrived.set()
                hold = receiver.hold
                if hold is not None:
                    hold.wait(timeout=120)
                payload = b'{"ok": true}' if status < 300 else b'{"error": "scripted"}'
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if urlsplit(r.path).path == path]


@contextlib.contextmanager
def receiving(receiver: Receiver) -> Any:
    try:
        yield receiver
    finally:
        receiver.stop()


# --- the ledger, with its delivery worker ---------------------------------------------------


def _attach_worker(server: ServerThread, redis_url: str, config: DeliveryConfig) -> None:
    """Give the server's app the webhook routes and a delivery worker in its own event loop,
    the way the app's lifespan does; if the app already does both, check that its worker
    uses the same configuration (read from the environment set by `ledger`)."""
    app = server.server.config.app
    assert isinstance(app, Litestar)
    if not any(route.path.startswith("/v1/webhooks") for route in app.routes):
        app.register(WebhookController)
    held: dict[str, Any] = {}

    async def start(app_: Litestar) -> None:
        wired = app_.state.get("delivery_worker")
        if wired is not None:
            assert wired.config == config, "the app's worker must take the settings' delivery"
            return
        if config.enabled:
            store = Stores.from_url(redis_url)
            worker = DeliveryWorker(
                store, config, PUBLIC_URL, allowlist=LOOPBACK, sealer=TEST_SEALER
            )
            held.update(store=store, task=asyncio.create_task(worker.run()))

    async def stop(app_: Litestar) -> None:
        task = held.pop("task", None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        store = held.pop("store", None)
        if store is not None:
            await store.close()

    app.on_startup.append(start)
    app.on_shutdown.append(stop)


@contextlib.asynccontextmanager
async def ledger(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    config: DeliveryConfig,
    token: str | None = None,
) -> AsyncIterator[Api]:
    settings = Settings(
        redis_url=redis_url,
        public_url=PUBLIC_URL,
        webhook_allowlist=LOOPBACK,
        **delivery_settings(config),
    )
    server = ServerThread(redis_url, settings)
    _attach_worker(server, redis_url, config)
    await asyncio.to_thread(server.start)
    try:
        yield Api(server.base_url, token or await make_admin_token(redis_url), redis_url)
    finally:
        await asyncio.to_thread(server.stop)
        # A server (and its worker) still running would act on the next test's data.
        assert not server.thread.is_alive(), "the ledger did not stop"


@contextlib.asynccontextmanager
async def store_of(redis_url: str) -> AsyncIterator[Stores]:
    store = Stores.from_url(redis_url)
    try:
        yield store
    finally:
        await store.close()


# --- helpers ---------------------------------------------------------------------------------


async def add_webhook(api: Api, url: str, fmt: str = "standard", **extra: Any) -> dict[str, Any]:
    async with api.client() as c:
        r = await c.post("/v1/webhooks", json={"url": url, "format": fmt, **extra})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def add_budget(api: Api, **fields: Any) -> dict[str, Any]:
    body = {"project": "llm", "name": "llm monthly", "amount": "10", "thresholds": [50], **fields}
    async with api.client() as c:
        r = await c.post("/v1/budgets", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def deliveries(api: Api, status: str | None = None, **params: Any) -> dict[str, Any]:
    query = {"project": "llm", **params}
    if status is not None:
        query["status"] = status
    async with api.client() as c:
        r = await c.get("/v1/webhooks/deliveries", params=query)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def alert_ids(api: Api) -> set[str]:
    async with api.client() as c:
        r = await c.get("/v1/alerts", params={"project": "llm"})
    assert r.status_code == 200, r.text
    return {a["id"] for a in r.json()}


async def wait_until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(MAX_POLLS):
        if await check():
            return
        await asyncio.sleep(POLL_INTERVAL)
    raise AssertionError(f"gave up waiting: {what}")


async def delivered_count(api: Api) -> int:
    return int((await deliveries(api, "delivered"))["total"])


async def alerts_told(api: Api) -> set[str]:
    """The alerts the delivered messages told: each one's own, and the lower thresholds it
    listed."""
    done = (await deliveries(api, "delivered", limit=1000))["items"]
    return {d["alert_id"] for d in done} | {a for d in done for a in d["also_alert_ids"]}


def spec_signature(secret: str, msg_id: str, stamp: str, body: bytes) -> str:
    """Standard Webhooks, written from the spec: HMAC-SHA256 keyed with the base64-decoded
    secret (after ``whsec_``) over ``{id}.{timestamp}.{body}``, base64, ``v1,`` prefix."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def check_standard(secret: str, request: Received) -> dict[str, Any]:
    """Verified with the reference library and the independent implementation above."""
    payload = standardwebhooks.Webhook(secret).verify(request.body, request.headers)
    h = request.headers
    expected = spec_signature(secret, h["webhook-id"], h["webhook-timestamp"], request.body)
    assert expected in h["webhook-signature"].split()
    return dict(payload)


def feishu_reference(secret: str, timestamp: str) -> str:
    # Feishu custom bot: HMAC-SHA256 keyed with "timestamp\nsecret" over an empty message.
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def dingtalk_reference(secret: str, timestamp: str) -> str:
    # DingTalk custom robot: HMAC-SHA256 keyed with the secret over "timestamp\nsecret".
    mac = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def recent(timestamp_s: float) -> bool:
    """Within the hour the vendors accept (a bound, not a speed assertion)."""
    return abs(datetime.now(UTC).timestamp() - timestamp_s) < 3600


# --- every format, end to end ---------------------------------------------------------------


async def test_each_format_is_delivered_once_and_verifies(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, FAST) as api:
            await put_card(api)
            standard = await add_webhook(api, rx.url + "/standard", description="ops")
            await add_webhook(api, rx.url + "/slack", "slack")
            await add_webhook(api, rx.url + "/feishu", "feishu", secret=FEISHU_SECRET)
            await add_webhook(
                api, rx.url + "/dingtalk?access_token=tok-1", "dingtalk", secret=DINGTALK_SECRET
            )
            await add_webhook(api, rx.url + "/wecom?key=wecom-key-1", "wecom")
            budget = await add_budget(api, name="pretrain monthly", scope={"stage": "pretrain"})
            # 3 GPU hours of pretrain (7.50) cross 50 % of 10.00; the eval hour is out of scope.
            when = this_month()
            await post(
                api,
                [
                    event("w1", "3", time=when, stage="pretrain"),
                    event("w2", "1", time=when, stage="eval"),
                ],
            )
            (alert_id,) = await alert_ids(api)

            async def all_delivered() -> bool:
                return await delivered_count(api) == 5

            await wait_until(all_delivered, "five deliveries")
            page = await deliveries(api)
            assert {d["status"] for d in page["items"]} == {"delivered"}
            assert {d["alert_id"] for d in page["items"]} == {alert_id}

    paths = ("/standard", "/slack", "/feishu", "/dingtalk", "/wecom")
    assert {p: len(rx.at(p)) for p in paths} == {p: 1 for p in paths}
    budget_link = f"{PUBLIC_URL}/v1/budgets/{budget['id']}?project=llm"
    for path in paths:
        (request,) = rx.at(path)
        assert request.headers["content-type"] == "application/json"
        assert request.headers["webhook-id"] == alert_id
        text = json.dumps(request.json, ensure_ascii=False)
        threshold = '"threshold_pct": 50' if path == "/standard" else "50%"
        for needle in ("llm", "pretrain", threshold, "7.50", "5.00", "2.50", "10.00"):
            assert needle in text, (path, needle)
        assert "gpu.h100.hour / pretrain" in text and "eval" not in text, path
        assert budget_link in text and f"{PUBLIC_URL}/v1/costs?project=llm" in text, path

    payload = check_standard(standard["secret"], rx.at("/standard")[0])
    assert payload["type"] == "budget.threshold"
    data = payload["data"]
    assert data["id"] == alert_id and data["scope"] == {"stage": "pretrain"}
    assert (data["threshold_pct"], data["spent"], data["limit"], data["over_by"]) == (
        50,
        "7.50",
        "5.00",
        "2.50",
    )
    assert data["top_drivers"] == [
        {
            "name": "gpu.h100.hour / pretrain",
            "stage": "pretrain",
            "experiment": "",
            "sku": "gpu.h100.hour",
            "cost": "7.50",
        }
    ]
    assert data["links"]["budget"] == budget_link
    assert data["links"]["dashboard"].startswith(f"{PUBLIC_URL}/ui/llm?from=")

    slack = rx.at("/slack")[0].json
    assert [b["type"] for b in slack["blocks"]][:2] == ["header", "section"]
    assert "llm" in slack["text"]

    feishu = rx.at("/feishu")[0].json
    assert feishu["msg_type"] == "post" and recent(int(feishu["timestamp"]))
    assert feishu["sign"] == feishu_reference(FEISHU_SECRET, feishu["timestamp"])

    dingtalk = rx.at("/dingtalk")[0]
    query = parse_qs(urlsplit(dingtalk.path).query)
    assert query["access_token"] == ["tok-1"] and recent(int(query["timestamp"][0]) / 1000)
    assert query["sign"] == [dingtalk_reference(DINGTALK_SECRET, query["timestamp"][0])]
    assert dingtalk.json["msgtype"] == "markdown"

    wecom = rx.at("/wecom")[0]
    assert parse_qs(urlsplit(wecom.path).query) == {"key": ["wecom-key-1"]}
    assert wecom.json["msgtype"] == "markdown"
    assert len(wecom.json["markdown"]["content"].encode()) <= 4096


# --- a receiver that is down, and a restart -------------------------------------------------


async def test_delivery_survives_a_dead_receiver_and_restarts(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rx = Receiver()  # not started: its port refuses connections
    token = await make_admin_token(clean_redis)
    async with ledger(clean_redis, monkeypatch, FAST, token) as api:
        await put_card(api)
        secret = (await add_webhook(api, rx.url + "/in"))["secret"]
        await add_budget(api, thresholds=[10, 20, 30, 40, 50])
        await post(api, [event("r1", "1.6", time=this_month())])  # 4.00: crosses 10/20/30/40

        async def failing() -> bool:  # one message tells the four crossings
            page = await deliveries(api, "pending")
            return page["total"] == 1 and all(d["attempts"] >= 2 for d in page["items"])

        await wait_until(failing, "every delivery to fail at least twice")
        first = await deliveries(api, "pending")
        assert {d["last_error"].split(":")[0] for d in first["items"]} == {"ConnectError"}

    # Down: an alert is decided while no worker runs at all.
    async with ledger(clean_redis, monkeypatch, QUIET, token) as api:
        await post(api, [event("r2", "0.8", time=this_month())])  # 6.00: crosses 50
        expected = await alert_ids(api)
        assert len(expected) == 5

    with receiving(rx.start()):
        async with ledger(clean_redis, monkeypatch, FAST, token) as api:

            async def all_delivered() -> bool:
                return await delivered_count(api) == 2

            await wait_until(all_delivered, "every alert delivered after the restart")
            done = (await deliveries(api, "delivered"))["items"]
        received = list(rx.received)

    told = {d["alert_id"] for d in done} | {a for d in done for a in d["also_alert_ids"]}
    assert told == expected
    assert min(d["attempts"] for d in done if d["alert_id"].endswith(":t40")) >= 3
    # Every request verifies, and the receiver saw every alert (duplicates, if a retry raced,
    # would carry the same webhook-id).
    payloads = [check_standard(secret, r)["data"] for r in received]
    seen = {p["id"] for p in payloads} | {a["id"] for p in payloads for a in p["also_crossed"]}
    assert seen == expected
    assert {r.headers["webhook-id"] for r in received} == {p["id"] for p in payloads}


# --- retries: errors, Retry-After, dead letters ------------------------------------------------


async def test_errors_are_retried_and_retry_after_is_respected(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        later = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
        rx.answers = {
            "/flaky": [(500, {}), (502, {}), (500, {})],
            "/busy": [(429, {"Retry-After": "120"})],
            "/dated": [(503, {"Retry-After": later})],
        }
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await put_card(api)
            hooks = {p: await add_webhook(api, rx.url + p) for p in ("/flaky", "/busy", "/dated")}
            await add_budget(api)
            await post(api, [event("e1", "3", time=this_month())])
            worker = DeliveryWorker(
                store,
                BY_HAND,
                PUBLIC_URL,
                rng=random.Random(7),
                allowlist=LOOPBACK,
                sealer=TEST_SEALER,
            )
            attempts = [await worker.run_once() for _ in range(5)]
            by_hook = {d["webhook_id"]: d for d in (await deliveries(api))["items"]}

    assert attempts == [3, 1, 1, 1, 0]  # the flaky one four times; the others wait
    flaky = by_hook[hooks["/flaky"]["id"]]
    assert (flaky["status"], flaky["attempts"], flaky["last_status_code"]) == ("delivered", 4, 200)
    assert (
        len(rx.at("/flaky")) == 4 and len({r.headers["webhook-id"] for r in rx.at("/flaky")}) == 1
    )

    def wait_asked(d: dict[str, Any]) -> float:
        last = datetime.fromisoformat(d["last_attempt_at"])
        return (datetime.fromisoformat(d["next_attempt_at"]) - last).total_seconds()

    busy = by_hook[hooks["/busy"]["id"]]
    assert (busy["status"], busy["attempts"], busy["last_status_code"]) == ("pending", 1, 429)
    assert wait_asked(busy) >= 120
    dated = by_hook[hooks["/dated"]["id"]]
    assert (dated["status"], dated["last_status_code"]) == ("pending", 503)
    assert datetime.fromisoformat(dated["next_attempt_at"]) >= parsedate_to_datetime(later)
    assert len(rx.at("/busy")) == 1 and len(rx.at("/dated")) == 1


async def test_dead_letters_are_listed_and_redelivered(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = DeliveryConfig(max_attempts=2, base_delay_s=0, lease_s=10.0, timeout_s=5.0)
    with receiving(Receiver().start()) as rx:
        rx.answers = {"/dl": [(500, {}), (502, {})]}
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await put_card(api)
            secret = (await add_webhook(api, rx.url + "/dl"))["secret"]
            gone = await add_webhook(api, rx.url + "/gone")
            async with api.client() as c:
                assert (await c.delete(f"/v1/webhooks/{gone['id']}")).status_code == 204
                assert (await c.delete(f"/v1/webhooks/{gone['id']}")).status_code == 404
            await add_budget(api)
            await post(api, [event("d1", "3", time=this_month())])
            worker = DeliveryWorker(
                store, config, PUBLIC_URL, allowlist=LOOPBACK, sealer=TEST_SEALER
            )
            # The deleted webhook got no delivery: it was gone before the alert was decided.
            assert [await worker.run_once() for _ in range(3)] == [1, 1, 0]

            failed = await deliveries(api, "failed")
            assert failed["total"] == 1 and (await deliveries(api, "pending"))["total"] == 0
            (dead,) = failed["items"]
            assert (dead["attempts"], dead["last_status_code"]) == (2, 502)
            assert dead["failed_at"] is not None and dead["next_attempt_at"] is None

            reader = await api.token("read", ["llm"])
            async with api.client(reader) as c:
                r = await c.get(
                    "/v1/webhooks/deliveries", params={"project": "llm", "status": "failed"}
                )
                assert r.status_code == 200 and r.json()["items"][0]["id"] == dead["id"]
                r = await c.post("/v1/webhooks/deliveries/redeliver?project=llm", json={})
                assert r.status_code == 403
            async with api.client() as c:
                r = await c.post(
                    "/v1/webhooks/deliveries/redeliver",
                    params={"project": "llm"},
                    json={"ids": ["no-such|delivery"]},
                )
                assert r.status_code == 200, r.text
                assert r.json()["redelivered"] == [] and r.json()["not_failed"] == [
                    "no-such|delivery"
                ]
                r = await c.post(
                    "/v1/webhooks/deliveries/redeliver", params={"project": "llm"}, json={}
                )
                assert r.json()["redelivered"] == [dead["id"]]
            assert await worker.run_once() == 1
            (again,) = (await deliveries(api, "delivered"))["items"]
            assert (again["id"], again["attempts"], again["redeliveries"]) == (dead["id"], 1, 1)
            assert (await deliveries(api, "failed"))["total"] == 0

    received = rx.at("/dl")
    assert len(received) == 3
    assert {check_standard(secret, r)["data"]["id"] for r in received} == {dead["alert_id"]}
    assert rx.at("/gone") == []


async def test_pending_deliveries_of_a_deleted_webhook_fail(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
        await put_card(api)
        hook = await add_webhook(api, "http://127.0.0.1:9/never")
        await add_budget(api)
        await post(api, [event("g1", "3", time=this_month())])
        worker = DeliveryWorker(store, BY_HAND, PUBLIC_URL, allowlist=LOOPBACK, sealer=TEST_SEALER)
        assert await worker.dispatch() == 1
        async with api.client() as c:
            assert (await c.delete(f"/v1/webhooks/{hook['id']}")).status_code == 204
        assert await worker.run_once() == 1
        (dead,) = (await deliveries(api, "failed"))["items"]
        assert dead["last_error"] == "the webhook was deleted" and dead["attempts"] == 0


# --- crash safety ---------------------------------------------------------------------------------


async def test_an_alert_read_by_a_worker_that_died_is_delivered_by_another(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await put_card(api)
            secret = (await add_webhook(api, rx.url + "/in"))["secret"]
            await add_budget(api)
            await post(api, [event("c1", "3", time=this_month())])
            (alert_id,) = await alert_ids(api)
            # A worker reads the alert from the group, then dies before queueing it.
            read = await store.webhooks.alerts_to_dispatch(
                "llm", DELIVERY_GROUP, "dead", 100, 10**9
            )
            assert len(read) == 1
            survivor = DeliveryWorker(
                store,
                DeliveryConfig(claim_idle_s=0.2, base_delay_s=0, lease_s=10.0),
                PUBLIC_URL,
                consumer="survivor",
                allowlist=LOOPBACK,
                sealer=TEST_SEALER,
            )

            async def taken_over() -> bool:
                await survivor.run_once()
                return await delivered_count(api) == 1

            await wait_until(taken_over, "the abandoned alert to be claimed and delivered")
            raw = sync_client(clean_redis)
            try:
                pending = raw.xpending(Keys.alerts("llm"), DELIVERY_GROUP)
            finally:
                raw.close()
            assert pending["pending"] == 0
            assert await survivor.run_once() == 0

    (request,) = rx.received
    assert check_standard(secret, request)["data"]["id"] == alert_id


async def test_a_delivery_leased_by_a_dead_sender_is_sent_after_the_lease(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await put_card(api)
            paths = {}
            for path in ("/a", "/b"):
                paths[(await add_webhook(api, rx.url + path))["id"]] = path
            await add_budget(api)
            await post(api, [event("l1", "3", time=this_month())])
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=LOOPBACK, sealer=TEST_SEALER
            )
            assert await worker.dispatch() == 2
            # A sender leases both deliveries, one for ten minutes and one briefly, then dies.
            now = datetime.now(UTC)
            now_ms = int(now.timestamp() * 1000)
            long_token, short_token = now_ms + 600_000, now_ms + 300
            ((long_id, _),) = await store.webhooks.claim_deliveries("llm", now_ms, long_token, 1)
            ((short_id, short_claimed),) = await store.webhooks.claim_deliveries(
                "llm", now_ms, short_token, 1
            )

            async def sent_after_lease() -> bool:
                await worker.run_once()
                return await delivered_count(api) == 1

            await wait_until(sent_after_lease, "the briefly leased delivery to be sent")
            states = {d["id"]: d["status"] for d in (await deliveries(api))["items"]}
            assert states == {short_id: "delivered", long_id: "pending"}
            # The dead sender's late outcome is not recorded: its lease is gone.
            assert not await store.webhooks.settle_delivery(
                "llm", short_id, short_token, short_claimed, b"{}", "failed", now_ms
            )
            assert {d["id"]: d["status"] for d in (await deliveries(api))["items"]} == states

    short_path = paths[short_id.rsplit("|", 1)[1]]
    long_path = paths[long_id.rsplit("|", 1)[1]]
    assert len(rx.at(short_path)) == 1 and rx.at(long_path) == []


# --- a slow receiver never slows ingestion --------------------------------------------------------


async def test_a_stuck_receiver_does_not_slow_ingestion(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = DeliveryConfig(
        max_attempts=5,
        base_delay_s=0.05,
        max_delay_s=0.3,
        lease_s=60.0,
        poll_s=0.05,
        claim_idle_s=1.0,
        timeout_s=30.0,
    )
    rx = Receiver()
    rx.hold = threading.Event()  # every request waits until the test releases it
    with receiving(rx.start()):
        async with ledger(clean_redis, monkeypatch, config) as api:
            await put_card(api)
            await add_webhook(api, rx.url + "/stuck")
            await add_budget(api, amount="100", thresholds=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
            await post(api, [event("s0", "1", time=this_month())])  # 2.50: crosses 1 and 2 %
            assert await asyncio.to_thread(rx.arrived.wait, 30), "the receiver got nothing"
            # The worker is now waiting on the receiver. Ingestion goes on, in the same process,
            # and alerts keep being decided; a short client timeout would catch a stall.
            headers = {"Authorization": f"Bearer {api.admin_token}"}
            async with httpx.AsyncClient(base_url=api.base_url, headers=headers, timeout=15) as c:
                for i in range(1, 21):
                    r = await c.post("/v1/events", json=[event(f"s{i}", "0.1", time=this_month())])
                    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
                r = await c.get("/v1/costs", params={"project": "llm"})
                assert r.json()["total_cost"] == "7.50"
            assert rx.hold is not None and not rx.hold.is_set()
            assert await delivered_count(api) == 0  # nothing was answered yet
            decided = await alert_ids(api)
            assert len(decided) == 7  # 1 % … 7 % of 100.00
            rx.hold.set()

            async def all_delivered() -> bool:
                pending = (await deliveries(api, "pending"))["total"]
                return pending == 0 and await alerts_told(api) == decided

            await wait_until(all_delivered, "every alert delivered once released")
    # Crossings that waited together share a message (1 and 2 % came in one batch).
    payloads = [r.json["data"] for r in rx.received]
    assert {p["id"] for p in payloads} | {a["id"] for p in payloads for a in p["also_crossed"]} == (
        decided
    )
    assert rx.received[0].headers["webhook-id"].endswith(":t2")


# --- registration -------------------------------------------------------------------------------


async def test_registration_validates_and_never_shows_secrets(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = generate_secret()
    async with ledger(clean_redis, monkeypatch, QUIET) as api:
        generated = await add_webhook(api, "https://hooks.example/standard")
        assert generated["secret"].startswith("whsec_") and generated["has_secret"]
        given = await add_webhook(api, "https://hooks.example/own?token=abc", secret=own)
        assert given["secret"] == own
        feishu = await add_webhook(
            api,
            "https://open.feishu.example/open-apis/bot/v2/hook/hook-token-1",
            "feishu",
            secret=FEISHU_SECRET,
            projects=["llm"],
            kinds=["threshold"],
        )
        assert "secret" not in feishu and feishu["has_secret"]
        slack = await add_webhook(
            api, "https://hooks.slack.example/services/T1/B1/slack-key-1", "slack"
        )
        assert "secret" not in slack and not slack["has_secret"]

        async with api.client() as c:
            r = await c.get("/v1/webhooks")
            assert r.status_code == 200
            listed = r.text
            for secret in (generated["secret"], own, FEISHU_SECRET):
                assert secret not in listed and secret.removeprefix("whsec_") not in listed
            for in_url in ("hook-token-1", "slack-key-1", "token=abc"):
                assert in_url not in listed
            views = {w["id"]: w for w in r.json()}
            assert all("secret" not in w for w in views.values())
            assert views[feishu["id"]]["projects"] == ["llm"]
            assert views[feishu["id"]]["kinds"] == ["threshold"]
            assert views[given["id"]]["url"] == "https://hooks.example/own?token=…"

            async def refused(body: dict[str, Any], status: int, field: str | None) -> None:
                r = await c.post("/v1/webhooks", json=body)
                assert r.status_code == status, r.text
                if field is not None:
                    assert r.json()["errors"][0]["field"] == field

            await refused({"url": "ftp://hooks.example/x"}, 422, "$.url")
            await refused({"url": "https://user:pw@hooks.example/x"}, 422, "$.url")
            await refused(
                {"url": "https://x.example/", "format": "slack", "secret": "s"}, 422, "$.secret"
            )
            await refused({"url": "https://x.example/", "secret": "whsec_AAAA"}, 422, "$.secret")
            await refused({"url": "https://x.example/", "format": "telegram"}, 400, None)
            await refused({"url": "https://x.example/", "projects": ["Bad Name"]}, 400, None)

        scoped = await api.token("admin", ["llm"])
        async with api.client(scoped) as c:
            r = await c.post("/v1/webhooks", json={"url": "https://x.example/"})
            assert r.status_code == 422 and r.json()["errors"][0]["field"] == "$.projects"
            r = await c.post("/v1/webhooks", json={"url": "https://x.example/", "projects": ["x"]})
            assert r.status_code == 403
            mine = await c.post(
                "/v1/webhooks", json={"url": "https://x.example/", "projects": ["llm"]}
            )
            assert mine.status_code == 201
            ids = [w["id"] for w in (await c.get("/v1/webhooks")).json()]
            assert sorted(ids) == sorted([feishu["id"], mine.json()["id"]])
            assert (await c.delete(f"/v1/webhooks/{generated['id']}")).status_code == 404


# --- pure pieces ------------------------------------------------------------------------------


def test_backoff_retry_after_and_targets() -> None:
    config = DeliveryConfig(base_delay_s=10, max_delay_s=100)
    rng = random.Random(1)
    for attempts, window in ((1, 10), (2, 20), (3, 40), (4, 80), (5, 100), (30, 100)):
        delays = [retry_delay(attempts, config, rng) for _ in range(200)]
        assert all(0 <= d <= window for d in delays)
        assert max(delays) > window * 0.8  # full jitter spreads over the whole window
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120", now) == 120
    assert parse_retry_after("Mon, 30 Nov 2026 12:01:30 GMT", now) == 90
    assert parse_retry_after("Mon, 30 Nov 2026 11:00:00 GMT", now) == 0
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None

    check_target("https://hooks.example/x")
    for bad in ("ftp://x/", "file:///etc/passwd", "https:///nohost", "javascript:alert(1)"):
        with pytest.raises(UnsafeTarget):
            check_target(bad)
    assert redacted_url("https://oapi.example/robot/send?access_token=t", "dingtalk") == (
        "https://oapi.example/…"
    )

    fast = delivery_settings(FAST)
    assert Settings.from_env(as_variables(**fast)).webhook_delivery == FAST
    assert Settings.from_env({}).webhook_delivery == DeliveryConfig()
    with pytest.raises(ValueError, match="lease_s"):
        DeliveryConfig(lease_s=5, timeout_s=5)
    with pytest.raises(SystemExit):
        Settings.from_env({"TRAINLEDGER_WEBHOOK_MAX_ATTEMPTS": "many"})


# --- messages people read: one per batch's crossings, in order, a test message --------------


def people(exact: str) -> str:
    """An exact USD figure as people read it, written here independently of the service:
    rounded half to even to cents, thousands grouped."""
    cents = Decimal(exact).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    return f"{cents:,} USD"


def chat_text(received: Received) -> str:
    return json.dumps(received.json, ensure_ascii=False)


async def test_one_batch_over_three_thresholds_is_one_message_per_endpoint(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, FAST) as api:
            await put_card(api)
            standard = await add_webhook(api, rx.url + "/standard")
            await add_webhook(api, rx.url + "/slack", "slack")
            await add_webhook(api, rx.url + "/dingtalk?access_token=t", "dingtalk")
            await add_budget(
                api, name="pretrain monthly", amount="1500", thresholds=[50, 80, 100],
                scope={"stage": "pretrain"},
            )  # fmt: skip
            when = this_month()
            # Worked by hand, at 2.50 USD a GPU hour: 1000.00 + 500.08 + 50.00 + 12.60 =
            # 1562.68 of pretrain, past 750 (50 %), 1200 (80 %) and 1500 (100 %): over the
            # highest by 62.68. The eval hour is outside the budget's scope.
            await post(
                api,
                [
                    event("g1", "400", time=when, stage="pretrain", experiment="exp-7"),
                    event("g2", "200.032", time=when, stage="pretrain", experiment="exp-8"),
                    event("g3", "20", time=when, stage="pretrain", experiment="exp-9"),
                    event("g4", "5.04", time=when, stage="pretrain"),
                    event("g5", "1", time=when, stage="eval", experiment="exp-7"),
                ],
            )
            async with api.client() as c:
                history = (await c.get("/v1/alerts", params={"project": "llm"})).json()
            # The alert history records each crossing.
            assert [a["threshold_pct"] for a in history] == [50, 80, 100]
            ids = {a["threshold_pct"]: a["id"] for a in history}

            async def all_delivered() -> bool:
                return await delivered_count(api) == 3

            await wait_until(all_delivered, "one message per endpoint")
            page = await deliveries(api)
            assert page["total"] == 3  # not nine
            for d in page["items"]:
                assert (d["alert_id"], d["also_alert_ids"]) == (ids[100], [ids[80], ids[50]])

    for path in ("/standard", "/slack", "/dingtalk"):
        assert len(rx.at(path)) == 1, path
        assert rx.at(path)[0].headers["webhook-id"] == ids[100]

    data = check_standard(standard["secret"], rx.at("/standard")[0])["data"]
    # The machine-readable payload keeps the exact figures.
    assert (data["spent"], data["limit"], data["over_by"], data["threshold_pct"]) == (
        "1562.68",
        "1500.00",
        "62.68",
        100,
    )
    assert data["also_crossed"] == [
        {"id": ids[80], "threshold_pct": 80, "limit": "1200.00"},
        {"id": ids[50], "threshold_pct": 50, "limit": "750.00"},
    ]
    assert [(d["stage"], d["experiment"], d["sku"], d["cost"]) for d in data["top_drivers"]] == [
        ("pretrain", "exp-7", "gpu.h100.hour", "1000.00"),
        ("pretrain", "exp-8", "gpu.h100.hour", "500.08"),
        ("pretrain", "exp-9", "gpu.h100.hour", "50.00"),
    ]
    # The forecast: the spend projected linearly over the month from the alert's time
    # (worked here from the payload's own time, independently of the service).
    at = datetime.fromisoformat(data["occurred_at"])
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    elapsed = int((at - start).total_seconds())
    length = int((end - start).total_seconds())
    forecast_nano = 1_562_680_000_000 * length // max(elapsed, 1)
    forecast = str(Decimal(forecast_nano).scaleb(-9).normalize())
    assert Decimal(data["forecast"]) == Decimal(forecast)
    dashboard = f"{PUBLIC_URL}/ui/llm?from={start.date()}&to={at.date()}"
    assert data["links"]["dashboard"] == dashboard

    for path in ("/slack", "/dingtalk"):
        text = chat_text(rx.at(path)[0])
        for needle in (
            "llm: budget pretrain monthly crossed 100% (and 80%, 50%)",
            "Spent 1,562.68 USD crossed the 100% threshold (1,500.00 USD) of budget "
            "pretrain monthly (1,500.00 USD), over by 62.68 USD.",
            "Also crossed in the same batch: 80% (1,200.00 USD), 50% (750.00 USD).",
            f"Forecast for {budget_period(at)}: {people(forecast)}.",
            "gpu.h100.hour / pretrain / exp-7 — 1,000.00 USD",
            "gpu.h100.hour / pretrain / exp-8 — 500.08 USD",
            "gpu.h100.hour / pretrain / exp-9 — 50.00 USD",
            dashboard,
        ):
            assert needle in text, (path, needle)
        assert "12.60" not in text and "eval" not in text  # the fourth driver; out of scope


def budget_period(at: datetime) -> str:
    return at.strftime("%Y-%m")


async def test_deliveries_to_one_endpoint_keep_alert_order(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch decides, in this order, budget thresholds 50 and 100 % (one message) and
    a forecast overrun. The delivery ids sort the other way (":forecast|" before ":t100|"),
    and a worker used to send a round's deliveries side by side: the forecast could arrive
    first. Now an endpoint is sent one request at a time, in alert order."""
    config = DeliveryConfig(
        max_attempts=5, base_delay_s=0.05, max_delay_s=0.3, lease_s=30.0, poll_s=0.05,
        claim_idle_s=1.0, timeout_s=10.0,
    )  # fmt: skip
    now = datetime.now(UTC)
    rx = Receiver()
    rx.hold = threading.Event()
    with receiving(rx.start()):
        async with ledger(clean_redis, monkeypatch, config) as api:
            await put_card(api)
            secret = (await add_webhook(api, rx.url + "/ordered"))["secret"]
            # A ten-day window, nine days gone: a forecast overrun once spend passes 9.00.
            await add_budget(
                api,
                period="window",
                window_start=(now - timedelta(days=9)).isoformat(),
                window_end=(now + timedelta(days=1)).isoformat(),
                thresholds=[50, 100],
                forecast={"min_elapsed_pct": 50},
            )
            await post(api, [event("o1", "5")])  # 12.50: past 5.00, 9.00 and 10.00
            async with api.client() as c:
                history = [a["id"] for a in (await c.get("/v1/alerts?project=llm")).json()]
            assert [h.rsplit(":", 1)[1] for h in history] == ["t50", "t100", "forecast"]
            assert await asyncio.to_thread(rx.arrived.wait, 30), "the receiver got nothing"
            # The first request is held unanswered: the second must not be sent meanwhile.
            # (A worker sending side by side sends both at once; this waits long enough for
            # the second to have arrived then.)
            await asyncio.sleep(0.5)
            assert len(rx.at("/ordered")) == 1
            rx.hold.set()

            async def both_delivered() -> bool:
                return await delivered_count(api) == 2

            await wait_until(both_delivered, "both messages delivered")
    got = [check_standard(secret, r)["data"] for r in rx.at("/ordered")]
    assert [d["id"] for d in got] == [history[1], history[2]]
    assert [a["id"] for a in got[0]["also_crossed"]] == [history[0]]


async def test_the_test_endpoint_sends_a_signed_sample(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        rx.answers["/failing"] = [(503, {})]
        async with ledger(clean_redis, monkeypatch, QUIET) as api:
            standard = await add_webhook(api, rx.url + "/standard", projects=["llm"])
            slack = await add_webhook(api, rx.url + "/slack", "slack")
            failing = await add_webhook(api, rx.url + "/failing")
            down = await add_webhook(
                api, f"http://127.0.0.1:{free_port()}/ding?access_token=tok-secret-9",
                "dingtalk", secret=DINGTALK_SECRET,
            )  # fmt: skip
            answers = {}
            async with api.client() as c:
                for hook in (standard, slack, failing, down):
                    r = await c.post(f"/v1/webhooks/{hook['id']}/test")
                    assert r.status_code == 200, r.text
                    answers[hook["id"]] = r.json()
                assert (await c.post("/v1/webhooks/wh_nope/test")).status_code == 404
            # Sent once, outside the outbox: nothing is listed or retried.
            assert (await deliveries(api))["total"] == 0

    sent = answers[standard["id"]]
    assert (sent["delivered"], sent["status_code"], sent["error"]) == (True, 200, None)
    (request,) = rx.at("/standard")
    # Verified by the reference library (and the spec's algorithm written out here).
    payload = check_standard(standard["secret"], request)
    assert request.headers["webhook-id"] == sent["message_id"] == payload["data"]["id"]
    assert payload["type"] == "budget.threshold" and payload["data"]["test"] is True
    assert payload["data"]["project"] == "llm"  # the webhook's own project
    assert payload["data"]["spent"] == "10312.5"  # exact in the payload

    assert answers[slack["id"]]["delivered"] is True
    text = chat_text(rx.at("/slack")[0])
    assert "Test message (a sample, not an alert)" in text and "10,312.50 USD" in text

    refused = answers[failing["id"]]
    assert (refused["delivered"], refused["status_code"]) == (False, 503)
    assert refused["error"].startswith("HTTP 503")
    assert len(rx.at("/failing")) == 1  # not retried

    unreachable = answers[down["id"]]
    assert unreachable["delivered"] is False and unreachable["status_code"] is None
    assert "ConnectError" in unreachable["error"] and "tok-secret-9" not in unreachable["error"]
