#!/usr/bin/env python3
"""Developer entry point that needs nothing but Python 3.11+.

    python3 dev.py run        # start the service on the embedded Valkey
    python3 dev.py demo       # replay a simulated 7B training run and show what the ledger finds
    python3 dev.py test       # run the whole test suite (extra arguments go to pytest)
    python3 dev.py test-unit  # the unit tests alone (tests/unit: no Redis, no server; ~1 min)
    python3 dev.py check      # ruff, mypy, the import rules, the OpenAPI and config-docs freshness
    python3 dev.py openapi    # regenerate openapi/openapi.json
    python3 dev.py formats-table  # the webhook formats table of the budgets-and-webhooks guide
    python3 dev.py config-docs  # regenerate the variables tables of docs/reference/configuration.md
    python3 dev.py lock       # refresh the image's locks, requirements/{image,build}.txt

It creates `.venv` and installs the project (compiling the Cython core) on first use,
and again whenever pyproject.toml, setup.py or the kernel source change.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".trainledger-installed"
INPUTS = ["pyproject.toml", "setup.py"]


def _compiled_sources() -> list[Path]:
    return sorted((ROOT / "costcore").glob("*.pyx"))


def _cython_includes() -> list[Path]:
    """What the modules compile in besides their .pyx (`include "x.pxi"`, `cimport` of a .pxd)."""
    return sorted([*(ROOT / "costcore").glob("*.pxi"), *(ROOT / "costcore").glob("*.pxd")])


def _fingerprint() -> str:
    h = hashlib.sha256()
    for path in [*(ROOT / name for name in INPUTS), *_compiled_sources(), *_cython_includes()]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def ensure_env() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script may run on an older python3
        sys.exit("trainledger needs Python 3.11 or newer")
    if not (BIN / "python").exists():
        print("creating .venv ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    fingerprint = _fingerprint()
    # Every Cython module of the core has its compiled extension next to it.
    built = all(any(src.parent.glob(src.stem + "*.so")) for src in _compiled_sources())
    if STAMP.exists() and STAMP.read_text() == fingerprint and built:
        return
    print("installing trainledger and its dependencies into .venv ...", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", ".[test]"], check=True, cwd=ROOT)
    STAMP.write_text(fingerprint)


def run(argv: list[str]) -> int:
    return os.execv(str(BIN / "trainledger"), [str(BIN / "trainledger"), "serve", *argv])


def demo(argv: list[str]) -> int:
    return os.execv(str(BIN / "trainledger"), [str(BIN / "trainledger"), "demo", *argv])


def test(argv: list[str]) -> int:
    # Two pytest workers (pytest-xdist) unless told otherwise: most tests wait on servers,
    # sockets and subprocesses, so two share 2 cores well; each worker claims its own
    # database, data dirs and ports (tests/shared_redis.py, tests/conftest.py).
    told = any(a.startswith(("-n", "--numprocesses")) or a == "no:xdist" for a in argv)
    if not told:
        argv = ["-n", os.environ.get("TRAINLEDGER_TEST_WORKERS", "2"), *argv]
    code = subprocess.call([str(BIN / "python"), "-m", "pytest", *argv], cwd=ROOT)
    if code == 5:
        print("pytest collected no tests: that is a failure here", file=sys.stderr)
        return 1
    return code


def test_unit(argv: list[str]) -> int:
    """The fast loop: tests/unit never starts or reaches a Redis or a server
    (tests/unit/conftest.py fails a unit test that asks for one)."""
    return test(["tests/unit", *argv])


def check(argv: list[str]) -> int:
    steps = [
        [str(BIN / "ruff"), "check", "."],
        [str(BIN / "ruff"), "format", "--check", "."],
        [str(BIN / "mypy")],
        [str(BIN / "lint-imports"), "--no-cache"],
        [str(BIN / "trainledger"), "openapi", "--check", "openapi/openapi.json"],
        [str(BIN / "python"), "-m", "trainledger.config.docs", CONFIG_DOC, "--check"],
    ]
    for step in steps:
        print(
            "$",
            " ".join(Path(step[0]).name if i == 0 else a for i, a in enumerate(step)),
            flush=True,
        )
        if subprocess.call(step, cwd=ROOT) != 0:
            return 1
    return 0


def openapi(argv: list[str]) -> int:
    return subprocess.call(
        [str(BIN / "trainledger"), "openapi", "--output", "openapi/openapi.json"], cwd=ROOT
    )


def formats_table(argv: list[str]) -> int:
    """Write the webhook formats table of the guide again from service/webhooks/formats/table.py."""
    code = (
        "import pathlib; from trainledger.webhooks.formats.table import DOCS_PAGE, with_table; "
        "page = pathlib.Path(DOCS_PAGE); page.write_text(with_table(page.read_text()))"
    )
    return subprocess.call([str(BIN / "python"), "-c", code], cwd=ROOT)


CONFIG_DOC = "docs/reference/configuration.md"


def config_docs(argv: list[str]) -> int:
    """The tables of variables in the configuration page, from service/config/settings.py."""
    return subprocess.call([str(BIN / "python"), "-m", "trainledger.config.docs", CONFIG_DOC])


# The image's locks: exact versions with their hashes, from PyPI, for the image's platform.
UV = "uv==0.13.9"
LOCK_PLATFORM = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]


def lock(argv: list[str]) -> int:
    """requirements/image.txt from pyproject.toml's dependencies and requirements/build.txt
    from its build-system requires, each with every file's hash: the Dockerfile installs them
    with --require-hashes. Refreshing moves to the newest versions pyproject allows."""
    if not (BIN / "uv").exists():
        subprocess.check_call([str(BIN / "python"), "-m", "pip", "install", "-q", UV])
    import tomllib

    build_requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    compile_ = [str(BIN / "uv"), "pip", "compile", "--generate-hashes", *LOCK_PLATFORM]
    compile_ += ["--index-url", "https://pypi.org/simple", "--quiet", *argv]
    compile_ += ["--custom-compile-command", "python3 dev.py lock"]
    (ROOT / "requirements").mkdir(exist_ok=True)
    runtime = [*compile_, "pyproject.toml", "-o", "requirements/image.txt"]
    build = [*compile_, "-", "-o", "requirements/build.txt"]
    return (
        subprocess.call(runtime, cwd=ROOT)
        or subprocess.run(
            build, cwd=ROOT, input="\n".join(build_requires["requires"]) + "\n", text=True
        ).returncode
    )


COMMANDS = {
    "run": run,
    "demo": demo,
    "test": test,
    "test-unit": test_unit,
    "check": check,
    "openapi": openapi,
    "formats-table": formats_table,
    "config-docs": config_docs,
    "lock": lock,
}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        return 2
    ensure_env()
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
