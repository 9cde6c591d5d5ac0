"""A small real filesystem for tests of a full disk: a tmpfs mounted for the test (root, or
passwordless sudo), filled to the last byte by `fill`, emptied by `unfill`. Mounting is not
possible everywhere (an unprivileged container): the tests that need it skip there, except
in CI (`CI` set), where they fail instead, so they cannot pass by skipping."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = "filler"


def _privileged(*argv: str) -> list[str]:
    return list(argv) if os.geteuid() == 0 else ["sudo", "-n", *argv]


@contextlib.contextmanager
def small_filesystem(directory: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of `size` mounted on `directory` (owned by this user) while the block runs."""
    directory.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0700,uid={os.geteuid()},gid={os.getegid()}"
    try:
        mounted = subprocess.run(
            _privileged("mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    else:
        why = mounted.stderr.strip() if mounted.returncode else ""
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs for the full-disk test: {why}")
        pytest.skip(f"cannot mount a tmpfs here (needs root or sudo): {why}")
    try:
        yield directory
    finally:
        umount = _privileged("umount", "-l", str(directory))
        subprocess.run(umount, capture_output=True, timeout=30, check=False)


def fill(root: Path) -> None:
    """Take every free byte of the filesystem `root` is on (into `root/filler`)."""
    fd = os.open(root / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        chunk = b"\0" * 4096
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def unfill(root: Path) -> None:
    (root / FILLER).unlink(missing_ok=True)
