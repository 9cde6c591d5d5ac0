"""The built wheel, installed: what a non-editable install needs is in it.

The source (the files the build reads: pyproject.toml, setup.py, README.md, LICENSE, service/,
costcore/) is copied to a temporary directory and built there into a wheel, so the checkout
is left alone and nothing from it is found by accident. The wheel goes into a fresh virtual
environment, its dependencies from the package index (pip's cache makes that quick after the
first run). Then, from a directory outside the checkout: `trainledger serve` answers
`/healthz` and `trainledger demo` runs to the end (its rate card is package data: the demo
must find it in the installed package).

Slow (the compiled kernel is built from scratch, about 2–3 min on the 2-core machine, then the
install, about 1 min): the dependencies are installed while the wheel builds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, wait_until_ready

ROOT = Path(__file__).resolve().parents[2]
# What the build reads; compiled and generated files are left behind (the wheel makes its own).
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "service", "costcore")
LEFT_BEHIND = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.c", "build", "*.egg-info")

pytestmark = pytest.mark.slow


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that points at the checkout or a running service."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TRAINLEDGER_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    return env | extra


def copy_sources(dest: Path) -> Path:
    dest.mkdir()
    for name in BUILD_INPUTS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=LEFT_BEHIND)
        else:
            shutil.copy2(src, dest / name)
    return dest


def run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


def check_wheel_contents(wheel: Path) -> None:
    """The data files the code reads (Lua scripts, the demo's rate card, type markers) and the
    licence are in the wheel, not only in the checkout."""
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = {
        "trainledger/" + str(path.relative_to(ROOT / "service"))
        for path in (ROOT / "service").rglob("*")
        if path.suffix in (".lua", ".json") or path.name == "py.typed"
    }
    assert "trainledger/cli/demo/ratecard.json" in needed
    assert needed <= names, sorted(needed - names)
    licences = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert licences, sorted(n for n in names if ".dist-info/" in n)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()


def install(tmp_path: Path) -> Path:
    """Build the wheel and install it into a fresh venv; return the venv's bin directory."""
    sources = copy_sources(tmp_path / "src")
    wheels = tmp_path / "wheels"
    build = subprocess.Popen(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), "."],
        cwd=sources,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
        bin_dir = tmp_path / "venv" / "bin"
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # The dependencies first, while the wheel builds; the wheel's own install below then
        # checks them against its metadata (and would fetch any the wheel declares beyond).
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        deps = run([*pip, *project["dependencies"]], tmp_path, 900)
        assert deps.returncode == 0, deps.stdout + deps.stderr
        output, _ = build.communicate(timeout=1200)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert build.returncode == 0, output
    (wheel,) = wheels.glob("trainledger-*.whl")
    check_wheel_contents(wheel)
    installed = run([*pip, str(wheel)], tmp_path, 600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return bin_dir


def test_the_installed_wheel_serves_and_runs_the_demo(tmp_path: Path) -> None:
    bin_dir = install(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    # The package imported is the installed one, not the checkout.
    where = run(
        [str(bin_dir / "python"), "-c", "import trainledger; print(trainledger.__file__)"],
        outside,
        60,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv"), where.stdout

    # `trainledger serve`, its embedded Valkey in a data dir of its own.
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(bin_dir / "trainledger"),
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "data"),
            ],
            cwd=outside,
            env=clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_until_ready(proc, base_url, lambda: log_path.read_text(errors="replace"))
            assert httpx.get(f"{base_url}/healthz", timeout=10).status_code == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, log_path.read_text(errors="replace")

    # `trainledger demo`: its own service, the rate card from the installed package.
    demo = run([str(bin_dir / "trainledger"), "demo"], outside, 600)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    for heading in ("1. Rate card", "5. Replay", "9. Waste", "10. Cost and effect", "In short"):
        assert heading in demo.stdout, demo.stdout
    assert "winner on cost per point: " in demo.stdout, demo.stdout
    assert "demo failed" not in demo.stdout
    # The docs' service/cli/demo/ratecard.json, from the wheel: `trainledger ratecard example`.
    example = run([str(bin_dir / "trainledger"), "ratecard", "example"], outside, 60)
    assert example.returncode == 0, example.stderr
    assert json.loads(example.stdout) == json.loads(
        (ROOT / "service/cli/demo/ratecard.json").read_text()
    )
