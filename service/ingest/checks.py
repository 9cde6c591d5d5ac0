"""Checking a body's events and splitting them into per-project columns.

The compiled pass (`costcore.scan_events`, `scan_wire_events`) checks what it can from values
known valid; an event it does not pass goes through the exact checks here, which reject it
with its reason or accept it (and teach the caches its values).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from costcore import scan_events, scan_wire_events
from costcore.money import decimal_text_problem, parse_quantity

from ..events.decoding import DecodedItem
from ..events.model import (
    EventIn,
    WireEvent,
    identifier_problem,
    known_valid,
    time_window_problem,
)
from .batches import PendingBatch, to_epoch_us
from .store import SEEN_SHARDS, seen_shard

_QUANTITY_MEMO_LIMIT = 100_000

Reject = Callable[[DecodedItem, str, str], None]


def wire_quantity(value: str | int) -> int | None:
    """Micro-units of a quantity as sent, read as the exact path reads it (the one decimal
    grammar, then the quantity's checks); None when they would refuse it."""
    if isinstance(value, str) and decimal_text_problem(value, json_number=True) is not None:
        return None
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return None


class EventChecks:
    """The checks of one worker: the accepted time window and the quantities already read."""

    def __init__(self, dedup_window_days: int, max_future_skew_hours: int) -> None:
        self.window = timedelta(days=dedup_window_days)
        self.window_days = dedup_window_days
        self.future_skew = timedelta(hours=max_future_skew_hours)
        self.future_skew_hours = max_future_skew_hours
        # Quantity text -> micro-units, for the compiled pass (quantities repeat).
        self._quantities: dict[str, int] = {}
        # Quantity as sent (str or int) -> micro-units, for `ingest_wire`.
        self._wire_quantities: dict[str | int, int] = {}

    def window_us(self, now: datetime) -> tuple[int, int]:
        """The event times accepted now (epoch µs, both ends included): the deduplication
        window back, the future skew ahead."""
        now_us = to_epoch_us(now)
        ahead = int(self.future_skew.total_seconds()) * 1_000_000
        return now_us - self.window_days * 86_400_000_000, now_us + ahead

    def wire_batch(self, events: list[WireEvent], now: datetime) -> PendingBatch | None:
        """The columns of a wire batch when every event passes the compiled checks, belongs
        to one project and has an id of its own; None for any other batch."""
        n = len(events)
        quantities = self._wire_quantities
        if len(quantities) > _QUANTITY_MEMO_LIMIT:
            quantities.clear()
        for value in {ev.quantity for ev in events}.difference(quantities):
            micro = wire_quantity(value)
            if micro is None:
                return None  # `ingest` rejects it with its reason
            quantities[value] = micro
        scan = scan_wire_events(
            events, quantities, *self.window_us(now), SEEN_SHARDS, *known_valid()
        )
        project = events[0].project
        if scan.passed != n or len({ev.id for ev in events if ev.project == project}) != n:
            return None
        return PendingBatch.scanned(list(events), list(range(n)), scan)

    def columns(
        self, items: list[DecodedItem], now: datetime, reject: Reject
    ) -> tuple[dict[str, PendingBatch], dict[str, int]]:
        """Check every event and split the batch into per-project columns; and per project,
        the events whose id came earlier in the body (duplicates, left out)."""
        min_us, max_us = self.window_us(now)
        events = [item.event for item in items]
        quantities = self._quantities
        if len(quantities) > _QUANTITY_MEMO_LIMIT:
            quantities.clear()
        projects, labels, tag_keys, tag_values = known_valid()
        scan = scan_events(
            events, quantities, min_us, max_us, SEEN_SHARDS, projects, labels, tag_keys, tag_values
        )
        n = len(items)
        if scan.passed == n and n:
            # The usual batch: every event passed, one project, no id twice.
            project = events[0].project  # type: ignore[union-attr]
            ids = {ev.id for ev in events if ev.project == project}  # type: ignore[union-attr]
            if len(ids) == n:
                index = [item.index for item in items]
                return {project: PendingBatch.scanned(events, index, scan)}, {}  # type: ignore[arg-type]
        batches: dict[str, PendingBatch] = {}
        seen_in_batch: set[tuple[str, str]] = set()
        duplicates: dict[str, int] = {}
        status = scan.status
        for i, item in enumerate(items):
            ev = item.event
            if ev is None:
                reject(item, item.reason, item.field)
                continue
            if status[i]:
                checked = self._check_slowly(item, ev, now, reject)
                if checked is None:
                    continue
                quantity, epoch_us, day, shard = checked
            else:
                quantity = scan.quantity_micro[i]
                epoch_us = scan.epoch_us[i]
                day = scan.day[i]
                shard = scan.shard[i]
            key = (ev.project, ev.id)
            if key in seen_in_batch:
                duplicates[ev.project] = duplicates.get(ev.project, 0) + 1
                continue
            seen_in_batch.add(key)
            pb = batches.get(ev.project)
            if pb is None:
                pb = batches[ev.project] = PendingBatch([], [], [], [], [], [])
            pb.events.append(ev)
            pb.index.append(item.index)
            pb.quantity_micro.append(quantity)
            pb.epoch_us.append(epoch_us)
            pb.day.append(day)
            pb.shard.append(shard)
        return batches, duplicates

    def _check_slowly(
        self, item: DecodedItem, ev: EventIn, now: datetime, reject: Reject
    ) -> tuple[int, int, int, int] | None:
        """The exact per-event checks: (quantity, epoch µs, day, shard), or None if rejected."""
        problem = identifier_problem(ev)
        if problem is not None:
            reject(item, problem[1], problem[0])
            return None
        try:
            quantity = parse_quantity(ev.quantity)
        except (ValueError, TypeError) as exc:
            reject(item, str(exc), "quantity")
            return None
        self._quantities[str(ev.quantity)] = quantity
        late = time_window_problem(ev.time, now, self.window_days, self.future_skew_hours)
        if late is not None:
            reject(item, "event " + late, "time")
            return None
        epoch_us = to_epoch_us(ev.time)  # aware datetimes subtract in UTC
        return quantity, epoch_us, epoch_us // 86_400_000_000, seen_shard(ev.id)
