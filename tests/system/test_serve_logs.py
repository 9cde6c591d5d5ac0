"""What `trainledger serve` writes: every line in its log format, no secret anywhere, the ready
line only once the socket accepts, every bad setting refused with exit status 2, and one data
directory whatever directory a command runs from (issue 18, logs; issue 17, the data dir).

Each test starts the real command as a subprocess on a fresh data directory (its embedded
Valkey started by `serve` itself) and reads its stdout and stderr as they are.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from trainledger.config import VARIABLES, Variable

from tests.api.test_budgets import this_month
from tests.conftest import TEST_CARD, event, free_port, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

MAX_WAIT_S = 120  # a bound on waiting for the service, never an assertion about speed
FAILURES_BEFORE_SUCCESS = 2  # each webhook's receiver answers 500 this many times first

# Quick webhook retries (the lease must exceed the timeout).
FAST_DELIVERY = {
    "TRAINLEDGER_WEBHOOK_BASE_DELAY_S": "0.05",
    "TRAINLEDGER_WEBHOOK_MAX_DELAY_S": "0.2",
    "TRAINLEDGER_WEBHOOK_POLL_S": "0.05",
    "TRAINLEDGER_WEBHOOK_LEASE_S": "6",
    "TRAINLEDGER_WEBHOOK_TIMEOUT_S": "3",
    "TRAINLEDGER_WEBHOOK_CLAIM_IDLE_S": "1",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAINLEDGER_", "PROMETHEUS")) and k != "XDG_DATA_HOME"
    }
    return env | extra


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temporary directory (the Valkey socket's path must be short)."""
    path = Path(tempfile.mkdtemp(prefix="tl-logs-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Serve:
    """`trainledger serve` with stdout and stderr each in a file of their own."""

    def __init__(self, workdir: Path, env: dict[str, str], *args: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.stdout_path = workdir / "serve.stdout"
        self.stderr_path = workdir / "serve.stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(self.port), *args],
                cwd=workdir,
                env=env,
                stdout=out,
                stderr=err,
            )

    def output(self) -> str:
        return self.stdout_path.read_text(errors="replace") + self.stderr_path.read_text(
            errors="replace"
        )

    def ready(self) -> Serve:
        wait_until_ready(self.proc, self.base_url, self.output)
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FlakyReceiver:
    """A real HTTP receiver on loopback: each path answers 500 `FAILURES_BEFORE_SUCCESS`
    times, then 200."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                path = self.path.split("?", 1)[0]
                failed = sum(1 for p, status in receiver.answers if p == path and status == 500)
                status = 500 if failed < FAILURES_BEFORE_SUCCESS else 200
                receiver.answers.append((path, status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self, path: str) -> bool:
        return (path, 200) in self.answers

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + MAX_WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"waited too long for {what}"
        time.sleep(0.05)


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of `text` as a JSON object (the test fails on the first that is not one)."""
    docs = []
    for line in text.splitlines():
        doc = json.loads(line)
        assert isinstance(doc, dict) and {"time", "level", "logger", "message"} <= set(doc), line
        docs.append(doc)
    return docs


def test_no_secret_in_the_output_and_every_retry_logged(short_dir: Path) -> None:
    """From scratch: a fresh data dir, a first start (token, key and Valkey password made), two
    webhooks whose URLs carry secrets, deliveries that fail and are retried, a request with a
    made-up token. Nothing secret is in stdout or stderr; every line is JSON; each failed
    attempt that is retried is one line with the delivery id, the attempt and the next time."""
    data_dir = short_dir / "data"
    url_query_secret = "q" + os.urandom(12).hex()
    url_path_secret = "p" + os.urandom(12).hex()
    signing_secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    bogus_token = "tl_" + os.urandom(16).hex()
    receiver = FlakyReceiver()
    env = clean_env(
        TRAINLEDGER_DATA_DIR=str(data_dir),
        TRAINLEDGER_WEBHOOK_ALLOWLIST="127.0.0.1",
        **FAST_DELIVERY,
    )
    serve = Serve(short_dir, env)
    try:
        serve.ready()
        admin = (data_dir / "admin-token").read_text().strip()
        standard_path, slack_path = "/standard", f"/services/T0/B0/{url_path_secret}"
        headers = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=serve.base_url, headers=headers, timeout=60) as api:
            assert api.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
            for body in (
                {
                    "url": f"{receiver.url}{standard_path}?token={url_query_secret}",
                    "format": "standard",
                    "secret": signing_secret,
                },
                {"url": receiver.url + slack_path, "format": "slack"},
            ):
                r = api.post("/v1/webhooks", json=body)
                assert r.status_code == 201, r.text
            budget = {"project": "logs", "name": "logs", "amount": "100", "thresholds": [50]}
            assert api.post("/v1/budgets", json=budget).status_code == 201
            sent = api.post(
                "/v1/events", json=[event("e1", "30", project="logs", time=this_month())]
            )
            assert sent.status_code == 200 and sent.json()["accepted"] == 1, sent.text
            refused = api.get("/v1/projects", headers={"Authorization": f"Bearer {bogus_token}"})
            assert refused.status_code == 401
        wait_for(
            lambda: receiver.delivered(standard_path) and receiver.delivered(slack_path),
            "both webhooks to get the alert after their failures",
        )
        secrets = {
            "admin token": admin,
            "secret key": (data_dir / "secret-key").read_text().strip(),
            "Valkey password": (data_dir / "valkey.password").read_text().strip(),
            "signing secret": signing_secret.removeprefix("whsec_"),
            "URL query secret": url_query_secret,
            "URL path secret": url_path_secret,
            "made-up token": bogus_token,
        }
    finally:
        serve.stop()
        receiver.close()

    output = serve.output()
    for name, secret in secrets.items():
        assert secret not in output, f"the {name} is in serve's output"
    lines = json_lines(output)
    assert serve.stdout_path.read_text() == ""  # everything is a log line, on stderr
    (ready,) = [line for line in lines if line["message"].startswith("serving on")]
    # The ready line says where the dashboard is (a log is no terminal: no token in a link).
    assert ready["dashboard"] == ready["url"] + "/ui" and ready["dashboard"] in ready["message"]
    assert any(line.get("admin_token_file") == str(data_dir / "admin-token") for line in lines)

    retries = [line for line in lines if "next_attempt_at" in line]
    per_attempt = Counter((line["delivery_id"], line["attempt"]) for line in retries)
    deliveries = {delivery for delivery, _ in per_attempt}
    assert len(deliveries) == 2, retries  # one alert, two webhooks
    for delivery in deliveries:
        attempts = {n: per_attempt[(delivery, n)] for n in range(1, FAILURES_BEFORE_SUCCESS + 1)}
        assert attempts == dict.fromkeys(attempts, 1), per_attempt  # each once, none missing
    for line in retries:
        assert line["level"] == "warning" and line["http_status"] == 500
        datetime.fromisoformat(line["next_attempt_at"])
        assert line["message"].startswith(f"delivery {line['delivery_id']} ")


def test_the_ready_line_comes_once_the_socket_accepts(short_dir: Path) -> None:
    """A connection made the moment the ready line appears is accepted, and answered."""
    env = clean_env(TRAINLEDGER_DATA_DIR=str(short_dir / "data"))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(port)],
        cwd=short_dir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + MAX_WAIT_S
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stderr, selectors.EVENT_READ)
            while True:
                assert time.monotonic() < deadline and proc.poll() is None, "\n".join(seen)
                if not sel.select(timeout=1):
                    continue
                line = proc.stderr.readline().decode()
                seen.append(line)
                if json.loads(line)["message"].startswith("serving on"):
                    break
        # At once: no retry, no wait. Refused here is the bug this guards against.
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            pass
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).status_code == 200
        assert json.loads(seen[-1])["url"] == f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


