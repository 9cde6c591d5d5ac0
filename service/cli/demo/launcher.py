"""The demo's own service: `trainledger serve` in a subprocess on a free port, with the embedded
Valkey in a temporary directory, started and stopped around the walkthrough."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from ...config.environment import child_environment
from .session import DemoError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_NOT_THE_DEMOS = frozenset(
    {
        "TRAINLEDGER_REDIS_URL",
        "TRAINLEDGER_ADMIN_TOKEN_FILE",
        "TRAINLEDGER_SECRET_KEY",
        "TRAINLEDGER_SECRET_KEY_FILE",
    }
)
_SERVE = "import sys; from trainledger.cli import main; sys.exit(main(sys.argv[1:]))"


@contextmanager
def local_service() -> Iterator[tuple[str, str, Path]]:
    """`trainledger serve` in a subprocess on a free port, its embedded Valkey in a temporary
    directory; yields (url, admin token, data dir) and stops it afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix="trainledger-demo-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # Its own store and keys: not the Redis, the admin token or the secret key of a service
    # configured in this environment (a compose service's, for one).
    env = child_environment(
        _NOT_THE_DEMOS,
        TRAINLEDGER_DATA_DIR=str(data_dir),
        TRAINLEDGER_PUBLIC_URL=url,
        # The demo's receiver is plain http on loopback: allowed for this service only.
        TRAINLEDGER_WEBHOOK_ALLOWLIST="127.0.0.1",
        TRAINLEDGER_WEBHOOK_POLL_S="0.2",
    )
    log_path = data_dir / "server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SERVE,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the demo, which then stops it in order
    )
    try:
        token = _wait_ready(proc, url, data_dir, log_path)
        yield url, token, data_dir
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, data_dir: Path, log_path: Path) -> str:
    deadline = time.monotonic() + 60
    token_file = data_dir / "admin-token"
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise DemoError(
                    f"trainledger serve exited with {proc.returncode}:\n"
                    + log_path.read_text(errors="replace")[-3000:]
                )
            with suppress(httpx.HTTPError):
                if client.get(url + "/readyz").status_code == 200 and token_file.exists():
                    return token_file.read_text().strip()
            time.sleep(0.1)
    raise DemoError(
        "trainledger serve did not become ready within 60 s:\n"
        + log_path.read_text(errors="replace")[-3000:]
    )
