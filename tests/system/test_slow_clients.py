"""Slow clients are not held for ever: `trainledger serve` closes connections whose request
head or body does not arrive within TRAINLEDGER_HEADER_TIMEOUT_S / TRAINLEDGER_BODY_TIMEOUT_S
(service/http/protocol.py).

Real TCP sockets against a real `trainledger serve` (embedded Valkey, its own data dir),
with the timeouts set small. The assertions are on what the server does (it closes, after a
408 where any of the request arrived), never on how long it took: each wait is bounded far
above the timeouts, and a server that holds the connection fails the test at that bound.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainledger.config import ConfigError, Settings

from tests.conftest import free_port, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
HEADER_TIMEOUT_S = "1"
BODY_TIMEOUT_S = "1.5"
# How long a test waits for the server to close a socket: a bound, not a speed assertion.
CLOSE_BOUND_S = 30.0
HELD = 12  # slow sockets of each kind


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(base URL, admin token) of a `trainledger serve` with small read timeouts."""
    root = Path(tempfile.mkdtemp(prefix="tl-slow-"))  # short: the Valkey socket path
    data_dir = root / "d"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env.update(
        TRAINLEDGER_DATA_DIR=str(data_dir),
        TRAINLEDGER_HEADER_TIMEOUT_S=HEADER_TIMEOUT_S,
        TRAINLEDGER_BODY_TIMEOUT_S=BODY_TIMEOUT_S,
    )
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainledger.cli",
                "serve",
                "--port",
                str(port),
                "--workers",
                "2",
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_ready(proc, base_url, lambda: log_path.read_text(errors="replace"))
        yield base_url, (data_dir / "admin-token").read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def connect(base_url: str) -> socket.socket:
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.settimeout(CLOSE_BOUND_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection. A server that holds the
    connection past the bound fails the test (socket.timeout)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(
            f"the server held a slow connection for {CLOSE_BOUND_S} s (got {data[:200]!r})"
        ) from None
    except ConnectionResetError:
        pass  # closed with unread data in its buffer: closed all the same
    finally:
        sock.close()
    return data


def assert_408(answer: bytes, part: str) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"connection: close" in head.lower()
    problem = json.loads(body)
    assert problem["status"] == 408 and problem["type"].endswith("/request-timeout")
    assert part in problem["detail"]


def test_slow_heads_and_bodies_are_closed_and_others_are_served(
    server: tuple[str, str],
) -> None:
    base_url, admin = server
    silent = [connect(base_url) for _ in range(HELD // 2)]  # connect, then send nothing
    half_line = [connect(base_url) for _ in range(HELD // 2)]
    for sock in half_line:
        sock.sendall(b"GET /heal")  # part of a request line, then nothing
    slow_body = [connect(base_url) for _ in range(HELD)]
    for sock in slow_body:
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: ledger\r\n"
            b"Authorization: Bearer " + admin.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            b'[{"id": "e1", '  # a few bytes of the body, then nothing
        )
    # A kept-alive connection: one full request answered, then half of the next one.
    kept = connect(base_url)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: ledger\r\n\r\n")
    first = b""
    while b"\r\n\r\n" not in first or not first.rstrip().endswith(b"}"):
        chunk = kept.recv(65536)
        assert chunk, "the server closed a kept-alive connection after one request"
        first += chunk
    assert first.startswith(b"HTTP/1.1 200 ")
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: led")

    # Meanwhile others are served.
    with httpx.Client(base_url=base_url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200

    for sock in silent:
        assert read_until_closed(sock) == b""  # nothing of a request came: just closed
    for sock in half_line:
        assert_408(read_until_closed(sock), "headers")
    for sock in slow_body:
        assert_408(read_until_closed(sock), "body")
    assert_408(read_until_closed(kept), "headers")

    # The timeouts bound the whole head, not each piece: a request that arrives in pieces,
    # complete in time, is answered as usual.
    sock = connect(base_url)
    try:
        for piece in (b"GET /hea", b"lthz HTTP/1.1\r\n", b"Host: ledger\r\n", b"\r\n"):
            sock.sendall(piece)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, "a request sent in pieces was not answered"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ")
    finally:
        sock.close()


def _posts_part_of_a_body(base_url: str, admin: str, path: bytes) -> socket.socket:
    sock = connect(base_url)
    sock.sendall(
        b"POST " + path + b" HTTP/1.1\r\nHost: ledger\r\n"
        b"Authorization: Bearer " + admin.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    return sock


def test_a_client_gone_mid_body_is_no_server_error(server: tuple[str, str], tmp_path: Path) -> None:
    """Cut off by the body timeout, or gone on its own: the request is counted and logged as
    499 (client closed request), not as a 500 with a traceback that pages an operator. The
    ingest route reads its body itself; a JSON route's body is read by the guard."""
    base_url, admin = server
    for path in (b"/v1/events", b"/v1/budgets"):
        assert_408(read_until_closed(_posts_part_of_a_body(base_url, admin, path)), "body")
        _posts_part_of_a_body(base_url, admin, path).close()  # gone before the timeout
    with httpx.Client(base_url=base_url, timeout=30) as client:
        # Each of the four is counted once it is over: wait for them (bounded, not timed).
        def counted() -> dict[tuple[str, str], float]:
            found: dict[tuple[str, str], float] = {}
            for family in text_string_to_metric_families(client.get("/metrics").text):
                for sample in family.samples:
                    labels = sample.labels
                    if sample.name == "trainledger_requests_total" and labels["method"] == "POST":
                        key = (labels["path"], labels["status_code"])
                        found[key] = found.get(key, 0.0) + sample.value
            return found

        for _ in range(300):
            seen = counted()
            if sum(seen.values()) >= 4:
                break
            time.sleep(0.1)
    assert seen == {("/v1/events", "499"): 2.0, ("/v1/budgets", "499"): 2.0}
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert "Uncaught exception" not in log and "Traceback" not in log
    access = [json.loads(line) for line in log.splitlines() if '"trainledger.access"' in line]
    assert sorted(a["status"] for a in access if a["method"] == "POST") == [499] * 4


def test_timeouts_must_be_positive_numbers() -> None:
    name = "TRAINLEDGER_HEADER_TIMEOUT_S"
    assert Settings.from_env({}).header_timeout_s == 10.0
    assert Settings.from_env({name: ""}).header_timeout_s == 10.0
    assert Settings.from_env({name: "2.5"}).header_timeout_s == 2.5
    for bad in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(
            ConfigError, match=f"{name}='{bad}' is not allowed: a number of seconds, more than 0"
        ):
            Settings.from_env({name: bad})
