"""The examples in README.md and docs/ run as written, and print what they show.

For each Markdown file with `console` examples (the convention is in tests/markdown_docs.py and
docs/development.md), a real `trainledger serve` starts on the embedded Valkey in a scratch
directory that also holds `docs/`, `service/`, `tests/` and `.venv` of this checkout, as a
checkout would, and is its `HOME`: the default data dir, `~/.local/share/trainledger` (what the
docs show), is the scratch one. Its commands then run in order in one bash
(so `export`s carry over), with `HOME`, `TRAINLEDGER_URL`, `TRAINLEDGER_TOKEN` and
`TRAINLEDGER_DATA_DIR` set and `.venv/bin` on the PATH. Each must exit 0 and, where the doc
shows output, print it (`...` matching ids and times). The docs say `http://127.0.0.1:8000`;
the service here listens on a free port, put in its place.

A page that continues another's examples says so with `<!-- doc-examples: after PATH -->`
(PATH relative to the page): that page's commands run first, on the same service.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_until_ready
from tests.markdown_docs import REPO, Command, console_examples, doc_files, output_matches

pytestmark = pytest.mark.slow

DOC_ADDRESS = "127.0.0.1:8000"
COMMAND_TIMEOUT_S = 180  # a bound on waiting for one command, never an assertion about speed
_AFTER = re.compile(r"<!--\s*doc-examples:\s*after\s+(\S+)\s*-->")

FILES = [f for f in doc_files() if console_examples(f)]


def prerequisites(path: Path) -> list[Path]:
    """The pages whose examples must run before this one's, deepest first."""
    out: list[Path] = []
    for m in _AFTER.finditer(path.read_text()):
        before = (path.parent / m.group(1)).resolve()
        out += [*prerequisites(before), before]
    return out


class Shell:
    """One bash for one page: each command is sourced, its output and status read back."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.marker = f"__doc_example_done_{uuid.uuid4().hex}__"
        self.count = 0
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.run("set -o pipefail")

    def run(self, command: str) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.count += 1
        script = self.cwd / f".doc-command-{self.count}.sh"
        script.write_text(command + "\n")
        self.proc.stdin.write(
            f"source {script} </dev/null 2>&1\nprintf '\\n{self.marker} %d\\n' $?\n".encode()
        )
        self.proc.stdin.flush()
        buffer = b""
        end = f"\n{self.marker} ".encode()
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not (end in buffer and buffer.endswith(b"\n")):
                if time.monotonic() > deadline:
                    raise AssertionError(f"no end after {COMMAND_TIMEOUT_S} s: {command}")
                if not sel.select(timeout=1):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"the shell exited during: {command}\n{buffer!r}")
                buffer += chunk
        output, _, status = buffer.partition(end)
        return int(status.decode().strip()), output.decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A stand-in for the checkout: its docs, code, tests and .venv, a data dir of its own."""
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("docs", "tests", "openapi", "service"):
        (work / name).symlink_to(REPO / name)
    (work / ".venv").symlink_to(Path(sys.prefix))
    return work


@pytest.fixture
def service(workdir: Path) -> Iterator[str]:
    """`trainledger serve` on the embedded Valkey of the default data dir, under `<workdir>`
    as its HOME."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = scratch_home(workdir)
    log = workdir.parent / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_ready(proc, base_url, lambda: log.read_text(errors="replace"))
        yield base_url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def scratch_home(workdir: Path) -> dict[str, str]:
    """The environment without settings, with `workdir` as HOME (so as the user data dir's
    home on Linux: `~/.local/share/trainledger`)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TRAINLEDGER_") and k != "XDG_DATA_HOME"
    }
    return env | {"HOME": str(workdir)}


def shell_env(workdir: Path, base_url: str) -> dict[str, str]:
    env = scratch_home(workdir)
    data_dir = workdir / ".local" / "share" / "trainledger"
    env.update(
        TRAINLEDGER_URL=base_url,
        TRAINLEDGER_TOKEN=(data_dir / "admin-token").read_text().strip(),
        TRAINLEDGER_DATA_DIR=str(data_dir),
        PATH=f"{workdir / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="100",  # rich tables fold at the terminal's width: the docs show 100
        TZ="UTC",
        LC_ALL="C.UTF-8",
    )
    return env


def run_page(shell: Shell, commands: list[Command], address: str) -> list[str]:
    failures: list[str] = []
    for command in commands:
        code, output = shell.run(command.command.replace(DOC_ADDRESS, address))
        expected = [line.replace(DOC_ADDRESS, address) for line in command.expected]
        if code != 0:
            failures.append(f"{command.where()}: exit status {code}\n$ {command.command}\n{output}")
        elif expected and not output_matches(expected, output.split("\n")):
            failures.append(
                f"{command.where()}: the output differs\n$ {command.command}\n"
                f"--- shown\n" + "\n".join(expected) + "\n--- printed\n" + output
            )
    return failures


@pytest.mark.parametrize("page", FILES, ids=[str(f.relative_to(REPO)) for f in FILES])
def test_examples_run_as_written(page: Path, workdir: Path, service: str) -> None:
    address = service.removeprefix("http://")
    shell = Shell(workdir, shell_env(workdir, service))
    try:
        for before in prerequisites(page):
            failures = run_page(shell, console_examples(before), address)
            assert not failures, f"(run before {page.name})\n" + "\n\n".join(failures)
        failures = run_page(shell, console_examples(page), address)
        assert not failures, "\n\n".join(failures)
    finally:
        shell.close()
