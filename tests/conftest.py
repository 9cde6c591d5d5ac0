"""Shared fixtures: real Redis-protocol servers and the app over real HTTP.

Every Redis-backed test runs against the embedded Valkey this suite starts itself,
again against the system Redis on 127.0.0.1:6379 when one answers there (a database this
run claims for itself, tests/shared_redis.py, flushed per test), and again against a Redis
Cluster of three masters and three replicas this suite starts from the same Valkey binary
(tests/cluster.py; `TRAINLEDGER_TEST_CLUSTER=0` leaves it out). No mock stands in for any of them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import pytest_asyncio
import redis
import uvicorn
from trainledger.auth.model import mint
from trainledger.config import Settings
from trainledger.http.app import create_app
from trainledger.storage.connection import cluster_options
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.storage.sealing import load_sealer
from trainledger.stores import Stores

from tests.cluster import ValkeyCluster
from tests.shared_redis import claim_database
from tests.small_fs import small_filesystem

# Building a TLS context loads the CA bundle (~50 ms); the tests speak plain HTTP on
# loopback, so every client shares one context instead of building its own.
_TLS_CONTEXT = ssl.create_default_context()

# The key that seals webhook URLs and secrets in Redis (service/storage/sealing.py). Apps the
# tests run in this process get it in their settings (`ServerThread`), delivery workers as
# `TEST_SEALER`; `trainledger serve` processes the tests start inherit the variable (an
# external Redis needs one).
TEST_SECRET_KEY = "dGVzdHMtb25seSBrZXksIG5ldmVyIGluIHVzZTogMDE="
os.environ.setdefault("TRAINLEDGER_SECRET_KEY", TEST_SECRET_KEY)
TEST_SEALER = load_sealer(None, key=os.environ["TRAINLEDGER_SECRET_KEY"])
CLUSTER_ENABLED = os.environ.get("TRAINLEDGER_TEST_CLUSTER", "1") != "0"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: runs against the Redis Cluster the suite starts (tests/cluster.py)"
    )


def is_cluster_url(url: str) -> bool:
    return url.startswith(("redis+cluster://", "rediss+cluster://"))


class _ClusterClient(redis.RedisCluster):
    """A synchronous cluster client whose KEYS asks every master (redis-py asks one)."""

    def keys(self, pattern: Any = "*", **kwargs: Any) -> Any:
        kwargs.setdefault("target_nodes", redis.RedisCluster.PRIMARIES)
        return super().keys(pattern, **kwargs)


def sync_client(url: str) -> redis.Redis:
    """A synchronous client for a test to look at the stored keys itself: a plain client for
    one server, a cluster client (KEYS and SCAN over every master) for a cluster URL."""
    if is_cluster_url(url):
        return cast(redis.Redis, _ClusterClient.from_url(cluster_options(url)[0]))
    return redis.Redis.from_url(url)


@pytest.fixture(scope="session")
def system_redis() -> str:
    """A database of the shared system Redis claimed for this run alone (tests/shared_redis.py)."""
    url = claim_database()
    if url is None:
        pytest.skip("no system Redis on 127.0.0.1:6379, or no database free for this run")
    return url


@pytest.fixture(scope="session")
def embedded_valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"))
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(
    scope="session",
    params=[
        "valkey",
        pytest.param("system-redis", marks=pytest.mark.system_redis),
        pytest.param("cluster", marks=pytest.mark.cluster),
    ],
)
def redis_url(request: pytest.FixtureRequest) -> str:
    if request.param == "valkey":
        return str(request.getfixturevalue("embedded_valkey"))
    if request.param == "cluster":
        if not CLUSTER_ENABLED:
            pytest.skip("TRAINLEDGER_TEST_CLUSTER=0")
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        return cluster.url
    return str(request.getfixturevalue("system_redis"))


@pytest.fixture
def clean_redis(redis_url: str) -> str:
    """The server, emptied before the test (on a cluster: every master)."""
    client = sync_client(redis_url)
    if is_cluster_url(redis_url):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushdb()
    client.close()
    return redis_url


@pytest.fixture
async def store(clean_redis: str) -> AsyncIterator[Stores]:
    s = Stores.from_url(clean_redis)
    yield s
    await s.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_ready(
    proc: subprocess.Popen[bytes], base_url: str, log: Callable[[], str] = lambda: ""
) -> None:
    """Wait until a `trainledger serve` process answers 200 on /readyz; fail with its log if
    it exits first or never gets there (about a minute: a bound, not a speed assertion)."""
    with httpx.Client(base_url=base_url, timeout=5) as client:
        for _ in range(1200):
            if proc.poll() is not None:
                raise AssertionError(f"serve exited early:\n{log()}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"serve did not become ready:\n{log()}")


class ServerThread:
    """A real uvicorn server for the app, on a free loopback port, in a thread of its own."""

    def __init__(
        self, redis_url: str, settings: Settings | None = None, port: int | None = None
    ) -> None:
        self.port = port or free_port()  # a port again: the same service back after a stop
        self.base_url = f"http://127.0.0.1:{self.port}"
        # Test receivers listen on loopback over http: allow-list it (webhooks/targets/checks.py).
        settings = settings or Settings(redis_url=redis_url, webhook_allowlist=("127.0.0.1",))
        if settings.secret_key is None and settings.secret_key_file is None:
            settings = replace(settings, secret_key=os.environ["TRAINLEDGER_SECRET_KEY"])
        app = create_app(settings, redis_url=redis_url)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@dataclass
class Api:
    base_url: str
    admin_token: str
    redis_url: str

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        return httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=60, verify=_TLS_CONTEXT
        )

    async def token(self, role: str, projects: list[str] | None = None) -> str:
        async with self.client() as c:
            r = await c.post("/v1/tokens", json={"role": role, "projects": projects})
            assert r.status_code == 201, r.text
            return str(r.json()["token"])


async def make_admin_token(redis_url: str) -> str:
    s = Stores.from_url(redis_url)
    token, digest, record = mint("admin", None, "tests")
    await s.tokens.put_token(digest, record["id"], record)
    await s.close()
    return token


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs (256 KiB) to fill up: tests/small_fs.py (`fill`, `unfill`)."""
    with small_filesystem(tmp_path / "small-fs") as root:
        yield root


