"""Durability and process lifecycle: restarts, a killed Valkey, a Redis that goes away, the CLI.

These run `trainledger` as real subprocesses and the embedded Valkey as a real server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import redis
from trainledger.auth.model import Principal
from trainledger.cli.serve_runtime import FOLD_PROCESS_NAME
from trainledger.costs.report import cost_report
from trainledger.events.decoding import JSON, decode_events
from trainledger.ingest.service import Ingestor
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import (
    TEST_CARD,
    ServerThread,
    event,
    free_port,
    make_admin_token,
    wait_until_ready,
)

REPO = Path(__file__).resolve().parents[2]
POLL_INTERVAL = 0.05
MAX_POLLS = 600  # a bound on waiting, never an assertion about speed

pytestmark = pytest.mark.slow


def http(base_url: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=60, verify=False)


def cli_env(data_dir: Path) -> dict[str, str]:
    """The environment of a subprocess: no Redis URL (so the embedded Valkey), this data dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env["TRAINLEDGER_DATA_DIR"] = str(data_dir)
    return env


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir whose socket path fits in sun_path, so the Valkey URL is a stable unix socket."""
    data = tmp_path / "d"
    if len(str(data / "valkey.sock")) <= 100:
        yield data
        return
    short = Path(tempfile.mkdtemp(prefix="tl-"))  # a deep basetemp: use /tmp instead
    try:
        yield short / "d"
    finally:
        shutil.rmtree(short, ignore_errors=True)


class Serve:
    """`python -m trainledger.cli serve` as a subprocess on a free port."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Serve:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainledger.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                    "--log-level",
                    "warning",
                ],
                cwd=REPO,
                env=cli_env(self.data_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_ready(self.proc, self.base_url, self.log)
        return self

    def stop(self) -> int:
        """SIGTERM, and wait for a clean exit."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"serve ignored SIGTERM:\n{self.log()}") from None
        self.proc = None
        return code

    def kill(self) -> None:
        """Cleanup after a failed test: SIGTERM first, so the embedded Valkey goes with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """A factory of `Serve` processes; whatever is still running at the end is killed."""
    started: list[Serve] = []

    def make(data_dir: Path) -> Serve:
        s = Serve(data_dir, tmp_path / f"serve-{len(started)}.log")
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.kill()


def assert_valkey_gone(data_dir: Path) -> None:
    # With the password: a live server would answer (without it, it would refuse with an
    # AuthenticationError, which is a ConnectionError too).
    password = (data_dir / "valkey.password").read_text().strip()
    client = redis.Redis(
        unix_socket_path=str(data_dir / "valkey.sock"), password=password, socket_timeout=5
    )
    try:
        with pytest.raises(redis.ConnectionError) as refused:
            client.ping()
        assert not isinstance(refused.value, redis.AuthenticationError)
    finally:
        client.close()


def run_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainledger.cli", *args],
        cwd=REPO,
        env=cli_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def snapshot(c: httpx.Client, project: str) -> dict[str, Any]:
    """Everything a reader sees of a project's totals."""
    out = {}
    for name, path, params in [
        ("sku", "/v1/costs", {"group_by": "day,sku,stage,fixed"}),
        ("summary", "/v1/costs/summary", {}),
        ("project", f"/v1/projects/{project}", {}),
        ("rejected", "/v1/events/rejected", {}),
    ]:
        if name != "project":
            params = {"project": project, **params}
        r = c.get(path, params=params)
        assert r.status_code == 200, r.text
        out[name] = r.json()
    return out


EVENTS = [
    event("gpu-1", "8", stage="pretrain"),
    event("gpu-2", "16", stage="pretrain", experiment="run-7"),
    event("res-1", "24", sku="gpu.h100.reserved.hour", stage="pretrain"),
    event("sto-1", "150", sku="storage.hot.gb_day", stage="data_prep"),  # crosses a tier bound
    event("net-1", "12.5", sku="network.cross_region.gb", stage="eval"),
    event("bad-1", "1", sku="gpu.unknown"),  # rejected: a dead letter that must survive too
]
# 8×2.50 + 16×2.50 + 24×1.80 + (100×0.002 + 50×0.0015) + 12.5×0.02
EXPECTED_TOTAL = "103.725"


def test_serve_restart_loses_nothing_and_keeps_the_admin_token(data_dir: Path, serve: Any) -> None:
    data = data_dir
    first = serve(data)
    token_file = data / "admin-token"
    token_bytes = token_file.read_bytes()
    admin = token_bytes.decode().strip()
    assert admin.startswith("tl_")
    url_file = (data / "valkey.url").read_text()
    assert url_file.startswith("unix://")

    with http(first.base_url, admin) as c:
        assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
        r = c.post("/v1/events", json=EVENTS)
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == 5
        before = snapshot(c, "llm")
        tokens_before = c.get("/v1/tokens").json()
    assert before["summary"]["total_cost"] == EXPECTED_TOTAL
    assert before["rejected"]["total"] == 1

    assert first.stop() == 0
    # The embedded Valkey was stopped with it, not left running as an orphan.
    assert not (data / "valkey.url").exists()
    assert_valkey_gone(data)

    second = serve(data)
    assert token_file.read_bytes() == token_bytes  # no new admin token minted
    with http(second.base_url, admin) as c:  # the old token still works
        after = snapshot(c, "llm")
        assert after == before
        assert c.get("/v1/tokens").json() == tokens_before
        # The dedup memory survived as well: the same events again are duplicates.
        r = c.post("/v1/events", json=EVENTS[:5])
        assert r.json()["accepted"] == 0 and r.json()["duplicates"] == 5, r.text
        assert c.get("/v1/costs/summary", params={"project": "llm"}).json() == after["summary"]
        # And it keeps working: a new event lands on top of the old totals.
        r = c.post("/v1/events", json=event("gpu-3", "2"))
        assert r.json()["accepted"] == 1, r.text
        total = c.get("/v1/costs/summary", params={"project": "llm"}).json()["total_cost"]
        assert total == "108.725"
    assert second.stop() == 0
    assert_valkey_gone(data)


async def test_killed_valkey_keeps_acknowledged_writes(data_dir: Path) -> None:
    data = data_dir
    valkey = EmbeddedValkey(data)
    url = valkey.start()
    admin = Principal("test", "admin", None)
    try:
        store = Stores.from_url(url)
        cards = RateCards(store)
        await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
        ingestor = Ingestor(store, cards)
        items, _ = decode_events(msgspec.json.encode(EVENTS), JSON)
        report = await ingestor.ingest(items, admin)
        assert report.accepted == 5
        before = await cost_report(store, "llm", None, None, ["day", "sku", "stage"], {})
        assert before.total_cost == EXPECTED_TOTAL
        await store.close()
    finally:
        valkey.kill()  # SIGKILL right after the acknowledged writes: no shutdown, no flush

    again = EmbeddedValkey(data)
    assert again.start() == url
    try:
        store = Stores.from_url(url)
        after = await cost_report(store, "llm", None, None, ["day", "sku", "stage"], {})
        assert after == before
        assert (await store.rejected.rejected_page("llm", 0, 10))[1] == 1
        assert [v for v, _ in await store.ratecards.rate_card_versions("default")] == [1]
        # Event ids were kept too: re-ingesting finds only duplicates.
        ingestor = Ingestor(store, RateCards(store))
        items, _ = decode_events(msgspec.json.encode(EVENTS[:5]), JSON)
        report = await ingestor.ingest(items, admin)
        assert (report.accepted, report.duplicates) == (0, 5)
        await store.close()
    finally:
        again.stop()


def test_readyz_503_while_redis_is_down(data_dir: Path) -> None:
    data = data_dir
    valkey = EmbeddedValkey(data)
    url = valkey.start()
    server: ServerThread | None = None
    restarted: EmbeddedValkey | None = None
    try:
        admin = asyncio.run(make_admin_token(url))
        server = ServerThread(url).start()
        with http(server.base_url, admin) as c:
            assert c.get("/readyz").status_code == 200
            assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201

            valkey.kill()
            for _ in range(3):
                r = c.get("/readyz")
                assert r.status_code == 503, r.text
                assert int(r.headers["retry-after"]) >= 1
                assert r.json()["status"] == "unavailable"
            # Liveness fails only once Redis has been away longer than
            # TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS (30 s here): not yet.
            assert c.get("/healthz").status_code == 200

            restarted = EmbeddedValkey(data)
            assert restarted.start() == url  # same unix socket, so the same URL
            for _ in range(MAX_POLLS):
                if c.get("/readyz").status_code == 200:
                    break
                time.sleep(POLL_INTERVAL)
            else:
                raise AssertionError("/readyz did not recover after Redis came back")
            # Requests work again, on the data the append-only file kept.
            r = c.get("/v1/rate-cards/default")
            assert r.status_code == 200, r.text
            assert r.json()["current"]["version"] == 1
            r = c.post("/v1/events", json=event("after-outage", "2"))
            assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    finally:
        if server is not None:
            server.stop()
        if restarted is not None:
            restarted.stop()
        valkey.stop()  # releases the lock and url file if the test failed before the kill


def test_cli_token_create_with_and_without_a_running_server(data_dir: Path, serve: Any) -> None:
    data = data_dir

    # 1. No server: refused, naming the data dir (a token no server checks is a mistake)...
    done = run_cli(data, "token", "create", "--role", "read", "--project", "llm")
    assert done.returncode == 1 and str(data) in " ".join(done.stderr.split()), done.stderr
    assert not (data / "appendonlydir").exists()
    # ... unless asked for: the CLI starts a Valkey of its own for the data dir, and stops it.
    done = run_cli(data, "token", "create", "--role", "read", "--project", "llm", "--offline")
    assert done.returncode == 0, done.stderr
    reader = done.stdout.strip()
    assert reader.startswith("tl_") and "\n" not in reader, done.stdout
    assert (data / "appendonlydir").exists()
    assert not (data / "valkey.url").exists()
    assert_valkey_gone(data)

    # The server started afterwards accepts the token, with its role and project scope.
    server = serve(data)
    with http(server.base_url, reader) as c:
        r = c.get("/v1/costs", params={"project": "llm"})
        assert r.status_code == 200, r.text
        assert r.json()["total_events"] == 0
        assert c.get("/v1/costs", params={"project": "other"}).status_code == 403
        assert c.post("/v1/events", json=event("e0")).status_code == 403  # read only
        assert c.get("/v1/tokens").status_code == 403

    # 2. Server running: the CLI must use its Valkey (found through valkey.url). A second
    # Valkey would have failed on the data-dir lock, and stopping it would remove valkey.url.
    url_before = (data / "valkey.url").read_text()
    done = run_cli(data, "token", "create", "--role", "admin", "--name", "ops")
    assert done.returncode == 0, done.stderr
    admin = done.stdout.strip()
    done = run_cli(data, "token", "create", "--role", "ingest", "--project", "llm", "--name", "ci")
    assert done.returncode == 0, done.stderr
    ingester = done.stdout.strip()
    assert ingester.startswith("tl_") and ingester != admin, done.stdout
    assert (data / "valkey.url").read_text() == url_before

    with http(server.base_url, admin) as c:
        assert c.get("/readyz").status_code == 200
        assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
        listed = {t["name"]: t for t in c.get("/v1/tokens").json()}
        assert listed["ci"]["role"] == "ingest" and listed["ci"]["projects"] == ["llm"]
        assert listed["ops"]["role"] == "admin" and listed["ops"]["projects"] is None
    with http(server.base_url, ingester) as c:
        r = c.post("/v1/events", json=event("e1", "2"))
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        assert c.post("/v1/events", json=event("e2", project="other")).status_code == 403
        assert c.get("/v1/costs", params={"project": "llm"}).status_code == 403  # ingest only
    with http(server.base_url, reader) as c:
        r = c.get("/v1/costs", params={"project": "llm"})
        assert r.json()["total_cost"] == "5.00", r.text


def _fold_processes(parent: int) -> list[int]:
    """Descendants of `parent` named as `serve` names its folding process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if comm == FOLD_PROCESS_NAME and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry))
    return found


@pytest.mark.skipif(not Path("/proc/self/comm").exists(), reason="needs Linux's /proc")
def test_serve_folds_in_a_process_of_its_own(data_dir: Path, serve: Any) -> None:
    """The workers do not fold (`trainledger serve` turns that off); its folding process does,
    without any read of the totals asking for it, and it leaves with `serve`."""
    running = serve(data_dir)
    assert running.proc is not None
    # The folding process names itself once it runs, which may be after `serve` is ready.
    for _ in range(MAX_POLLS):
        if folders := _fold_processes(running.proc.pid):
            break
        time.sleep(POLL_INTERVAL)
    assert len(folders) == 1, running.log()
    admin = (data_dir / "admin-token").read_text().strip()
    with http(running.base_url, admin) as c:
        assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
        assert c.post("/v1/events", json=EVENTS).json()["accepted"] == 5
    url = (data_dir / "valkey.url").read_text().strip()
    client = redis.Redis.from_url(url)
    try:
        for _ in range(MAX_POLLS):
            meta = client.hmget(Keys.meta("llm"), "pend_events", "fold_cursor")
            last = client.xrevrange(Keys.log("llm"), count=1)
            if meta[0] == b"0" and last and meta[1] == last[0][0]:
                break
            time.sleep(POLL_INTERVAL)
        else:
            raise AssertionError(f"nothing folded the log: {meta}\n{running.log()}")
        assert client.hgetall(Keys.daily("llm"))  # the totals, written by the fold
    finally:
        client.close()
    assert running.stop() == 0
    for _ in range(MAX_POLLS):
        if not Path(f"/proc/{folders[0]}").exists():
            break
        time.sleep(POLL_INTERVAL)
    else:
        raise AssertionError("the folding process outlived serve")