REFUSABLE = [v for v in VARIABLES if v.kind.refused is not None]


@pytest.mark.parametrize("variable", REFUSABLE, ids=[v.name for v in REFUSABLE])
def test_every_bad_setting_stops_serve_with_status_2(variable: Variable, tmp_path: Path) -> None:
    """Driven by the configuration's own list: each variable set to a value it refuses stops
    `serve` before it starts anything, with exit status 2 and one JSON line naming the
    variable, the value (never a secret's) and what is allowed."""
    assert variable.kind.refused is not None
    env = clean_env(TRAINLEDGER_DATA_DIR=str(tmp_path / "data"))
    env[variable.name] = variable.kind.refused
    done = subprocess.run(
        [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(free_port())],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=MAX_WAIT_S,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = json_lines(done.stderr)
    assert line["level"] == "error"
    assert variable.name in line["message"] and variable.kind.allowed in line["message"]
    shown = repr(variable.kind.refused) in line["message"]
    assert shown != variable.secret, line["message"]
    assert not (tmp_path / "data").exists()  # nothing was started or made


def test_a_bad_setting_stops_a_client_command_with_status_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainledger.cli", "costs", "--project", "p"],
        cwd=tmp_path,
        env=clean_env(TRAINLEDGER_LOG_LEVEL="loud", COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=MAX_WAIT_S,
    )
    assert done.returncode == 2
    assert "TRAINLEDGER_LOG_LEVEL='loud' is not allowed: one of debug, info" in done.stderr
    assert "Traceback" not in done.stderr


def test_one_data_dir_whatever_the_working_directory(short_dir: Path) -> None:
    """Without TRAINLEDGER_DATA_DIR, `serve` started from one directory and a client command
    run from another use the same ledger: the user data dir (XDG_DATA_HOME here)."""
    xdg = short_dir / "x"
    first, second = short_dir / "a", short_dir / "b"
    first.mkdir()
    second.mkdir()
    env = clean_env(XDG_DATA_HOME=str(xdg))
    serve = Serve(first, env)
    try:
        serve.ready()
        data_dir = xdg / "trainledger"
        assert (data_dir / "admin-token").exists()
        assert not (first / ".trainledger").exists()
        (second / "card.json").write_text(json.dumps(TEST_CARD))
        applied = subprocess.run(
            [sys.executable, "-m", "trainledger.cli", "ratecard", "apply", "card.json"],
            cwd=second,
            env=env | {"TRAINLEDGER_URL": serve.base_url, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=MAX_WAIT_S,
        )
        assert applied.returncode == 0, applied.stderr  # the token found from elsewhere
        assert not (second / ".trainledger").exists()
    finally:
        serve.stop()
    starts = [line for line in json_lines(serve.output()) if "data_dir" in line]
    assert [line["data_dir"] for line in starts] == [str(data_dir)]  # printed at start

    again = Serve(second, env)  # a second start from elsewhere: the same ledger and token
    try:
        again.ready()
        token = (data_dir / "admin-token").read_text().strip()
        cards = httpx.get(
            f"{again.base_url}/v1/rate-cards",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert cards.status_code == 200 and "default" in cards.text, cards.text
    finally:
        again.stop()
    assert "created on first start" not in again.output()


def test_the_token_is_shown_on_a_terminal_only(short_dir: Path) -> None:
    """With stderr a terminal, the first start's token is shown there, as a line in the log
    format; the same start into a file or a pipe (the other tests here) never shows it."""
    data_dir = short_dir / "data"
    port = free_port()
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(port)],
        cwd=short_dir,
        env=clean_env(TRAINLEDGER_DATA_DIR=str(data_dir)),
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )
    os.close(terminal)
    shown = b""
    try:
        deadline = time.monotonic() + MAX_WAIT_S
        with selectors.DefaultSelector() as sel:
            sel.register(controller, selectors.EVENT_READ)
            while b"open the dashboard" not in shown:
                assert time.monotonic() < deadline and proc.poll() is None, shown
                if sel.select(timeout=1):
                    shown += os.read(controller, 65536)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(controller)
    token = (data_dir / "admin-token").read_text().strip()
    lines = json_lines(shown.decode())
    shown_token, link = [line for line in lines if token in line["message"]]
    assert shown_token["logger"] == "trainledger.serve"
    # Then a ready dashboard link, signed in with that token.
    assert link["message"].endswith(f"/ui?token={token}") and f":{port}/ui" in link["message"]
