"""A project's events on their way to the ledger, as columns: checked (`PendingBatch`) and
priced (`PricedBatch`)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from costcore import ScanResult

from ..events.model import AcceptedEvent
from ..ledger.eventlog import LoggedEvent, encode_log
from ..ledger.logindex import day_name
from .store import seen_shard

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_us(when: datetime) -> int:
    """Microseconds since 1970 of an aware datetime (they subtract in UTC)."""
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass
class PendingEvent:
    index: int
    event: AcceptedEvent
    quantity_micro: int
    epoch_us: int
    day: str
    month: str
    expiry_day: int

    @classmethod
    def logged(cls, row: LoggedEvent, project: str, index: int) -> PendingEvent:
        """A logged event ready to be priced again, as ingestion would have prepared it."""
        day = day_name(row.epoch_us // 86_400_000_000)
        return cls(index, row.event(project), row.quantity_micro, row.epoch_us, day, day[:6], 0)


@dataclass
class PendingBatch:
    """One project's events ready to be priced, as parallel columns (no object per event).

    `rows` (rate-table row per event) is filled by `resolve_rows` once the project's catalog
    is known; pricing computes it itself when it is missing.
    """

    events: list[AcceptedEvent]
    index: list[int]  # position in the request body
    quantity_micro: list[int]
    epoch_us: list[int]
    day: list[int]  # days since 1970-01-01 (UTC)
    shard: list[int]  # `seen` shard of the id
    rows: Sequence[int] | None = None

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def scanned(
        cls, events: list[AcceptedEvent], index: list[int], scan: ScanResult
    ) -> PendingBatch:
        """The events of a scan that every one of them passed, with its columns."""
        return cls(
            events,
            index,
            scan.quantity_micro.tolist(),
            scan.epoch_us.tolist(),
            scan.day.tolist(),
            scan.shard.tolist(),
        )

    def take(self, keep: Sequence[int]) -> PendingBatch:
        """The events at these positions (in this order)."""
        rows = self.rows
        return PendingBatch(
            [self.events[i] for i in keep],
            [self.index[i] for i in keep],
            [self.quantity_micro[i] for i in keep],
            [self.epoch_us[i] for i in keep],
            [self.day[i] for i in keep],
            [self.shard[i] for i in keep],
            None if rows is None else [rows[i] for i in keep],
        )

    def pending(self) -> list[PendingEvent]:
        """The same events as `PendingEvent`s (expiry day left 0)."""
        out = []
        for ev, index, quantity, epoch_us, day in zip(
            self.events, self.index, self.quantity_micro, self.epoch_us, self.day, strict=True
        ):
            name = day_name(day)
            out.append(PendingEvent(index, ev, quantity, epoch_us, name, name[:6], 0))
        return out

    @classmethod
    def of(cls, events: Sequence[PendingEvent]) -> PendingBatch:
        return cls(
            [e.event for e in events],
            [e.index for e in events],
            [e.quantity_micro for e in events],
            [e.epoch_us for e in events],
            [e.epoch_us // 86_400_000_000 for e in events],
            [seen_shard(e.event.id) for e in events],
        )


@dataclass
class PricedBatch:
    """The result of pricing one project's events against one catalog."""

    batch: PendingBatch  # the priced events (the overflowed ones left out)
    costs: array[int]
    # The distinct (rate-card version, sku, category, fixed) the events were priced with, and
    # each event's index among them: as the log records them.
    rates: list[tuple[int, str, str, str]]
    rate_codes: array[int]
    attributed: list[str]  # the tags each event's cost is attributed by (canonical text)
    overflowed_batch: PendingBatch
    # Applied at once: the graduated-tier counters, as (month, sku, delta).
    tier_increments: list[tuple[str, str, int]]
    tier_checks: list[tuple[str, str, int]]
    tier_after: dict[tuple[str, str], int]  # (month, sku) -> cumulative after the batch
    total_cost: int
    total_quantity: int = 0

    @property
    def events(self) -> list[PendingEvent]:
        return self.batch.pending()

    @property
    def categories(self) -> list[str]:
        """Each event's SKU category."""
        rates = self.rates
        return [rates[c][2] for c in self.rate_codes]

    def log_entry(self) -> bytes:
        """The batch's entry in the accepted-event log (see `encode_log`)."""
        b = self.batch
        return encode_log(
            b.events, b.epoch_us, b.quantity_micro, self.costs, self.rates, self.rate_codes,
            self.attributed,
        )  # fmt: skip

    @property
    def overflowed(self) -> list[PendingEvent]:
        return self.overflowed_batch.pending()
