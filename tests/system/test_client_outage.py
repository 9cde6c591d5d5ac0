"""The client through an outage: `trainledger serve` stopped and restarted mid-stream, and a
rate limit low enough to answer 429 between, while a spool (drained by `trainledger agent`)
and a batcher keep posting. Every event sent is counted once: no fewer, none twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from trainledger.client import Client, RetryPolicy, ServiceUnreachable, Spool

from tests.conftest import TEST_CARD, event, free_port, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
RATE_LIMIT = 4  # requests a second per token: the posts below need more, so some get 429
PATIENT = RetryPolicy(attempts=100_000, base=0.05, cap=0.5)
MAX_POLLS = 3000  # a bound on waiting (0.05 s apart), never an assertion about speed

pytestmark = pytest.mark.slow


def env_for(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env["TRAINLEDGER_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


class Service:
    """`trainledger serve` on one port and data directory, stopped and started again."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir, self.log_path = data_dir, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "trainledger.cli", "serve", "--port", str(self.port)),
                    *("--data-dir", str(self.data_dir), "--log-level", "warning"),
                ],
                cwd=REPO,
                env=env_for(self.data_dir, TRAINLEDGER_RATE_LIMIT_PER_SECOND=str(RATE_LIMIT)),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_ready(self.proc, self.url, lambda: self.log_path.read_text(errors="replace"))

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0, self.log_path.read_text(errors="replace")
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()


@pytest.fixture
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # A short path: the embedded Valkey's unix socket must fit in sun_path.
    base = Path(tmp_path_factory.mktemp("out", numbered=True))
    data = Path(os.environ.get("TMPDIR", "/tmp")) / f"tl-out-{os.getpid()}-{base.name}"
    s = Service(data, base / "serve.log")
    s.start()
    try:
        yield s
    finally:
        s.kill()
        subprocess.run(["rm", "-rf", str(data)], check=False)


def quantity(n: int) -> str:
    return f"{n % 7 + 1}.{n % 1000:03d}"


def events(project: str, first: int, count: int) -> list[dict[str, Any]]:
    return [
        event(f"{project}-{n}", quantity(n), project=project) for n in range(first, first + count)
    ]


def counted(client: Client, project: str) -> tuple[int, Decimal]:
    report = client.json("GET", "/v1/costs", params={"project": project, "group_by": "sku"})
    return int(report["total_events"]), Decimal(report["total_cost"])


def expected(ids: range) -> Decimal:
    return sum((Decimal(quantity(n)) * Decimal("2.50") for n in ids), Decimal(0))


def wait_for(condition: Any) -> None:
    for _ in range(MAX_POLLS):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("gave up waiting")


def test_nothing_lost_nothing_twice_through_a_restart_and_429s(
    service: Service, tmp_path: Path
) -> None:
    token = service.token()
    retried: list[int | Exception] = []
    client = Client(
        service.url, token, retry=PATIENT, on_retry=lambda n, d, why: retried.append(why)
    )
    client.request("PUT", "/v1/rate-cards/default", json=TEST_CARD)
    spool = Spool(tmp_path / "spool")
    agent_log = tmp_path / "agent.log"
    with open(agent_log, "wb") as log:
        agent = subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "trainledger.cli",
                    "agent",
                    "--spool",
                    str(spool.directory),
                ),
                *("--interval", "0.1", "--max-backoff", "0.5", "--batch-size", "10"),
            ],
            cwd=REPO,
            env=env_for(service.data_dir, TRAINLEDGER_URL=service.url, TRAINLEDGER_TOKEN=token),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    # A second batcher whose retries give up long before the outage ends (issue 27).
    short = Client(service.url, token, retry=RetryPolicy(attempts=2, base=0.01, cap=0.05))
    try:
        with (
            client,
            short,
            client.batcher(size=25, interval=0.2) as batcher,
            short.batcher(size=10, interval=0.1) as impatient,
        ):
            # Up: both paths post, faster than the rate limit allows.
            for n in range(0, 100, 5):
                spool.put(events("spooled", n, 5))
            batcher.extend(events("batched", 0, 120))
            batcher.flush()
            service.stop()
            # Down: the spool takes events at once; the batcher's timer keeps retrying.
            for n in range(100, 150, 5):
                spool.put(events("spooled", n, 5))
            batcher.extend(events("batched", 120, 20))
            for e in events("impatient", 0, 60):
                impatient.add(e)  # never raises, though every flush gives up meanwhile
            wait_for(lambda: isinstance(impatient.last_error, ServiceUnreachable))
            assert impatient.queued > 0
            service.start()
            # Up again: more, and some sent a second time (a resend is harmless).
            for n in range(150, 250, 5):
                spool.put(events("spooled", n, 5))
            spool.put(events("spooled", 0, 30))
            batcher.extend(events("batched", 140, 160))
            batcher.extend(events("batched", 100, 40))
            impatient.extend(events("impatient", 60, 40))
            # Its background flush keeps trying past each give-up (a 429 under the shared
            # limit included); close() would flush once more and give up on a 429 itself.
            wait_for(lambda: impatient.report.answered == 100)
        wait_for(lambda: spool.pending() == 0)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=60) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    agent_said = agent_log.read_text(errors="replace")
    assert "agent: stopped; 0 events spooled" in agent_said, agent_said
    # Both kinds of trouble happened, to both paths: the rate limit and the outage.
    # (Which path meets the limit depends on how the two interleave: at least one does.)
    assert 429 in retried or "(HTTP 429)" in agent_said, agent_said
    assert any(isinstance(why, httpx.TransportError) for why in retried)
    assert any("retrying" in line and "HTTP" not in line for line in agent_said.splitlines()), (
        agent_said
    )
    assert batcher.report.answered == 340
    with Client(service.url, token, retry=PATIENT) as reader:
        assert counted(reader, "spooled") == (250, expected(range(250)))
        assert counted(reader, "batched") == (300, expected(range(300)))
        assert counted(reader, "impatient") == (100, expected(range(100)))
    assert impatient.last_error is None and impatient.report.answered == 100
    assert spool.files() == [] and list(spool.failed.iterdir()) == []


def start_agent(service: Service, spool: Spool, log: Path, token: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "trainledger.cli",
                    "agent",
                    "--spool",
                    str(spool.directory),
                ),
                *("--interval", "0.1", "--max-backoff", "0.5", "--batch-size", "5"),
            ],
            cwd=REPO,
            env=env_for(service.data_dir, TRAINLEDGER_URL=service.url, TRAINLEDGER_TOKEN=token),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_an_agent_killed_mid_drain_loses_nothing(service: Service, tmp_path: Path) -> None:
    token = service.token()
    spool = Spool(tmp_path / "spool")
    for n in range(0, 200, 5):
        spool.put(events("crash", n, 5))
    with Client(service.url, token, retry=PATIENT) as client:
        client.request("PUT", "/v1/rate-cards/default", json=TEST_CARD)
        first = start_agent(service, spool, tmp_path / "agent.log", token)
        try:
            # SIGKILL (no clean shutdown) once some, not all, of the spool is counted.
            wait_for(lambda: counted(client, "crash")[0] > 0)
            first.kill()
            first.wait()
        finally:
            if first.poll() is None:
                first.kill()
        second = start_agent(service, spool, tmp_path / "agent.log", token)
        try:
            wait_for(lambda: spool.pending() == 0)
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
        finally:
            if second.poll() is None:
                second.kill()
        assert counted(client, "crash") == (200, expected(range(200)))