@pytest.fixture
async def api(clean_redis: str) -> AsyncIterator[Api]:
    server = ServerThread(clean_redis).start()
    try:
        yield Api(server.base_url, await make_admin_token(clean_redis), clean_redis)
    finally:
        await asyncio.to_thread(server.stop)


# A small card with a flat GPU price, a graduated storage price and a fixed reservation.
# Tier bounds and prices are chosen so hand-worked figures are easy to check.
TEST_CARD: dict[str, object] = {
    "currency": "USD",
    "effective_from": "2020-01-01T00:00:00Z",
    "skus": [
        {"code": "gpu.h100.hour", "category": "compute", "unit": "hour", "unit_price": "2.50"},
        {
            "code": "gpu.h100.reserved.hour",
            "category": "compute",
            "unit": "hour",
            "unit_price": "1.80",
            "fixed": True,
        },
        {
            "code": "storage.hot.gb_day",
            "category": "storage",
            "unit": "GB-day",
            "unit_price": "0.002",
            "tiers": [
                {"up_to": "100", "unit_price": "0.002"},
                {"up_to": "1000", "unit_price": "0.0015"},
                {"unit_price": "0.001"},
            ],
        },
        {
            "code": "network.cross_region.gb",
            "category": "network",
            "unit": "GB",
            "unit_price": "0.02",
        },
    ],
}


def event(
    event_id: str,
    quantity: str | int = "1",
    sku: str = "gpu.h100.hour",
    project: str = "llm",
    time: str | None = None,
    **extra: object,
) -> dict[str, object]:
    """A usage event dict; time defaults to one hour ago so it is inside every window."""
    from datetime import UTC, datetime, timedelta

    when = time or (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    return {
        "id": event_id,
        "time": when,
        "project": project,
        "sku": sku,
        "quantity": str(quantity),
        **extra,
    }


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def _no_task_outlives_the_session(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """At the end of the run, cancel what is left on the session's event loop and wait a
    bounded time. pytest-asyncio's own close waits for every cancelled task without a bound,
    and a run was seen to hang there after its last test; should a task still refuse to end,
    name it, print the run's closing line and leave with the run's own exit code."""
    yield
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    for task in left:
        task.cancel()
    if not left:
        return
    _, stuck = await asyncio.wait(left, timeout=10)
    if not stuck:
        return
    for task in stuck:
        print(f"\ntask still running after the session, not waited for: {task!r}", flush=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {})
    counts = {k: len(stats.get(k, [])) for k in ("passed", "failed", "skipped", "error")}
    failed = max(counts["failed"] + counts["error"], request.session.testsfailed)
    print(
        f"\n{counts['passed']} passed, {failed} failed, {counts['skipped']} skipped",
        flush=True,
    )
    os._exit(1 if failed else 0)
