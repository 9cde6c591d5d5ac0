"""A durable spool of usage events on local disk: enqueue in milliseconds, send later.

A producer (a Slurm hook, a batch script) calls `Spool(directory).put(events)`; when it
returns the events are on disk (written, fsynced, renamed into place, the directory fsynced),
so the producer can exit and the events survive a crash or a power cut. A drainer
(`Spool.drain(client)`, `trainledger spool flush`, `trainledger agent`) posts them and deletes
a file only once the service has answered for every event in it.

Layout (one directory, plain files, readable with `cat`):

    DIR/tmp/      files being written (a crashed or failed `put` leaves none that counts)
    DIR/new/      spooled batches, one NDJSON file per `put`, named so they sort oldest first
    DIR/failed/   what a drain set aside, each beside `<name>.problem.json` saying why:
                  the events of a file the service refused (400, 403, 413...: only those,
                  its others sent), entries that cannot be read (`<name>`), and the
                  unreadable lines of a file (`<name>.corrupt`)
    DIR/drain.lock  held (flock) by the one drainer at a time

Why files and not SQLite: every `put` is its own file, so any number of processes write at
once with no lock between them (SQLite has one writer at a time, and a hook that waits for a
busy lock does not return in milliseconds); `write`, `fsync`, `rename` is atomic and durable
on every POSIX filesystem, while SQLite's WAL mode needs shared memory that network
filesystems do not give. A crash at any point loses nothing: a file is in `new/` (sent again
later: event ids make a resend count nothing twice) or it was not yet renamed (its `put` had
not returned).

One bad entry never stops the others: the events the service refuses (a file it refuses is
split by the batcher's rule, `batching.split_posts`, down to the events refused; the others
are sent), an entry that cannot be read (another owner's file, a directory, a FIFO, a
symbolic link) and the lines that are not JSON objects are set aside in `failed/` and the
drain goes on. When even that is impossible (a full disk), the entry stays in `new/`, the
report says so, and the drain goes on: the files it sends free the space.
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
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from .spool_files import SpoolBusy as SpoolBusy  # re-exported: its home was this module
from .spool_files import Unreadable, event_id, event_lines, fsync_directory, read_entry

if TYPE_CHECKING:
    from .batching import RefusedEvent
    from .models import IngestReport


class Client(Protocol):
    """What `drain` needs of a client (`trainledger.client.Client` is one): named here, not
    imported from sync.py, which imports this module (no import circles)."""

    def post_ndjson(self, lines: Sequence[bytes]) -> IngestReport: ...


SUFFIX = ".ndjson"
CORRUPT = ".corrupt"  # not SUFFIX: `mv failed/*.ndjson new/` must not send garbage again
NOTE = ".problem.json"
# A temporary file older than this was left by a `put` that crashed (it never returned).
STALE_TMP_SECONDS = 3600.0
# What is kept of one file's unreadable lines (the rest is counted, not kept): a disk filled
# with garbage must not be copied whole into failed/.
MAX_KEPT_BYTES = 1 << 20
MAX_NOTED_LINES = 100  # lines described one by one in the note
_encoder = msgspec.json.Encoder(decimal_format="string")


UNREADABLE_ENTRY = "Unreadable spool entry"
UNREADABLE_LINES = "Unreadable spool lines"


@dataclass
class DrainReport:
    """What one `drain` did: events answered by the service, files removed or set aside,
    and what could not be read. `notes` says, one line each, what was set aside or left."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    files_sent: int = 0
    files_failed: int = 0  # with events the service refused: those set aside in failed/
    events_refused: int = 0  # the events of those files set aside (the others were sent)
    files_unreadable: int = 0  # entries that cannot be read, moved to failed/
    files_left: int = 0  # to be set aside but could not be (a full disk): still in new/
    corrupt_lines: int = 0  # lines that are not JSON objects, kept in failed/*.corrupt
    requests: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def events(self) -> int:
        return self.accepted + self.duplicates + len(self.rejected)

    @property
    def troubled(self) -> bool:
        """Whether anything was set aside or left behind (the caller should say so)."""
        return bool(self.files_failed or self.files_unreadable or self.files_left)

    def count(self, answer: IngestReport) -> None:
        """Fold in the answers to the requests counted in `requests`."""
        self.accepted += answer.accepted
        self.duplicates += answer.duplicates
        self.rejected.extend(msgspec.to_builtins(r) for r in answer.rejected)


