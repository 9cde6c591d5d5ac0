"""Bill use cases: import a FOCUS export from a stream (staged, then committed at once), put
and read a project's mapping, and the drift report of a project against its bills."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from ..auth.model import Principal
from ..errors import Forbidden, NotFound
from .focus import BillError, BillRow, Header, read_header, read_row
from .model import BillKey, BillMapping, BillMappingView, check_mapping
from .reading import CsvRecords

if TYPE_CHECKING:
    from ..stores import Stores

# Rows summed in memory before their sums are sent (bounds the import's memory).
FLUSH_ROWS = 5_000
# An import that wrote nothing for this long was interrupted: its rows are deleted.
STALE_STAGING_MS = 3_600_000


class BillImport(msgspec.Struct, kw_only=True):
    """One committed bill import (or the answer to one): its id, the content's SHA-256 (what
    makes importing the same file twice change nothing), the FOCUS version its header reads
    as, what it held, and `status`: `imported`, or `duplicate` (that content was imported
    before: nothing changed; the earlier import is shown)."""

    id: str
    status: str = "imported"
    sha256: str
    focus_version: str
    rows: int
    corrections: int
    currency: str
    days: list[str]
    newest_charge_period_end: str | None
    imported_at: str


_record_decoder = msgspec.json.Decoder(BillImport)
_mapping_decoder = msgspec.json.Decoder(BillMapping)


class BillImportForbidden(Forbidden):
    """A bill spans every project it maps to: only a token for every project imports one."""

    def __init__(self) -> None:
        super().__init__("only an admin token for every project may import a bill")


class _Staging:
    """The sums of an import's rows not yet sent, and what the import has seen so far."""

    def __init__(self, store: Stores, import_id: str) -> None:
        self.store = store
        self.import_id = import_id
        self.sums: dict[str, dict[str, int]] = {}
        self.waiting = 0
        self.rows = 0
        self.corrections = 0
        self.days: set[str] = set()
        self.currency: str | None = None
        self.newest_end: datetime | None = None
        self.version = ""

    def add(self, row: BillRow, number: int) -> None:
        if self.currency is None:
            self.currency = row.currency
        elif row.currency != self.currency:
            raise BillError(number, "BillingCurrency", f"{row.currency!r} after {self.currency!r}")
        day = row.day.strftime("%Y%m%d")
        self.days.add(day)
        fields = self.sums.setdefault(day, {})
        key = BillKey.of(row).encode()
        for kind, amount in (
            ("b", row.billed_nano),
            ("e", row.effective_nano),
            ("q", row.quantity_nano),
            ("n", 1),
            ("k", int(row.correction)),
        ):
            name = f"{kind}|{key}"
            fields[name] = fields.get(name, 0) + amount
        self.rows += 1
        self.corrections += int(row.correction)
        if self.newest_end is None or row.period_end > self.newest_end:
            self.newest_end = row.period_end
        self.waiting += 1

    async def flush(self, at_least: int = 1) -> None:
        if self.waiting >= at_least and self.sums:
            now_ms = int(time.time() * 1000)
            await self.store.bills.add_rows(self.import_id, self.sums, now_ms)
            self.sums = {}
            self.waiting = 0


async def _sweep(store: Stores, now_ms: int) -> None:
    for stale in await store.bills.stale_imports(now_ms - STALE_STAGING_MS):
        await store.bills.discard(stale)


async def _stage(staging: _Staging, chunks: AsyncIterator[bytes]) -> CsvRecords:
    reader = CsvRecords()
    header: Header | None = None

    def rows(records: Iterator[list[str]]) -> None:
        # Lazily: `reader.records` counts the record just yielded.
        nonlocal header
        for cells in records:
            if header is None:
                header = read_header(cells)
            else:
                staging.add(read_row(header, cells, reader.records - 1), reader.records - 1)

    async for chunk in chunks:
        rows(reader.feed(chunk))
        await staging.flush(FLUSH_ROWS)
    rows(reader.finish())
    if header is None:
        raise BillError(0, "*", "the file is empty: no FOCUS header")
    await staging.flush()
    staging.version = header.version
    return reader


async def import_bill(
    store: Stores, principal: Principal, chunks: AsyncIterator[bytes]
) -> BillImport:
    """Read a FOCUS CSV (or gzip CSV) from `chunks`, staged under a fresh id and committed in
    one step; a BillError (naming row and column) leaves nothing behind. Raises
    BillImportForbidden for a token limited to some projects (before reading the body)."""
    if not principal.unscoped:
        raise BillImportForbidden()
    now_ms = int(time.time() * 1000)
    await _sweep(store, now_ms)
    import_id = f"{now_ms:012x}{secrets.token_hex(4)}"
    await store.bills.begin(import_id, now_ms)
    staging = _Staging(store, import_id)
    try:
        reader = await _stage(staging, chunks)
    except BaseException:
        await store.bills.discard(import_id)
        raise
    digest = reader.digest.hexdigest()
    record = BillImport(
        id=import_id,
        sha256=digest,
        focus_version=staging.version,
        rows=staging.rows,
        corrections=staging.corrections,
        currency=staging.currency or "",
        days=sorted(staging.days),
        newest_charge_period_end=(
            staging.newest_end.isoformat().replace("+00:00", "Z") if staging.newest_end else None
        ),
        imported_at=datetime.fromtimestamp(now_ms / 1000, UTC).isoformat().replace("+00:00", "Z"),
    )
    if await store.bills.commit(digest, import_id, msgspec.json.encode(record)):
        return record
    await store.bills.discard(import_id)
    earlier = await store.bills.committed_as(digest)
    assert earlier is not None  # committed, and imports are never deleted
    previous = _record_decoder.decode(earlier)
    previous.status = "duplicate"
    return previous


async def bill_imports(store: Stores) -> list[BillImport]:
    records = [_record_decoder.decode(raw) for raw in await store.bills.committed()]
    return sorted(records, key=lambda r: r.id)


async def put_mapping(store: Stores, project: str, mapping: BillMapping) -> BillMappingView:
    check_mapping(mapping)
    await store.bills.put_mapping(project, msgspec.json.encode(mapping))
    await store.projects.add_project(project)
    return BillMappingView(project, mapping.match, mapping.skus)


async def get_mapping(store: Stores, project: str) -> BillMappingView:
    raw = await store.bills.mapping(project)
    if raw is None:
        raise NotFound(f"project {project!r} has no bill mapping")
    mapping = _mapping_decoder.decode(raw)
    return BillMappingView(project, mapping.match, mapping.skus)


async def all_mappings(store: Stores) -> list[tuple[str, BillMapping]]:
    return [(p, _mapping_decoder.decode(raw)) for p, raw in (await store.bills.mappings()).items()]
