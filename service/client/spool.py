"""A durable spool of usage events on local disk: enqueue in milliseconds, send later.

A producer (a Slurm hook, a batch script) calls `Spool(directory).put(events)`; when it
returns the events are on disk (written, fsynced, renamed into place, the directory fsynced),
so the producer can exit and the events survive a crash or a power cut. A drainer
(`Spool.drain(client)`, `trainledger spool flush`, `trainledger agent`) posts them and deletes
a file only once the service has answered for every event in it.

Layout (one directory, plain files, readable with `cat`):

    DIR/tmp/      files being written (a crashed `put` leaves one; nothing counts it)
    DIR/new/      spooled batches, one NDJSON file per `put`, named so they sort oldest first
    DIR/failed/   batches the service refused as a whole (400, 403, 413...), with the answer
    DIR/drain.lock  held (flock) by the one drainer at a time

Why files and not SQLite: every `put` is its own file, so any number of processes write at
once with no lock between them (SQLite has one writer at a time, and a hook that waits for a
busy lock does not return in milliseconds); `write`, `fsync`, `rename` is atomic and durable
on every POSIX filesystem, while SQLite's WAL mode needs shared memory that network
filesystems do not give. A crash at any point loses nothing: a file is in `new/` (sent again
later: event ids make a resend count nothing twice) or it was not yet renamed (its `put` had
not returned).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from .sync import Client

SUFFIX = ".ndjson"
# A temporary file older than this was left by a `put` that crashed (it never returned).
STALE_TMP_SECONDS = 3600.0
_encoder = msgspec.json.Encoder(decimal_format="string")


class SpoolBusy(Exception):
    """Another process is draining this spool."""


@dataclass
class DrainReport:
    """What one `drain` did: events answered by the service, files removed or set aside."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    files_sent: int = 0
    files_failed: int = 0

    @property
    def events(self) -> int:
        return self.accepted + self.duplicates + len(self.rejected)


class Spool:
    """A directory of spooled event batches; safe for many writers and one drainer at once."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.tmp = self.directory / "tmp"
        self.new = self.directory / "new"
        self.failed = self.directory / "failed"
        self.batch_size = 5_000
        for path in (self.tmp, self.new, self.failed):
            path.mkdir(parents=True, exist_ok=True)

    # --- writers ------------------------------------------------------------------------

    def put(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append these events durably (they are on disk when this returns). Each event needs
        an `id`: a resend after a crash is harmless only because the service knows the id."""
        if not events:
            return
        lines = []
        for index, event in enumerate(events):
            if not isinstance(event, Mapping) or not isinstance(event.get("id"), str):
                raise ValueError(f"event {index}: a mapping with a string 'id' is required")
            lines.append(_encoder.encode(dict(event)))
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:16]}{SUFFIX}"
        temporary = self.tmp / name
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            os.write(fd, b"\n".join(lines) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, self.new / name)
        _fsync_directory(self.new)

    # --- readers ------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """The spooled batches, oldest first."""
        return sorted(p for p in self.new.iterdir() if p.name.endswith(SUFFIX))

    def pending(self) -> int:
        """Events waiting to be sent."""
        return sum(len(_read_lines(path) or ()) for path in self.files())

    @contextlib.contextmanager
    def draining(self, wait: bool = False) -> Iterator[None]:
        """Hold the drain lock (raises SpoolBusy when another process holds it and not
        `wait`): one drainer at a time, so a batch is not sent twice at once."""
        fd = os.open(self.directory / "drain.lock", os.O_RDWR | os.O_CREAT, 0o640)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError as exc:
                raise SpoolBusy(f"{self.directory} is being drained by another process") from exc
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def drain(self, client: Client, *, batch_size: int = 5_000, wait: bool = False) -> DrainReport:
        """Post every spooled event through `client` (with its retry policy) and delete each
        file once the service has answered for all its events. Raises what the client raises
        when the service stays unreachable (the files stay, for the next drain)."""
        report = DrainReport()
        self.batch_size = batch_size
        with self.draining(wait):
            self._remove_stale_tmp()
            batch: list[bytes] = []
            paths: list[Path] = []
            for path in self.files():
                lines = _read_lines(path)
                if lines is None:
                    continue
                if batch and len(batch) + len(lines) > batch_size:
                    self._send(client, batch, paths, report)
                    batch, paths = [], []
                batch.extend(lines)
                paths.append(path)
            if batch:
                self._send(client, batch, paths, report)
        return report

    def _send(
        self, client: Client, lines: list[bytes], paths: list[Path], report: DrainReport
    ) -> None:
        from .errors import ApiError

        try:
            answers = [
                client.post_ndjson(lines[first : first + self.batch_size])
                for first in range(0, len(lines), self.batch_size)
            ]
        except ApiError as exc:
            if not exc.refused_batch:
                raise
            if len(paths) > 1:  # find the file the service refuses; send the others
                for path in paths:
                    self._send(client, _read_lines(path) or [], [path], report)
                return
            # Refused as a whole (not NDJSON, a project the token may not reach, too large):
            # sending it again would be refused again. Kept beside the service's answer.
            self._set_aside(paths[0], exc)
            report.files_failed += 1
            return
        for answer in answers:
            report.accepted += answer.accepted
            report.duplicates += answer.duplicates
            report.rejected.extend(msgspec.to_builtins(r) for r in answer.rejected)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        _fsync_directory(self.new)
        report.files_sent += len(paths)

    def _set_aside(self, path: Path, error: Exception) -> None:
        problem = getattr(error, "problem", None) or {"detail": str(error)}
        note = self.failed / (path.name + ".problem.json")
        note.write_bytes(_encoder.encode(problem))
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, self.failed / path.name)
        _fsync_directory(self.failed)
        _fsync_directory(self.new)

    def _remove_stale_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for path in self.tmp.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()


def _fsync_directory(path: Path) -> None:
    """Make a rename or an unlink in `path` durable (the entry lives in the directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_lines(path: Path) -> list[bytes] | None:
    """A spooled file's events (one JSON document a line), None when it is gone (drained)."""
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except FileNotFoundError:
        return None
