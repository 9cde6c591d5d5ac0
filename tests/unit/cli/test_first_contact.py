"""What a first `trainledger serve` says when it cannot start: one line saying what to do, no
traceback, and nothing started on the way (no Valkey, no token). These starts end before any
server runs, so they are unit tests."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from trainledger.cli import main
from trainledger.storage.embedded import OWNER_LOCK


def serve(data_dir: Path, port: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    return subprocess.run(
        [
            *(sys.executable, "-m", "trainledger.cli", "serve", "--port", str(port)),
            *("--data-dir", str(data_dir), "--log-format", "text"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if " ERROR " in line]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_busy_port_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(tmp_path / "data", port)
    assert done.returncode == 2
    (line,) = errors(done)
    assert f"cannot start: 127.0.0.1:{port} is taken" in line
    assert f"--port {port + 1}" in line
    # Refused before the store: no Valkey was started, no admin token minted.
    assert not (tmp_path / "data" / "valkey.url").exists()
    assert not (tmp_path / "data" / "admin-token").exists()


def test_a_data_dir_another_process_owns_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    fd = os.open(data_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `serve` holds it
        done = serve(data_dir, free_port())
    finally:
        os.close(fd)
    assert done.returncode == 2
    (line,) = errors(done)
    assert f"cannot start: {data_dir.resolve()} is in use by another trainledger process" in line
    assert "--data-dir" in line and "TRAINLEDGER_REDIS_URL" in line


def test_token_create_on_a_data_dir_no_server_uses_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The likely mistake (another data dir than the server's) is said, not a token minted
    into a store no server reads; nothing is started or written there."""
    data_dir = tmp_path / "not-the-servers"
    for name in list(os.environ):
        if name.startswith("TRAINLEDGER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TRAINLEDGER_DATA_DIR", str(data_dir))
    assert main(["token", "create", "--role", "read"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    said = " ".join(err.split())
    assert f"no trainledger server uses the data dir {data_dir}" in said
    assert "--offline" in said and "trainledger serve" in said
    assert not data_dir.exists()


def test_ratecard_example_prints_the_example_card(capsys: pytest.CaptureFixture[str]) -> None:
    """The card the docs name by its path in a checkout, from the package (a wheel has no
    `service/`): `trainledger ratecard example > card.json`, ready to apply."""
    assert main(["ratecard", "example"]) == 0
    out = capsys.readouterr().out
    shipped = Path(__file__).resolve().parents[3] / "service" / "cli" / "demo" / "ratecard.json"
    assert json.loads(out) == json.loads(shipped.read_text())
    assert len(json.loads(out)["skus"]) == 17
