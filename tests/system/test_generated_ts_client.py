"""A TypeScript client from the committed `openapi/openapi.json`, made by stock generators: the
types by `openapi-typescript` (default options), the calls by `openapi-fetch`, both from npm.
`ts_client/drive.ts` is compiled by `tsc --strict` against the generated types (a spec whose
types did not fit its calls fails here) and run by node against a live service: it puts a
rate card, posts events as a JSON batch, as a batch the ledger rejects, as one CloudEvent, as
a CloudEvents batch and as NDJSON (each format through its own operation), and reads the
costs; this test checks the figures it prints.

The npm packages (`ts_client/package.json`, pinned) are installed once into
`~/.cache/trainledger/npm-<hash of package.json>` and reused. Without node or npm the test
skips, but fails under CI (the CI environment variable set), where they must be present."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import TEST_CARD, Api

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "openapi" / "openapi.json"
SOURCES = Path(__file__).resolve().parent / "ts_client"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it (apt-get install nodejs npm)")
        pytest.skip(f"{name} is not installed")
    return found


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    run = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, f"{args}:\n{run.stdout}\n{run.stderr}"
    return run.stdout


def _packages(npm: str) -> Path:
    """The pinned npm packages, installed once per version of package.json."""
    manifest = (SOURCES / "package.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainledger"
    target = cache / f"npm-{hashlib.sha256(manifest).hexdigest()[:16]}"
    if (target / "node_modules" / ".package-lock.json").exists():
        return target
    staging = cache / f"{target.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "package.json").write_bytes(manifest)
    _run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], staging)
    try:
        staging.rename(target)  # another worker may have won the race: theirs is as good
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


# One backend is enough: what is tested is the client, not the store (~30 s a run, tsc mostly).
@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)
def test_typescript_client_drives_the_service(api: Api, tmp_path: Path) -> None:
    node, npm = _tool("node"), _tool("npm")
    modules = _packages(npm) / "node_modules"
    work = tmp_path / "ts"
    work.mkdir()
    for name in ("drive.ts", "tsconfig.json", "package.json"):
        shutil.copy(SOURCES / name, work / name)
    (work / "node_modules").symlink_to(modules, target_is_directory=True)

    cli = modules / "openapi-typescript" / "bin" / "cli.js"
    generated = _run([node, str(cli), str(SPEC), "--output", "schema.d.ts"], work)
    assert "warn" not in generated.lower(), generated
    _run([node, str(modules / "typescript" / "bin" / "tsc"), "-p", "tsconfig.json"], work)
    env = {
        **os.environ,
        "TRAINLEDGER_URL": api.base_url,
        "TRAINLEDGER_TOKEN": api.admin_token,
        "TRAINLEDGER_CARD": json.dumps(TEST_CARD),
    }
    answer = json.loads(_run([node, str(work / "out" / "drive.js")], work, env))

    assert answer["card"] == 201
    assert answer["batch"] == {"status": 200, "accepted": 3}
    assert answer["refused"] == {"status": 422, "rejected": ["ts-bad"]}
    assert answer["cloud"] == {"status": 200, "accepted": 1}
    assert answer["cloudBatch"] == {"status": 200, "accepted": 2}
    assert answer["ndjson"] == {"status": 200, "accepted": 1}
    # 3 events × 2 h and four of 1 h, at 2.50 an hour.
    assert answer["total_events"] == 7
    assert Decimal(answer["total_cost"]) == Decimal("25")
    assert [(key, Decimal(cost)) for key, cost in answer["rows"]] == [("ts", Decimal("25"))]
