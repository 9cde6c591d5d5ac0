"""The embedded server's data directory: the files in it and keeping them private (0700 for
the directory, 0600 for what this service writes there)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PASSWORD_FILE = "valkey.password"
PID_FILE = "valkey.pid"
SERVER_LOCK = "server.lock"
OWNER_LOCK = "owner.lock"


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` (replacing it atomically), readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# What the data dir holds (and so what a start makes private): the server's files, the
# admin token, the metrics files of `serve`'s workers. Nothing else there is touched.
_OWN_FILES = {
    "appendonlydir",
    "prometheus-multiproc",
    "valkey.conf",
    "valkey.log",
    "valkey.url",
    PASSWORD_FILE,
    PID_FILE,
    OWNER_LOCK,
    SERVER_LOCK,
    "admin-token",
    "dump.rdb",
}


def _own(name: str) -> bool:
    return name in _OWN_FILES or name.startswith("temp-") or name.endswith((".aof", ".rdb"))


def tighten(data_dir: Path) -> None:
    """Data dir 0700, and its files (those this service makes) the owner's alone: what an
    earlier version made 0755 / 0644 included. Symbolic links are left alone."""
    os.chmod(data_dir, 0o700)
    paths = []
    for entry in os.scandir(data_dir):
        if _own(entry.name) and not entry.is_symlink():
            paths.append(entry.path)
            if entry.is_dir(follow_symlinks=False):
                paths += [e.path for e in os.scandir(entry.path) if not e.is_symlink()]
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(path).st_mode
            if mode & 0o077:
                os.chmod(path, mode & 0o7700)