@dataclass
class SetAside:
    """One entry of failed/ and why it is there (its note): `kind` is "refused" (events the
    service refused, alone: `problem` is its answer, with `count` and `events` when the
    file's other events were sent), "unreadable" (an entry that cannot
    be read as a file) or "corrupt" (the unreadable lines of a file, raw). `events`: the event
    lines in a refused file, the lines kept of a corrupt one."""

    name: str
    kind: str
    events: int | None
    detail: str
    problem: dict[str, Any]


@dataclass
class _File:
    """A spooled file being sent: its event lines (`whole`: all its lines, none corrupt), how
    many the service answered for (in order), and those of them it refused, alone (set aside
    once the file is answered for)."""

    path: Path
    lines: list[bytes]
    whole: bool = True
    sent: int = 0
    refused: list[RefusedEvent] = field(default_factory=list)


class Spool:
    """A directory of spooled event batches; safe for many writers and one drainer at once."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.tmp = self.directory / "tmp"
        self.new = self.directory / "new"
        self.failed = self.directory / "failed"
        for path in (self.tmp, self.new, self.failed):
            path.mkdir(parents=True, exist_ok=True)

    # --- writers ------------------------------------------------------------------------

    def put(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append these events durably (they are on disk when this returns). Each event needs
        an `id`: a resend after a crash is harmless only because the service knows the id.
        A failure (a full disk: OSError) leaves nothing behind, in tmp/ or in new/."""
        if not events:
            return
        lines = []
        for index, event in enumerate(events):
            if not isinstance(event, Mapping) or not isinstance(event.get("id"), str):
                raise ValueError(f"event {index}: a mapping with a string 'id' is required")
            lines.append(_encoder.encode(dict(event)))
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:16]}{SUFFIX}"
        self._write(self.new, name, b"\n".join(lines) + b"\n", temporary=name)

    def _write(self, directory: Path, name: str, data: bytes, temporary: str = "") -> None:
        """`data` as `directory/name`, all or nothing: written in tmp/, fsynced, renamed into
        place, the directory fsynced. On any failure the temporary file is removed."""
        scratch = self.tmp / (temporary or f"{uuid.uuid4().hex}-{name}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
        try:
            try:
                view = memoryview(data)
                while view:  # a write may take part of it (a disk filling up): not done yet
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(scratch, directory / name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(scratch)
            raise
        fsync_directory(directory)

    # --- readers ------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """The spooled batches, oldest first (whatever they are: a drain sets aside what is
        not a readable file)."""
        return sorted(p for p in self.new.iterdir() if p.name.endswith(SUFFIX))

    def pending(self) -> int:
        """Events waiting to be sent (the lines of the readable files)."""
        total = 0
        for path in self.files():
            with contextlib.suppress(Unreadable):
                total += len(event_lines(read_entry(path) or b"")[0])
        return total

    def set_aside(self) -> list[SetAside]:
        """What drains set aside in failed/ (the spool's dead letters), oldest first."""
        names = sorted(p.name for p in self.failed.iterdir())
        entries = [n for n in names if not n.endswith(NOTE)]
        entries += [
            n[: -len(NOTE)] for n in names if n.endswith(NOTE) and n[: -len(NOTE)] not in names
        ]
        return [self._describe(name) for name in sorted(entries)]

    def _describe(self, name: str) -> SetAside:
        try:
            problem = msgspec.json.decode((self.failed / (name + NOTE)).read_bytes())
        except (OSError, msgspec.DecodeError) as exc:
            problem = {"detail": f"no readable note ({exc})"}
        if not isinstance(problem, dict):
            problem = {"detail": str(problem)}
        detail = str(problem.get("detail") or problem.get("title") or "")
        if name.endswith(CORRUPT):
            count = problem.get("count")
            return SetAside(
                name, "corrupt", count if isinstance(count, int) else None, detail, problem
            )
        if problem.get("title") == UNREADABLE_ENTRY:
            return SetAside(name, "unreadable", None, detail, problem)
        try:
            events: int | None = len(event_lines(read_entry(self.failed / name) or b"")[0])
        except Unreadable:
            events = None
        return SetAside(name, "refused", events, detail, problem)

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
        """Post every spooled event through `client` (with its retry policy), `batch_size`
        events a request (a request takes lines of as many files as fit), and delete each
        file once the service has answered for all its events. What cannot be read or is
        refused as a whole is set aside in failed/ (see the module). Raises what the client
        raises when the service stays unreachable (the files stay, for the next drain)."""
        report = DrainReport()
        with self.draining(wait):
            self._remove_stale_tmp()
            window: list[_File] = []  # files not yet answered for, oldest first
            for path in self.files():
                spooled = self._load(path, report)
                if spooled is None:
                    continue
                window.append(spooled)
                while sum(len(f.lines) - f.sent for f in window) >= batch_size:
                    self._post_next(client, window, batch_size, report)
            while window:
                self._post_next(client, window, batch_size, report)
        return report

    def _load(self, path: Path, report: DrainReport) -> _File | None:
        """The event lines of a spooled file; None when there is nothing to send: the file is
        gone (drained meanwhile), cannot be read (set aside), holds only unreadable lines
        (kept, and the file removed), or its unreadable lines cannot be kept (left)."""
        try:
            data = read_entry(path)
        except Unreadable as exc:
            problem = {"title": UNREADABLE_ENTRY, "detail": f"{path.name}: {exc}"}
            if self._set_aside(path, problem, f"cannot be read ({exc})", report):
                report.files_unreadable += 1
            return None
        if data is None:
            return None
        lines, corrupt = event_lines(data)
        if corrupt:
            try:
                self._keep_corrupt(path, corrupt)
            except OSError as exc:
                report.files_left += 1
                report.notes.append(
                    f"{path.name}: could not keep its {len(corrupt)} unreadable lines "
                    f"({exc.strerror or exc}); left in new/"
                )
                return None
            report.corrupt_lines += len(corrupt)
            report.notes.append(
                f"{path.name}: {len(corrupt)} unreadable lines (not JSON objects) kept in "
                f"{self.failed / (path.name + CORRUPT)}"
            )
        if not lines:
            self._remove([path], report)
            return None
        return _File(path, lines, whole=not corrupt)

    def _post_next(
        self, client: Client, window: list[_File], batch_size: int, report: DrainReport
    ) -> None:
        """Post the next `batch_size` unanswered lines of `window`, oldest first, as one
        request; remove from `window` the files then answered for: deleted, or their refused
        events set aside (`_set_aside_refused`)."""
        from .batching import deliver
        from .errors import ApiError

        def post(lines: Sequence[bytes]) -> IngestReport:
            report.requests += 1
            return client.post_ndjson(lines)

        chunk: list[bytes] = []
        taken: list[tuple[_File, int]] = []
        for spooled in window:
            lines = spooled.lines[spooled.sent : spooled.sent + batch_size - len(chunk)]
            if lines:
                chunk.extend(lines)
                taken.append((spooled, len(lines)))
            if len(chunk) == batch_size:
                break
        try:
            answer = post(chunk)
        except ApiError as exc:
            if not exc.refused_batch:
                raise
            if len(taken) > 1:  # find the files the service refuses; send the others
                for spooled, _ in taken:
                    window.remove(spooled)
                    alone = [spooled]
                    while alone:
                        self._post_next(client, alone, batch_size, report)
                return
            # Refused as a whole (a project the token may not reach, too large...): split
            # by the batcher's rule; sending a refused event again would be refused again.
            delivery = deliver(post, chunk, exc)
            answer = delivery.report
            taken[0][0].refused += delivery.refused
        report.count(answer)
        for spooled, count in taken:
            spooled.sent += count
        done = [f for f in window if f.sent == len(f.lines)]
        for spooled in done:
            window.remove(spooled)
        clean = [f.path for f in done if not f.refused]
        self._remove(clean, report)
        report.files_sent += len(clean)
        for spooled in done:
            if spooled.refused:
                self._set_aside_refused(spooled, report)

    def _set_aside_refused(self, spooled: _File, report: DrainReport) -> None:
        """A file the service answered for, some of its events refused: those set aside in
        failed/ (the whole file when all were), then the file deleted. Until then it stays in
        new/: a crash sends it again, where its events sent are duplicates (counted nothing)
        and the refused are refused again."""
        refused = spooled.refused
        first = refused[0]
        problem = dict(first.problem or {"status": first.status, "detail": f"HTTP {first.status}"})
        statuses = "HTTP " + ", ".join(str(s) for s in sorted({r.status for r in refused}))
        kept: bytes | None = b"".join(r.line + b"\n" for r in refused)
        if len(refused) == len(spooled.lines):
            why = f"refused: {statuses}: {problem.get('detail', '')}"
            if spooled.whole:  # all it holds was refused: the file itself is moved (else its
                kept = None  # corrupt lines, kept apart already, would go with it)
        else:
            sent = len(spooled.lines) - len(refused)
            why = f"{len(refused)} events refused ({statuses}), the other {sent} sent"
            problem |= {
                "detail": f"{len(refused)} of the {len(spooled.lines)} events of "
                f"{spooled.path.name} were refused (the first: {problem.get('detail', '')}); "
                f"they are kept here, the other {sent} were sent",
                "file": spooled.path.name,
                "count": len(refused),
                "events": [
                    {"id": event_id(r.line), "status": r.status, "problem": r.problem}
                    for r in refused[:MAX_NOTED_LINES]
                ],
            }
        if self._set_aside(spooled.path, problem, why, report, kept):
            report.files_failed += 1
            report.events_refused += len(refused)

    def _remove(self, paths: list[Path], report: DrainReport) -> None:
        """Delete files the service has answered for. One that cannot be deleted (a sticky
        `new/` and another owner's file) does not stop the drain: it is said, and sent again
        next time, where its events are duplicates, counted nothing."""
        for path in paths:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                report.files_left += 1
                report.notes.append(
                    f"{path.name}: sent, but could not be removed ({exc.strerror or exc}); "
                    "left in new/ (sent again, as duplicates, until it can be)"
                )
        if paths:
            fsync_directory(self.new)

    def _set_aside(
        self,
        path: Path,
        problem: Mapping[str, Any],
        why: str,
        report: DrainReport,
        kept: bytes | None = None,
    ) -> bool:
        """Move `path` to failed/ beside its note, or with `kept` (its refused lines) put
        those there in its place and delete it: the note first, then what it describes, and
        the file leaves new/ last (a crash in between leaves it to the next drain). On failure
        (a full disk) leave it in new/, with no note, and say so. True when it was set aside."""
        note = self.failed / (path.name + NOTE)
        try:
            self._write(self.failed, note.name, _encoder.encode(dict(problem)))
            try:
                if kept is None:
                    os.rename(path, self.failed / path.name)
                else:
                    self._write(self.failed, path.name, kept)
            except FileNotFoundError:
                pass
            except OSError:
                with contextlib.suppress(OSError):
                    note.unlink()
                raise
            fsync_directory(self.failed)
            fsync_directory(self.new)
        except OSError as exc:
            report.files_left += 1
            report.notes.append(
                f"{path.name}: {why}; could not set it aside ({exc.strerror or exc}): left in "
                "new/, tried again at the next drain"
            )
            return False
        report.notes.append(f"{path.name}: {why}; set aside in {self.failed}")
        if kept is not None:
            self._remove([path], report)
        return True

    def _keep_corrupt(self, path: Path, corrupt: list[tuple[int, bytes, str]]) -> None:
        """The unreadable lines of `path`, raw and bounded, as failed/<name>.corrupt beside a
        note saying which lines and why (written before the file's events are sent: a crash
        after it keeps them again, in the same place)."""
        kept = bytearray()
        for _, line, _ in corrupt:
            kept += line[: MAX_KEPT_BYTES - len(kept)] + b"\n"
            if len(kept) >= MAX_KEPT_BYTES:
                break
        raw = bytes(kept[:MAX_KEPT_BYTES])
        problem = {
            "title": UNREADABLE_LINES,
            "detail": f"{len(corrupt)} lines of {path.name} are not JSON objects; they were not "
            "sent (the file's readable events were)",
            "file": path.name,
            "count": len(corrupt),
            "bytes": sum(len(line) + 1 for _, line, _ in corrupt),
            "kept_bytes": len(raw),
            "lines": [
                {"line": number, "bytes": len(line), "reason": reason}
                for number, line, reason in corrupt[:MAX_NOTED_LINES]
            ],
        }
        name = path.name + CORRUPT
        self._write(self.failed, name, raw)
        self._write(self.failed, name + NOTE, _encoder.encode(problem))

    def _remove_stale_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for path in self.tmp.iterdir():
            with contextlib.suppress(OSError):  # gone, or not ours to remove: not a reason to stop
                if path.lstat().st_mtime < cutoff:
                    path.unlink()
