"""What a spooled file holds: an entry read without trusting it (never a FIFO opened
blocking, never a symbolic link followed) and its lines split into events and the
unreadable rest, and `SpoolBusy`. Apart from `spool.py` so each stays one idea (and so
`sync.py` and `aio.py` need not import `spool.py`, which names the client)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec

# An event line is one JSON object; its values are checked as JSON, not read into Python.
_event_line = msgspec.json.Decoder(dict[str, msgspec.Raw])


class SpoolBusy(Exception):
    """Another process is draining this spool."""


class Unreadable(Exception):
    """A spool entry that cannot be read as a file (its reason is the message)."""


def fsync_directory(path: Path) -> None:
    """Make a rename or an unlink in `path` durable (the entry lives in the directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


def read_entry(path: Path) -> bytes | None:
    """A spooled file's bytes; None when it is gone (drained). Raises Unreadable for what
    `put` never leaves: not a regular file (never opened blocking: a FIFO would hang the
    drain), a symbolic link (not followed: the drain would send, or keep in failed/, a file
    from elsewhere), or a file it may not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise Unreadable("a symbolic link (a spool holds only files)") from exc
        raise Unreadable(exc.strerror or str(exc)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise Unreadable(f"{kind}, not a spooled file")
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read()
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)


def event_id(line: bytes) -> str | None:
    """The `id` of an event line (for a note; None when it has no string id)."""
    value = _event_line.decode(line).get("id")
    return None if value is None else _string_or_none(value)


def _string_or_none(raw: msgspec.Raw) -> str | None:
    try:
        return msgspec.json.decode(raw, type=str)
    except msgspec.ValidationError:
        return None


def event_lines(data: bytes) -> tuple[list[bytes], list[tuple[int, bytes, str]]]:
    """The event lines of a file (one JSON object each) and its unreadable lines (line
    number, raw bytes, why): truncated or garbage lines, binary data."""
    lines: list[bytes] = []
    corrupt: list[tuple[int, bytes, str]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            _event_line.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            corrupt.append((number, line, f"not a JSON object: {exc}"))
            continue
        lines.append(line)
    return lines, corrupt
