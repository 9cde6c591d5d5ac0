"""The real server for the HTTP benchmarks: `trainledger serve` in a subprocess.

It runs exactly as an operator would start it: `python -m trainledger.cli serve` with
`TRAINLEDGER_DATA_DIR=<tmp>`, its own embedded Valkey (append-only file, fsync every second),
uvicorn with uvloop and httptools, and `--workers N`. The local admin token it mints on
first start is read from `<tmp>/admin-token`. With `redis_url` it serves an existing Valkey
(the queries benchmark points it at the dataset loaded in-process) and a token is passed in.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Seals webhook secrets in a bench run on an external Redis (nothing secret is registered).
BENCH_SECRET_KEY = "YmVuY2gtb25seSBrZXksIG5vdGhpbmcgc2VjcmV0IDE="

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(
        self,
        workers: int = 1,
        *,
        redis_url: str | None = None,
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workers = workers
        self.external_redis_url = redis_url
        self.token = token or ""
        self.env = env or {}
        self.port = 0
        self.data_dir = Path()
        self.proc: subprocess.Popen[bytes] | None = None
        self.redis_url = redis_url or ""
        self._log: Any = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> Server:
        self.data_dir = Path(tempfile.mkdtemp(prefix="tl-bench-srv-"))
        self.port = free_port()
        env = dict(os.environ)
        env.pop("TRAINLEDGER_REDIS_URL", None)
        # One token posts everything here: keep the per-token limiter (and its INCR per
        # request) in the path, but high enough that it never answers 429.
        env["TRAINLEDGER_RATE_LIMIT_PER_SECOND"] = "1000000"
        env.update(self.env)
        env["TRAINLEDGER_DATA_DIR"] = str(self.data_dir)
        if self.external_redis_url:
            env["TRAINLEDGER_REDIS_URL"] = self.external_redis_url
            # An external Redis needs the key that seals webhook secrets given: a fixed one
            # (the bench registers no real webhook), so that runs on one Redis agree.
            env.setdefault("TRAINLEDGER_SECRET_KEY", BENCH_SECRET_KEY)
        cmd = [
            sys.executable,
            "-m",
            "trainledger.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
        ]
        self._log = open(self.data_dir / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trainledger serve exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("trainledger serve did not become ready")
            try:
                status, _ = self.request("GET", "/readyz", timeout=2)
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        if self.workers > 1:
            # Every worker answers /readyz alike; give the others time to finish starting.
            self._wait_workers(deadline)
        if not self.external_redis_url:
            self.redis_url = (self.data_dir / "valkey.url").read_text().strip()
            token_file = self.data_dir / "admin-token"
            while not token_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.token = token_file.read_text().strip()
        return self

    def _wait_workers(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if len(self.worker_pids()) >= self.workers:
                time.sleep(1.5)
                return
            time.sleep(0.1)

    def worker_pids(self) -> list[int]:
        """Pids of the processes that serve HTTP (the workers, or the server itself)."""
        if self.proc is None:
            return []
        pids = []
        for pid in _children(self.proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"valkey" in cmdline or b"resource_tracker" in cmdline or _is_fold_process(pid):
                continue
            if b"multiprocessing" in cmdline or b"spawn_main" in cmdline:
                pids.append(pid)
        return pids or [self.proc.pid]

    def fold_pid(self) -> int | None:
        """Pid of the folding process `trainledger serve` runs beside its workers."""
        if self.proc is None:
            return None
        return next((pid for pid in _children(self.proc.pid) if _is_fold_process(pid)), None)

    def valkey_pid(self) -> int | None:
        if self.proc is None:
            return None
        for pid in _children(self.proc.pid):
            try:
                if b"valkey" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                continue
        return None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 60.0,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["content-type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw

    def put_card(self, card: dict[str, Any], name: str = "default") -> None:
        status, body = self.request("PUT", f"/v1/rate-cards/{name}", card)
        if status != 201:
            raise RuntimeError(f"PUT rate card: {status} {body}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(
                (self.data_dir / "server.log").read_text(errors="replace").splitlines()[-lines:]
            )
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                # The CLI stops uvicorn and then its embedded Valkey on SIGTERM.
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
            # Anything of this server's own process group still alive (a worker, its Valkey).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.data_dir != Path() and self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _is_fold_process(pid: int) -> bool:
    from trainledger.cli.serve_runtime import FOLD_PROCESS_NAME

    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == FOLD_PROCESS_NAME
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """All descendants of pid (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def process_cpu_seconds(pids: list[int], reaped_children: bool = False) -> float:
    """User+system CPU seconds used so far by the given processes; with `reaped_children`,
    those of their children that have exited and been waited for instead (Valkey's
    append-only-file rewrites run in a forked child, invisible in Valkey's own time)."""
    ticks = os.sysconf("SC_CLK_TCK")
    first = 13 if reaped_children else 11  # cutime, cstime / utime, stime
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[first]) + int(fields[first + 1])) / ticks
    return total


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, all CPUs summed (/proc/stat):
    busy is everything but idle and I/O wait. (0, 0) where /proc/stat is missing."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0, 0.0
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    ticks = [int(v) for v in fields[:8]] + [0] * max(0, 8 - len(fields))
    hz = os.sysconf("SC_CLK_TCK")
    every = sum(ticks)
    return (every - ticks[3] - ticks[4]) / hz, every / hz
