"""`trainledger serve` with the environment compose.yaml gives it, secrets as files.

No Docker here: the service's environment is read from compose.yaml, each `/run/secrets/<name>`
replaced by a file of this test (as Docker mounts them) and the Valkey's URL by the test's
Redis. Then: the admin token from the secret opens the API, is never printed nor written to
the data dir, stays one token across restarts, and client commands find it (as in
`docker compose exec trainledger trainledger …`); a token too weak to use stops the start
without showing it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml

from tests.conftest import TEST_CARD, free_port, wait_until_ready

ROOT = Path(__file__).resolve().parents[2]
SECRETS_DIR = "/run/secrets/"
INTERPOLATION = re.compile(r"\$\{(\w+):-([^}]*)\}")  # compose's ${NAME:-default}
TRAINLEDGER = (sys.executable, "-m", "trainledger.cli")
EXIT_WAIT_S = 60  # a bound on waiting for a refused start, not a speed assertion


def compose_environment(secret_files: dict[str, Path], redis_url: str) -> dict[str, str]:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text())
    declared: dict[str, str] = document["services"]["trainledger"]["environment"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    for name, value in declared.items():
        if value.startswith(SECRETS_DIR):
            value = str(secret_files[value.removeprefix(SECRETS_DIR)])
        elif name == "TRAINLEDGER_REDIS_URL":
            value = redis_url
        env[name] = INTERPOLATION.sub(lambda m: os.environ.get(m[1]) or m[2], value)
    return env


def secret_files(tmp_path: Path, admin_token: str) -> dict[str, Path]:
    """The two secrets, made as docs/operations/docker.md says."""
    made = {
        "admin_token": admin_token,
        "secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
    }
    files = {}
    for name, value in made.items():
        path = tmp_path / "secrets" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(value + "\n")
        files[name] = path
    return files


@contextmanager
def serving(env: dict[str, str], data_dir: Path, log_path: Path) -> Iterator[str]:
    port = free_port()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*TRAINLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_until_ready(proc, base_url, lambda: log_path.read_text(errors="replace"))
            yield base_url
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def tokens(base_url: str, token: str) -> httpx.Response:
    return httpx.get(
        f"{base_url}/v1/tokens", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def test_the_admin_token_comes_from_the_secret_and_is_never_shown(
    clean_redis: str, tmp_path: Path
) -> None:
    admin_token = "tl_" + secrets.token_urlsafe(32)
    files = secret_files(tmp_path, admin_token)
    env = compose_environment(files, clean_redis)
    data_dir, log_path = tmp_path / "data", tmp_path / "serve.log"

    for _ in range(2):  # the second start finds the token known: still one admin token
        with serving(env, data_dir, log_path) as base_url:
            answer = tokens(base_url, admin_token)
            assert answer.status_code == 200, answer.text
            admins = [t for t in answer.json() if t["role"] == "admin"]
            assert [(t["name"], t["projects"]) for t in admins] == [
                ("TRAINLEDGER_ADMIN_TOKEN_FILE", None)
            ]
            assert tokens(base_url, admin_token[:-1] + "x").status_code == 401

            # A client command in the container: the token from the secret, nothing else.
            card = tmp_path / "card.json"
            card.write_text(json.dumps(TEST_CARD))
            applied = subprocess.run(
                [*TRAINLEDGER, "ratecard", "apply", str(card), "--url", base_url],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert applied.returncode == 0, applied.stdout + applied.stderr

    log = log_path.read_text(errors="replace")
    assert "serving on" in log
    for secret in (admin_token, files["secret_key"].read_text().strip()):
        assert secret not in log
    assert not (data_dir / "admin-token").exists()


def test_a_client_reads_its_token_from_a_file(clean_redis: str, tmp_path: Path) -> None:
    admin_token = "tl_" + secrets.token_urlsafe(32)
    env = compose_environment(secret_files(tmp_path, admin_token), clean_redis)
    with serving(env, tmp_path / "data", tmp_path / "serve.log") as base_url:
        token_file = tmp_path / "token"
        token_file.write_text(admin_token + "\n")
        client_env = {k: v for k, v in env.items() if not k.startswith("TRAINLEDGER_")}
        card = tmp_path / "card.json"
        card.write_text(json.dumps(TEST_CARD))
        command = [*TRAINLEDGER, "ratecard", "apply", str(card)]
        command += ["--url", base_url]
        without = subprocess.run(
            command, env=client_env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert without.returncode == 1 and "TRAINLEDGER_TOKEN_FILE" in without.stderr
        with_file = subprocess.run(
            command,
            env=client_env | {"TRAINLEDGER_TOKEN_FILE": str(token_file)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert with_file.returncode == 0, with_file.stdout + with_file.stderr


def test_a_weak_or_missing_token_secret_stops_the_start(tmp_path: Path) -> None:
    """Refused before any connection: the Valkey's URL is compose's own, unreachable here."""
    weak = "tl_short"
    files = secret_files(tmp_path, weak)
    env = compose_environment(files, "redis://valkey:6379/0")
    command = [*TRAINLEDGER, "serve", "--port", str(free_port())]
    command += ["--data-dir", str(tmp_path / "data")]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXIT_WAIT_S)
    assert refused.returncode == 2
    assert "TRAINLEDGER_ADMIN_TOKEN_FILE" in refused.stderr and "32 to 512" in refused.stderr
    assert weak not in refused.stdout + refused.stderr

    files["admin_token"].unlink()
    missing = subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXIT_WAIT_S)
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr and str(files["admin_token"]) in missing.stderr
