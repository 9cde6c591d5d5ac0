"""Streaming the FOCUS export: the log read page by page, each event's rows in the window,
written as CSV in chunks (focus.py maps an event onto the FOCUS columns).

A window's export reads only the log entries holding its events (the log index,
service/ledger/ranges.py); a graduated price's counters before each of them come from the
tier index (`ranges.TierPrefix`), or, for a log the indexes do not cover, from replaying the
entries of the window's months.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..ledger.eventlog import LoggedEvent
from ..ledger.folding import settle
from ..ledger.ranges import RangeStats, read_log_range, tier_prefix
from ..projects.service import project_catalog
from ..ratecards.catalog import PricingCatalog, RateCards
from .aggregate import Granularity, Part, aggregated_rows
from .csvsafe import neutralise
from .focus import HEADER, NUMERIC_COLUMNS, Cell, RowContext, focus_row
from .pricing import ExportError, LogPricing

if TYPE_CHECKING:
    from ..stores import Stores

DEFAULT_CHUNK_BYTES = 64 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The cells neutralised where they would start a spreadsheet formula (NUMERIC_COLUMNS).
_TEXT_POSITIONS: tuple[int, ...] = tuple(
    i for i, name in enumerate(HEADER) if name not in NUMERIC_COLUMNS
)


def _window_us(when: datetime | None) -> int | None:
    if when is None:
        return None
    delta = when.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parts_of_batch(
    pricing: LogPricing,
    batch: Sequence[LoggedEvent],
    start_us: int | None,
    end_us: int | None,
) -> Iterator[Part]:
    """The priced parts of one logged batch's events whose time is in ``[start, end)``.

    Events outside the window still advance the tier counters: they shaped the prices.
    """
    for row in batch:
        inside = (start_us is None or row.epoch_us >= start_us) and (
            end_us is None or row.epoch_us < end_us
        )
        try:
            version, sku = pricing.sku_of(row)
        except ExportError:
            if inside:
                raise
            continue
        if not inside and not sku.tiers:
            continue
        parts = pricing.segments(row, sku)
        if inside:
            for seg in parts:
                yield row, version, sku, seg


def rows_of_batch(
    ctx: RowContext,
    pricing: LogPricing,
    batch: Sequence[LoggedEvent],
    start_us: int | None,
    end_us: int | None,
) -> Iterator[list[Cell]]:
    """Rows of one logged batch whose event time is in ``[start, end)``."""
    for row, version, sku, seg in parts_of_batch(pricing, batch, start_us, end_us):
        yield focus_row(ctx, row, version, sku, seg)


def _inside(batch: Sequence[LoggedEvent], start_us: int | None, end_us: int | None) -> int:
    """How many of the batch's events have their time in ``[start, end)``."""
    if start_us is None and end_us is None:
        return len(batch)
    return sum(
        1
        for row in batch
        if (start_us is None or row.epoch_us >= start_us)
        and (end_us is None or row.epoch_us < end_us)
    )


def _has_tiers(catalog: PricingCatalog | None) -> bool:
    """Whether any version of the card has a graduated price (its counters run per month)."""
    if catalog is None:
        return False
    history = catalog.history
    return any(
        sku.tiers for i in range(len(history.versions)) for sku in history.priced(i).values()
    )


