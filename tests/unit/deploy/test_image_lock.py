"""The image is reproducible and says its version, checked offline (no Docker engine here).

requirements/image.txt and requirements/build.txt are the locks `python3 dev.py lock` writes
(uv pip compile --generate-hashes). The Dockerfile installs both with --require-hashes and the
project itself with --no-deps, so nothing unpinned reaches the image. What is checked here is
the files: that the lock pins every runtime dependency pyproject.toml names (and the extras
they ask for), each at a version pyproject allows, each with hashes; and that the Dockerfile
installs from it. Whether the image builds is checked only where Docker runs.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from trainledger.cli import build_parser

from tests.unit.deploy.test_deploy_files import ROOT, compose, dockerfile_stages

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The image's platform: python:3.11-slim on Linux.
IMAGE_ENV = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11"}
IMAGE_ENV |= {"python_full_version": "3.11.14", "os_name": "posix"}


def pins(lock: str) -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, hashes) of a `--generate-hashes` lock."""
    found: dict[str, tuple[Version, list[str]]] = {}
    for entry in re.split(r"\n(?=\S)", lock):
        if entry.startswith("#") or not entry.strip():
            continue
        head = entry.split()[0]
        name, sep, version = head.partition("==")
        assert sep, f"not pinned: {head}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)
        found[canonicalize_name(name)] = (Version(version), hashes)
    return found


def applies(requirement: Requirement, extra: str = "") -> bool:
    marker = requirement.marker
    return marker is None or marker.evaluate(IMAGE_ENV | {"extra": extra})


def runtime_requirements() -> list[Requirement]:
    """pyproject's dependencies for the image's platform, and what their extras add (read
    from the installed distributions' metadata, not copied here)."""
    wanted = [r for r in map(Requirement, PYPROJECT["project"]["dependencies"]) if applies(r)]
    for requirement in list(wanted):
        for extra in requirement.extras:
            for line in importlib.metadata.requires(requirement.name) or []:
                added = Requirement(line)
                if applies(added, extra) and not applies(added):  # the extra's own
                    wanted.append(added)
    return wanted


def assert_locks(lock_path: str, requirements: list[Requirement]) -> None:
    locked = pins((ROOT / lock_path).read_text())
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{lock_path} does not pin {requirement.name}"
        version, _ = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)
    for name, (_, hashes) in locked.items():
        assert hashes, f"{name} has no hash in {lock_path}"


def test_the_image_lock_pins_every_runtime_dependency_with_hashes() -> None:
    requirements = runtime_requirements()
    names = {canonicalize_name(r.name) for r in requirements}
    assert {"litestar", "uvloop", "hiredis"} <= names  # the marker and the extra are read
    assert_locks("requirements/image.txt", requirements)


def test_the_build_lock_pins_the_build_system() -> None:
    requires = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    assert_locks("requirements/build.txt", requires)


def run_lines(stage: list[tuple[str, str]]) -> list[str]:
    return [args for name, args in stage if name == "RUN"]


def copied_to(stage: list[tuple[str, str]], source: str) -> str:
    for name, args in stage:
        if name == "COPY" and args.split()[:-1] == [source]:
            return args.split()[-1]
    raise AssertionError(f"{source} is not copied into the stage")


def pip_installs(stage: list[tuple[str, str]]) -> list[list[str]]:
    """Each `pip install|wheel …` of the stage's RUN lines, as its words."""
    commands = []
    for line in run_lines(stage):
        for command in re.split(r"&&|;", line):
            words = shlex.split(command)
            if words[:1] == ["pip"] and words[1:2] in (["install"], ["wheel"]):
                commands.append(words)
    return commands


def test_the_dockerfile_installs_from_the_locks_with_hashes_required() -> None:
    build, final = dockerfile_stages()[0], dockerfile_stages()[-1]
    for stage, lock in ((build, "requirements/build.txt"), (final, "requirements/image.txt")):
        target = copied_to(stage, lock)
        commands = pip_installs(stage)
        locked = [c for c in commands if "-r" in c and c[c.index("-r") + 1] == target]
        assert locked and all("--require-hashes" in c for c in locked), (lock, commands)
        # Anything else the stage installs brings no dependency of its own.
        for command in commands:
            if "-r" not in command:
                assert "--no-deps" in command, command
    wheel = next(c for c in pip_installs(build) if c[1] == "wheel")
    assert "--no-build-isolation" in wheel  # the locked build tools, not fresh ones


def test_the_image_says_the_version_pyproject_gives() -> None:
    version = PYPROJECT["project"]["version"]
    final = dockerfile_stages()[-1]
    labels = " ".join(args for name, args in final if name == "LABEL")
    assert f'org.opencontainers.image.version="{version}"' in labels
    assert compose()["services"]["trainledger"]["image"] == f"trainledger:{version}"
    docs = (ROOT / "docs" / "operations" / "docker.md").read_text()
    assert re.search(rf"^docker build -t trainledger:{re.escape(version)} ", docs, re.MULTILINE)
    assert f"docker build -t trainledger:{version} " in (ROOT / "Dockerfile").read_text()


def test_the_commands_the_dockerfile_names_are_commands() -> None:
    """`… trainledger token list` in a comment is a command the CLI accepts."""
    named = re.findall(r"`… trainledger ([^`]+)`", (ROOT / "Dockerfile").read_text())
    assert named
    parser = build_parser()
    for command in named:
        parser.parse_args(shlex.split(command))  # SystemExit(2) for `tokens list`
