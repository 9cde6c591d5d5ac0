"""A CSV file (plain or gzip) read incrementally from the chunks of a stream (pure: no I/O).

Memory stays bounded by one chunk and one record: bytes are decompressed as they come,
decoded as UTF-8 incrementally, cut into lines, and lines joined into records while a quoted
field is open (RFC 4180 writes a quote inside a field as two quotes, so a record is complete
when it holds an even number of quotes). Each complete record is parsed by `csv` alone.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import zlib
from collections.abc import Iterator

from .focus import BillError

GZIP_MAGIC = b"\x1f\x8b"
# A record longer than this is refused rather than held (a file with an unclosed quote, or
# not CSV at all): a FOCUS row is a few kilobytes, its tags included.
MAX_RECORD_CHARS = 256 * 1024


class CsvRecords:
    """Feed it chunks (`feed`), then `finish`; each gives the records completed so far. Also
    counts the bytes and hashes the content, decompressed (the import's identity: a file
    and its gzip are the same bill)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0
        self._first = True
        self._head = b""
        self._inflate: zlib._Decompress | None = None
        self._decode = codecs.getincrementaldecoder("utf-8")()
        self._tail = ""  # the text after the last newline
        self._open: list[str] = []  # lines of a record whose quoted field is still open
        self._quotes = 0
        self._held = 0  # characters in `_open`
        self.records = 0

    def feed(self, chunk: bytes) -> Iterator[list[str]]:
        self.size += len(chunk)
        if self._first:
            # Gzip or not is told by the first two bytes, which may come one at a time.
            self._head += chunk
            if len(self._head) < len(GZIP_MAGIC):
                return
            chunk, self._head, self._first = self._head, b"", False
            if chunk.startswith(GZIP_MAGIC):
                self._inflate = zlib.decompressobj(wbits=31)
        raw = self._inflated(chunk) if self._inflate is not None else chunk
        self.digest.update(raw)
        yield from self._text(self._decoded(raw, final=False))

    def finish(self) -> Iterator[list[str]]:
        if self._first:  # a file shorter than the gzip magic: plain text
            self._first = False
            self.digest.update(self._head)
            yield from self._text(self._decoded(self._head, final=False))
        raw = self._inflated(b"") + self._inflate.flush() if self._inflate is not None else b""
        if self._inflate is not None and not self._inflate.eof:
            raise BillError(self.records, "*", "the gzip stream ends early")
        self.digest.update(raw)
        yield from self._text(self._decoded(raw, final=True))
        if self._tail:
            yield from self._line(self._tail)
            self._tail = ""
        if self._open:
            raise BillError(self.records, "*", "a quoted field is not closed")

    def _inflated(self, chunk: bytes) -> bytes:
        assert self._inflate is not None
        try:
            return self._inflate.decompress(chunk)
        except zlib.error:
            raise BillError(self.records, "*", "not a valid gzip stream") from None

    def _decoded(self, raw: bytes, final: bool) -> str:
        try:
            return self._decode.decode(raw, final=final)
        except UnicodeDecodeError:
            raise BillError(self.records, "*", "not UTF-8 text") from None

    def _text(self, text: str) -> Iterator[list[str]]:
        if not text:
            return
        lines = (self._tail + text).split("\n")
        self._tail = lines.pop()
        if len(self._tail) > MAX_RECORD_CHARS:
            raise BillError(self.records, "*", "a record is too long")
        for line in lines:
            yield from self._line(line + "\n")

    def _line(self, line: str) -> Iterator[list[str]]:
        self._open.append(line)
        self._held += len(line)
        self._quotes += line.count('"')
        if self._held > MAX_RECORD_CHARS:
            raise BillError(self.records, "*", "a record is too long")
        if self._quotes % 2:
            return
        record = "".join(self._open)
        self._open = []
        self._quotes = 0
        self._held = 0
        if not record.strip("\r\n"):
            return  # a blank line
        try:
            cells = next(csv.reader([record], strict=True))
        except csv.Error as exc:
            raise BillError(self.records, "*", f"not CSV: {exc}") from None
        self.records += 1
        yield cells