@dataclass
class FocusExport:
    """One export of a project, its rate card and log position read before streaming."""

    store: Stores
    context: RowContext
    catalog: PricingCatalog | None
    last_entry: str  # the log entry the export stops at: later batches are not included
    stats: RangeStats = field(default_factory=RangeStats)  # what the read of the log did
    # The tier index's fields of the months last read: periods of one month read them once.
    tier_fields: dict[tuple[str, ...], list[tuple[tuple[int, int], str, str, int]]] = field(
        default_factory=dict
    )
    # What the export did so far (an export job's progress): the events of the window read,
    # the CSV rows written (header excluded).
    events_read: int = 0
    rows_written: int = 0

    def rows(
        self, start: datetime | None = None, end: datetime | None = None
    ) -> AsyncIterator[list[Cell]]:
        return self._rows(_window_us(start), _window_us(end))

    async def _rows(self, start_us: int | None, end_us: int | None) -> AsyncIterator[list[Cell]]:
        async for pricing, batch in self._priced_batches(start_us, end_us):
            for cells in rows_of_batch(self.context, pricing, batch, start_us, end_us):
                yield cells

    async def parts(self, start_us: int | None, end_us: int | None) -> AsyncIterator[Part]:
        """The priced parts of the events in ``[start_us, end_us)``, in the log's order."""
        async for pricing, batch in self._priced_batches(start_us, end_us):
            for part in parts_of_batch(pricing, batch, start_us, end_us):
                yield part

    async def _priced_batches(
        self, start_us: int | None, end_us: int | None
    ) -> AsyncIterator[tuple[LogPricing, list[LoggedEvent]]]:
        """The logged batches a read of the window needs, each with the pricing (its tier
        counters as the entries before it left them) to price its events by."""
        pricing = LogPricing(self.catalog)
        project, last = self.context.project, self.last_entry
        prefix = None
        tiered = _has_tiers(self.catalog)
        if tiered and (start_us is not None or end_us is not None):
            prefix = await tier_prefix(
                self.store, project, last, start_us, end_us, pricing.counts, self.tier_fields
            )
        batches = read_log_range(
            self.store,
            project,
            last,
            start_us,
            end_us,
            whole_months=tiered and prefix is None,
            stats=self.stats,
        )
        async for entry_id, batch in batches:
            if prefix is not None:  # the counters as the entries before this one left them
                pricing.set_counters(prefix.before(entry_id))
            self.events_read += _inside(batch, start_us, end_us)
            yield pricing, batch

    async def csv_chunks(
        self,
        start: datetime | None = None,
        end: datetime | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        granularity: Granularity = "event",
    ) -> AsyncIterator[bytes]:
        """The CSV (header first) in chunks of about ``chunk_bytes`` (UTF-8): one row per
        event (and tier), or per charge period with ``granularity`` "hour" or "day"."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(HEADER)
        if granularity == "event":
            rows = self.rows(start, end)
        else:
            rows = aggregated_rows(
                self.store,
                self.context,
                self.last_entry,
                self.parts,
                _window_us(start),
                _window_us(end),
                granularity,
            )
        async for cells in rows:
            for i in _TEXT_POSITIONS:
                cells[i] = neutralise(cells[i])
            writer.writerow(cells)
            self.rows_written += 1
            if buffer.tell() >= chunk_bytes:
                yield buffer.getvalue().encode()
                buffer.seek(0)
                buffer.truncate()
        if buffer.tell():
            yield buffer.getvalue().encode()


async def first_chunk_read(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks` with its first chunk already read: the stream's first reads of the log
    happen before the answer starts, so a store outage there is a 503 problem rather than
    a 200 cut after its headers (issue 33.7). A failure later can only cut the stream: the
    chunked encoding is left unterminated, which a client detects."""
    first = await anext(chunks, None)

    async def chained() -> AsyncIterator[bytes]:
        if first is not None:
            yield first
        async for chunk in chunks:
            yield chunk

    return chained()


async def prepare_export(store: Stores, rate_cards: RateCards, project: str) -> FocusExport:
    """Read what the export needs before the first byte is sent, so that a problem is an
    error answer rather than a truncated file."""
    settings, catalog = await project_catalog(store, rate_cards, project)
    card = settings.rate_card
    last = await store.ledger.last_log_entry(project)
    # Folded up to there, the log's indexes cover what the export reads (ledger/ranges.py).
    await settle(store, project)
    if last and catalog is None:
        raise ExportError(f"the project's rate card {card!r} no longer exists")
    return FocusExport(store, RowContext(project, card), catalog, last)


def export_filename(project: str, start: datetime | None, end: datetime | None) -> str:
    def part(when: datetime | None, default: str) -> str:
        return when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ") if when else default

    return f"focus-{project}-{part(start, 'start')}-{part(end, 'now')}.csv"
