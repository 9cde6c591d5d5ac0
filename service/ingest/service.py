"""Ingestion: validate events, price them in the compiled core, apply them exactly once.

Per project, one batch is priced and then applied by one Lua script that checks,
before it writes anything, that no event id was seen before and that no tier counter
moved since it was read. If either check fails nothing was written; the batch is
priced again without the duplicates, or against the new counters. That loop is what
keeps graduated prices exact when several workers post for one project at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from costcore import (
    ScanResult,
    dictionary_encode,
    pair_codes,
    price_batch,
    rate_rows,
    remap_codes,
    scan_events,
    scan_wire_events,
)
from costcore.money import decimal_text_problem, format_money, parse_quantity
from costcore.result import STATUS_PRICED

from ..auth.model import Principal
from ..budgets.firing import budget_counters
from ..budgets.model import Budget
from ..events.decoding import DecodedItem
from ..events.model import (
    AcceptedEvent,
    EventIn,
    WireEvent,
    identifier_problem,
    known_valid,
    valid_project,
)
from ..ingest.store import BudgetCounter, IngestAnswer, IngestPlan
from ..ledger.eventlog import LoggedEvent, encode_log
from ..ledger.folding import Folder, day_name
from ..ledger.store import attributed_tags
from ..metrics import DEAD_LETTERS_DROPPED
from ..projects.model import DEFAULT_ATTRIBUTION_TAGS, ProjectSettings
from ..ratecards.catalog import PricingCatalog, RateCards
from ..ratecards.model import SKU_PATTERN, is_valid_sku
from ..storage.keys import SEEN_SHARDS, seen_shard
from ..storage.limbs import CAP_UNITS, bound_units
from ..stores import Stores

MAX_APPLY_ATTEMPTS = 64
_budget_decoder = msgspec.json.Decoder(Budget)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RejectedEvent(msgspec.Struct):
    index: int
    id: str | None
    reason: str
    field: str | None = None
    project: str | None = None


class IngestReport(msgspec.Struct):
    accepted: int
    duplicates: int
    rejected: list[RejectedEvent]
    # Cost of the accepted events by project, as exact decimal strings.
    cost_by_project: dict[str, str] = {}


# A dead letter keeps the rejected event whole up to this size (as compact JSON; any event
# the model accepts is smaller), and past it only an excerpt of its first bytes, with the
# size and SHA-256 of the whole: an oversized event neither fills the store nor the listing
# (it cannot be replayed, its sender must post it again). Reasons are cut to a bound too.
DEAD_LETTER_EVENT_BYTES = 8192
MAX_REASON_CHARS = 512
# `ingest` (the exact path, not `ingest_wire`) checks larger bodies in a worker thread.
CHECK_IN_THREAD_EVENTS = 2_000
# Dead letters kept per project by default (the oldest dropped, counted in /metrics).
DEFAULT_DEAD_LETTER_LIMIT = 10_000


def dead_letter(
    event_id: str, project: str, reason: str, where: str, rejected_at: str, raw: Any
) -> bytes:
    """A dead letter's JSON record: the event whole, or only its excerpt when it is larger
    than `DEAD_LETTER_EVENT_BYTES` (`truncated`), with its size and digest either way."""
    text = msgspec.json.encode(raw)
    record: dict[str, Any] = {
        "id": event_id,
        "project": project,
        "reason": reason,
        "field": where,
        "rejected_at": rejected_at,
        "event": raw,
        "size": len(text),
        "sha256": hashlib.sha256(text).hexdigest(),
        "truncated": False,
    }
    if len(text) > DEAD_LETTER_EVENT_BYTES:
        record["event"] = None
        record["excerpt"] = text[:DEAD_LETTER_EVENT_BYTES].decode("utf-8", "ignore")
        record["truncated"] = True
    return msgspec.json.encode(record)


class _Rejections:
    """The events a body loses, as the report lists them and as dead letters (kept per
    project, for the caller to see, fix and post again)."""

    def __init__(self, now: datetime, batch: bool) -> None:
        self.now = now
        self.batch = batch
        self.rejected: list[RejectedEvent] = []
        self.dead_letters: dict[str, list[tuple[str, bytes, int]]] = {}

    def reject(self, item: DecodedItem, reason: str, where: str) -> None:
        ev = item.event
        raw = msgspec.to_builtins(ev) if ev is not None else item.raw
        project = ev.project if ev is not None else _raw_project(item.raw)
        if project is not None and not valid_project(project):
            project = None  # never a key built from a name that breaks the pattern
        event_id = ev.id if ev is not None else _raw_id(item.raw)
        if not where.startswith("$"):
            where = f"$[{item.index}].{where}" if self.batch else f"$.{where}"
        if len(reason) > MAX_REASON_CHARS:  # msgspec quotes a bad value (an enum's) whole
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        if len(where) > MAX_REASON_CHARS:
            where = where[: MAX_REASON_CHARS - 3] + "..."
        self.rejected.append(RejectedEvent(item.index, event_id, reason, where, project))
        if project is not None and event_id is not None:
            record = dead_letter(event_id, project, reason, where, self.now.isoformat(), raw)
            self.dead_letters.setdefault(project, []).append(
                (event_id, record, int(self.now.timestamp() * 1000))
            )


def _wire_quantity(value: str | int) -> int | None:
    """Micro-units of a quantity as sent, read as the exact path reads it (the one decimal
    grammar, then the quantity's checks); None when they would refuse it."""
    if isinstance(value, str) and decimal_text_problem(value, json_number=True) is not None:
        return None
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return None


class ForbiddenProject(Exception):
    def __init__(self, project: str, index: int) -> None:
        super().__init__(project)
        self.project = project
        self.index = index


class IngestConflict(Exception):
    """The batch could not be applied after many attempts (extreme contention)."""


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


def _to_epoch_us(when: datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_VersionIndex = tuple[list[int], list[dict[str, int]]]
_version_cache: dict[int, tuple[PricingCatalog, _VersionIndex]] = {}


def _version_index(catalog: PricingCatalog) -> _VersionIndex:
    """Start (epoch µs) and SKU -> row table of every version (once per catalog)."""
    hit = _version_cache.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    versions = catalog.history.versions
    tables: list[dict[str, int]] = [{} for _ in versions]
    for (vi, code), row in catalog.row_of.items():
        tables[vi][code] = row
    index = ([_to_epoch_us(v.effective_from) for v in versions], tables)
    if len(_version_cache) >= 64:
        _version_cache.clear()
    _version_cache[id(catalog)] = (catalog, index)
    return index


_RowFacts = tuple[list[bool], list[str], list[str], list[int]]
_row_facts_cache: dict[int, tuple[PricingCatalog, _RowFacts]] = {}


def _row_facts(catalog: PricingCatalog) -> _RowFacts:
    """Per rate-table row: tiered, category, "f"/"e", version number (once per catalog)."""
    hit = _row_facts_cache.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    skus = catalog.sku_of_row
    version = [0] * len(skus)
    for (vi, _code), row in catalog.row_of.items():
        version[row] = catalog.history.versions[vi].version
    facts = (
        [bool(s.tiers) for s in skus],
        [s.category for s in skus],
        ["f" if s.fixed else "e" for s in skus],
        version,
    )
    if len(_row_facts_cache) >= 64:
        _row_facts_cache.clear()
    _row_facts_cache[id(catalog)] = (catalog, facts)
    return facts


def resolve_rows(batch: PendingBatch, catalog: PricingCatalog) -> array[int]:
    """Rate-table row of every event, -1 where its time or SKU has no price (the same answer
    as `catalog.row_of[(catalog.history.index_at(time), sku)]`), in one compiled pass."""
    starts, tables = _version_index(catalog)
    return rate_rows([ev.sku for ev in batch.events], batch.epoch_us, starts, tables)


def _tier_pairs(batch: PendingBatch, catalog: PricingCatalog) -> tuple[list[Any], array[int]]:
    """The distinct (row, day) of the events whose SKU is graduated, and each event's pair
    (-1 for the others)."""
    rows = batch.rows if batch.rows is not None else resolve_rows(batch, catalog)
    return pair_codes(rows, batch.day, _row_facts(catalog)[0])


def _tier_key(catalog: PricingCatalog, row: int, day: int) -> tuple[str, str]:
    """The (month, sku) tier counter of an event on this row and day."""
    return day_name(day)[:6], catalog.sku_of_row[row].code


def tier_keys_needed(
    events: Sequence[PendingEvent] | PendingBatch, catalog: PricingCatalog
) -> list[tuple[str, str]]:
    """The (month, sku) tier counters that pricing these events reads."""
    batch = events if isinstance(events, PendingBatch) else PendingBatch.of(events)
    pairs, _ = _tier_pairs(batch, catalog)
    return sorted({_tier_key(catalog, row, day) for row, day in pairs})


def price_events(
    project: str,
    events: Sequence[PendingEvent] | PendingBatch,
    catalog: PricingCatalog,
    tier_reader: Mapping[tuple[str, str], int],
    tag_keys: frozenset[str] = DEFAULT_ATTRIBUTION_TAGS,
) -> PricedBatch:
    """Price events in order with the compiled kernel.

    `tier_reader` maps (month, sku) -> cumulative quantity before this batch; `tag_keys` are
    the tags the project attributes costs by (recorded per event in the log, whose fold makes
    the totals). Every event must have a price (see `resolve_rows`).
    """
    batch = events if isinstance(events, PendingBatch) else PendingBatch.of(events)
    rows = batch.rows if batch.rows is not None else resolve_rows(batch, catalog)
    n = len(batch)
    row_tiered, row_category, row_fixed, row_version = _row_facts(catalog)

    # Graduated SKUs price against their (month, sku) counter: a slot per counter.
    slots: dict[tuple[str, str], int] = {}
    if any(row_tiered[r] for r in set(rows)):
        pairs, pair_of = _tier_pairs(batch, catalog)
        slot_of_pair = [
            slots.setdefault(_tier_key(catalog, row, day), len(slots)) for row, day in pairs
        ]
        tier_slot = array("i", remap_codes(pair_of, slot_of_pair))
    else:
        tier_slot = array("i", [-1]) * n
    slot_keys = list(slots)
    before = array("q", [tier_reader[k] for k in slot_keys])
    cumulative = array("q", before)
    # One group: the batch's exact cost and quantity (a group's sums limit no event: limits
    # hold per event and per tier counter; the sums a fold makes are kept in two limbs).
    result = price_batch(
        array("q", batch.quantity_micro),
        array("i", rows),
        array("i", bytes(4 * n)),
        tier_slot,
        catalog.table,
        cumulative,
        1,
    )
    # Immediate increments: only the graduated-tier counters (the next batch is priced
    # against them).
    increments: list[tuple[str, str, int]] = []
    tier_checks: list[tuple[str, str, int]] = []
    for s, (month, sku_code) in enumerate(slot_keys):
        tier_checks.append((month, sku_code, before[s]))
        if cumulative[s] != before[s]:
            increments.append((month, sku_code, cumulative[s] - before[s]))

    if result.accepted == n:
        priced, costs, overflowed = batch, result.cost_nano, batch.take(())
        kept_rows = rows
    else:
        keep = [i for i in range(n) if result.status[i] == STATUS_PRICED]
        priced = batch.take(keep)
        costs = array("q", [result.cost_nano[i] for i in keep])
        kept_rows = [rows[i] for i in keep]
        overflowed = batch.take([i for i in range(n) if result.status[i] != STATUS_PRICED])
    attributed = [attributed_tags(ev.tags, tag_keys) if ev.tags else "" for ev in priced.events]
    distinct_rows, rate_codes = dictionary_encode(kept_rows)
    sku_of_row = catalog.sku_of_row
    return PricedBatch(
        priced,
        costs,
        [
            (row_version[r], sku_of_row[r].code, row_category[r], row_fixed[r])
            for r in distinct_rows
        ],
        rate_codes,
        attributed,
        overflowed,
        increments,
        tier_checks,
        {k: cumulative[s] for s, k in enumerate(slot_keys)},
        sum(result.group_cost_nano),
        sum(result.group_quantity_micro),
    )


_QUANTITY_MEMO_LIMIT = 100_000
_CACHE_LIMIT = 10_000  # projects whose settings a worker keeps
MAX_SETTINGS_ATTEMPTS = 5


class Ingestor:
    def __init__(
        self,
        store: Stores,
        rate_cards: RateCards,
        dedup_window_days: int = 35,
        max_future_skew_hours: int = 24,
        log_retention_days: int = 0,
        folder: Folder | None = None,
        dead_letter_limit: int = DEFAULT_DEAD_LETTER_LIMIT,
    ) -> None:
        self.store = store
        self.dead_letter_limit = dead_letter_limit
        self.rate_cards = rate_cards
        # Told of every accepted batch, so its queued totals are folded in soon (without one,
        # they are folded by the next read of the project's totals).
        self.folder = folder
        self.window = timedelta(days=dedup_window_days)
        self.window_days = dedup_window_days
        self.future_skew = timedelta(hours=max_future_skew_hours)
        self.log_retention_ms = log_retention_days * 86_400_000
        # Batches that move tier counters are priced one at a time per project inside this
        # process (the lock covers pricing, not the script's round trip), so the optimistic
        # check only races batches of other processes.
        self._tier_locks: dict[str, asyncio.Lock] = {}
        # (month, sku) -> cumulative after the last batch this process priced for a project:
        # the next batch is priced against it while that batch's script is still running.
        # A wrong hint costs one "counter moved" answer and a fresh read, never a wrong price.
        self._tier_hints: dict[str, dict[tuple[str, str], int]] = {}
        # The answer of the batch last sent per project: the next one is sent after it.
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        self._budgets: dict[str, tuple[str, list[Budget]]] = {}
        self._known_projects: set[str] = set()
        # Quantity text -> micro-units, for the compiled pass (quantities repeat).
        self._quantities: dict[str, int] = {}
        # Quantity as sent (str or int) -> micro-units, for `ingest_wire`.
        self._wire_quantities: dict[str | int, int] = {}
        # Project settings and pricing catalogs as last read; see `ingest` for why a stale
        # entry can cost a retry but never a wrong total.
        self._settings: dict[str, ProjectSettings] = {}
        self._catalogs: dict[str, PricingCatalog] = {}

    async def ingest(
        self, items: list[DecodedItem], principal: Principal, batch: bool = True
    ) -> IngestReport:
        """Validate, price and apply a decoded batch. Raises ForbiddenProject before any write.

        Rejections name their field as a JSON path into the body (`$[3].quantity`, or
        `$.quantity` when the body was a single event).
        """
        if principal.projects is not None:
            for item in items:
                project = item.event.project if item.event else _raw_project(item.raw)
                if project is not None and not principal.can_access(project):
                    raise ForbiddenProject(project, item.index)
        rejections = _Rejections(datetime.now(UTC), batch)
        if len(items) > CHECK_IN_THREAD_EVENTS:
            # The exact checks of a large body (each rejection with its message and dead
            # letter) in a thread: the loop goes on answering meanwhile.
            batches, duplicates = await asyncio.to_thread(
                self._columns, items, rejections.now, rejections.reject
            )
        else:
            batches, duplicates = self._columns(items, rejections.now, rejections.reject)
        by_index: dict[int, DecodedItem] = {}

        def item_at(index: int) -> DecodedItem:
            if not by_index:
                by_index.update((it.index, it) for it in items)
            return by_index[index]

        return await self._ingest_batches(batches, duplicates, rejections, item_at)

    async def ingest_wire(
        self, events: list[WireEvent], principal: Principal
    ) -> IngestReport | None:
        """`ingest` of a batch read by `decode_wire_batch`, when every event passes the compiled
        checks (`costcore.scan_wire_events`), belongs to one project and has an id of its own:
        the usual scheduler batch, without a datetime or a Decimal made per event. None for any
        other batch, before anything is written: the caller then decodes it with
        `decode_events` and calls `ingest`, which reads and checks every event exactly.
        Raises ForbiddenProject as `ingest` does."""
        if principal.projects is not None:
            for index, ev in enumerate(events):
                if not principal.can_access(ev.project):
                    raise ForbiddenProject(ev.project, index)
        n = len(events)
        if not n:
            return None
        now = datetime.now(UTC)
        quantities = self._wire_quantities
        if len(quantities) > _QUANTITY_MEMO_LIMIT:
            quantities.clear()
        for value in {ev.quantity for ev in events}.difference(quantities):
            micro = _wire_quantity(value)
            if micro is None:
                return None  # `ingest` rejects it with its reason
            quantities[value] = micro
        scan = scan_wire_events(
            events, quantities, *self._window_us(now), SEEN_SHARDS, *known_valid()
        )
        project = events[0].project
        if scan.passed != n or len({ev.id for ev in events if ev.project == project}) != n:
            return None
        pending = PendingBatch.scanned(list(events), list(range(n)), scan)

        def item_at(index: int) -> DecodedItem:  # for a rejection's message and dead letter
            return DecodedItem(index, events[index].event())

        return await self._ingest_batches({project: pending}, {}, _Rejections(now, True), item_at)

    async def _ingest_batches(
        self,
        batches: dict[str, PendingBatch],
        in_body: dict[str, int],
        rejections: _Rejections,
        item_at: Callable[[int], DecodedItem],
    ) -> IngestReport:
        """Price and apply each project's checked events; the report of the whole body.
        `in_body`: per project, the events that repeated an id earlier in the body. They are
        duplicates like those the store finds, and counted in the project's counter with
        them (by the ingest script, or `count_duplicates` when nothing is applied)."""
        reject = rejections.reject
        accepted = 0
        duplicates = 0
        cost_by_project: dict[str, int] = {}
        for project, pending in batches.items():
            # Settings and rate card come from this worker's cache first; the ingest script
            # refuses a batch priced with settings that moved (then they are read again).
            # Events are only ever rejected as unpriceable on freshly read ones.
            for attempt in range(MAX_SETTINGS_ATTEMPTS):
                fresh = attempt > 0
                settings = await self._settings_of(project, fresh)
                card_name = settings.rate_card
                catalog = await self._catalog_of(card_name, fresh)
                rows: Sequence[int] = []
                if catalog is not None:
                    rows = resolve_rows(pending, catalog)
                    usable = _usable_rows(catalog, settings.currency)
                    bad = []
                    if not (all(usable) and min(rows, default=0) >= 0):  # the usual batch
                        bad = [i for i, row in enumerate(rows) if row < 0 or not usable[row]]
                else:
                    bad = list(range(len(pending)))
                pending.rows = rows
                if bad:
                    if not fresh:
                        continue
                    for i in bad:
                        item = item_at(pending.index[i])
                        assert item.event is not None
                        reason = _unpriceable(item.event, catalog, card_name, settings.currency)
                        assert reason is not None
                        reject(item, reason[0], reason[1])
                    bad_set = set(bad)
                    pending = pending.take([i for i in range(len(pending)) if i not in bad_set])
                if not len(pending) or catalog is None:
                    if in_body.get(project):
                        duplicates += in_body[project]
                        await self.store.ingest.count_duplicates(project, in_body[project])
                    break
                applied = await self._apply(
                    project, pending, catalog, settings, in_body.get(project, 0)
                )
                if applied is None:
                    continue  # settings or rate card moved: read them again
                done, dups, cost, overflowed, beyond = applied
                for index in overflowed.index:
                    reject(
                        item_at(index), "cost exceeds the largest representable amount", "quantity"
                    )
                for index in beyond:
                    reject(item_at(index), PAST_BOUNDS, "quantity")
                accepted += done
                duplicates += dups
                if done:
                    cost_by_project[project] = cost_by_project.get(project, 0) + cost
                elif dups:
                    await self.store.ingest.count_duplicates(project, dups)
                break
            else:
                raise IngestConflict(project)

        for project, records in rejections.dead_letters.items():
            dropped = await self.store.rejected.put_rejected(
                project, records, self.dead_letter_limit
            )
            if dropped:
                DEAD_LETTERS_DROPPED.inc(dropped)
        return IngestReport(
            accepted=accepted,
            duplicates=duplicates,
            rejected=sorted(rejections.rejected, key=lambda r: r.index),
            cost_by_project={p: format_money(c) for p, c in cost_by_project.items()},
        )

    def _window_us(self, now: datetime) -> tuple[int, int]:
        """The event times accepted now (epoch µs, both ends included): the deduplication
        window back, the future skew ahead."""
        now_us = _to_epoch_us(now)
        ahead = int(self.future_skew.total_seconds()) * 1_000_000
        return now_us - self.window_days * 86_400_000_000, now_us + ahead

    def _columns(
        self,
        items: list[DecodedItem],
        now: datetime,
        reject: Callable[[DecodedItem, str, str], None],
    ) -> tuple[dict[str, PendingBatch], dict[str, int]]:
        """Check every event and split the batch into per-project columns; and per project,
        the events whose id came earlier in the body (duplicates, left out).

        The compiled pass (`costcore.scan_events`) checks what it can from values known
        valid; an event it does not pass goes through the exact checks here, which reject
        it with its reason or accept it (and teach the caches its values).
        """
        min_us, max_us = self._window_us(now)
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
        self,
        item: DecodedItem,
        ev: EventIn,
        now: datetime,
        reject: Callable[[DecodedItem, str, str], None],
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
        if ev.time < now - self.window:
            reject(
                item,
                f"event time is older than the deduplication window ({self.window_days} days)",
                "time",
            )
            return None
        if ev.time > now + self.future_skew:
            reject(item, "event time is too far in the future", "time")
            return None
        epoch_us = _to_epoch_us(ev.time)  # aware datetimes subtract in UTC
        return quantity, epoch_us, epoch_us // 86_400_000_000, seen_shard(ev.id)

    async def _settings_of(self, project: str, fresh: bool) -> ProjectSettings:
        """The project's settings, from this worker's cache unless `fresh`."""
        settings = None if fresh else self._settings.get(project)
        if settings is None:
            if len(self._settings) >= _CACHE_LIMIT:
                self._settings.clear()
            settings = self._settings[project] = ProjectSettings.of(
                await self.store.projects.project_meta(project)
            )
        return settings

    async def _catalog_of(self, name: str, fresh: bool) -> PricingCatalog | None:
        """The rate card's pricing catalog, from this worker's cache unless `fresh`."""
        catalog = None if fresh else self._catalogs.get(name)
        if catalog is None:
            catalog = await self.rate_cards.catalog(name)
            if catalog is not None:
                self._catalogs[name] = catalog
        return catalog

    async def _apply(
        self,
        project: str,
        events: PendingBatch,
        catalog: PricingCatalog,
        settings: ProjectSettings,
        duplicates: int = 0,
    ) -> tuple[int, int, int, PendingBatch, list[int]] | None:
        """Price and apply until it lands. Returns (accepted, duplicates, cost, overflowed,
        beyond: the body indexes of events the project's sums cannot take), or None when the
        project's settings or rate card moved since `settings`/`catalog` were read.
        `duplicates`: those found before (in the body), counted with the ones found here."""
        budgets_rev = settings.budgets_rev
        tag_keys = settings.attribution_tags
        expected = settings.as_priced
        if project not in self._known_projects:
            await self.store.projects.add_project(project)
            self._known_projects.add(project)
        beyond: list[int] = []
        await self.store.ingest.learn_features()
        tier_keys = tier_keys_needed(events, catalog)
        for attempt in range(MAX_APPLY_ATTEMPTS):
            budgets = await self.budgets_of(project, budgets_rev)
            if attempt:
                # Another process moved a tier counter: back off a little, with jitter.
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
            if tier_keys:
                # Priced one at a time per project in this process, each against the counters
                # its predecessor leaves (the hint), and sent in that order once the
                # predecessor's script answered: the next batch is priced while the script of
                # the one before runs, instead of the two taking turns.
                lock = self._tier_locks.setdefault(project, asyncio.Lock())
                async with lock:
                    before = self._in_flight.get(project)
                    if attempt and before is not None:
                        await before  # read the counters fresh once the batches ahead landed
                        before = None
                    # The hint only while the batch it comes from is still in flight: after
                    # that the counters are read (another process may have moved them).
                    hints = self._tier_hints.get(project, {}) if before is not None else {}
                    missing = [k for k in tier_keys if k not in hints]
                    values = await self.store.ingest.tier_cumulatives(project, missing)
                    tiers = {**dict(zip(missing, values, strict=True)), **hints}
                    priced = price_events(project, events, catalog, tiers, tag_keys)
                    if not len(priced.batch):
                        return 0, duplicates, 0, priced.overflowed_batch, beyond
                    self._tier_hints[project] = {**hints, **priced.tier_after}
                    plan = await self._plan(
                        project, priced, catalog, budgets, budgets_rev, duplicates, expected
                    )
                    turn = self._in_flight[project] = asyncio.get_running_loop().create_future()
                    # One server: on the wire now, behind the batch before it, so it need not
                    # wait for that one's answer. A cluster: sent once that one has answered.
                    try:
                        answer = (
                            self.store.ingest.submit_batch(plan)
                            if self.store.ingest.ordered
                            else None
                        )
                    except BaseException:
                        self._end_turn(project, turn)  # the batches behind must not wait on it
                        raise
                try:
                    if answer is None:
                        if before is not None:
                            await asyncio.shield(before)
                        answer = self.store.ingest.apply_batch(plan)
                    outcome = await answer
                finally:
                    self._end_turn(project, turn)
            else:
                priced = price_events(project, events, catalog, {}, tag_keys)
                if not len(priced.batch):
                    return 0, duplicates, 0, priced.overflowed_batch, beyond
                plan = await self._plan(
                    project, priced, catalog, budgets, budgets_rev, duplicates, expected
                )
                outcome = await self.store.ingest.submit_batch(plan)
            if outcome.status == IngestAnswer.APPLIED:
                if self.folder is not None:
                    self.folder.touched(project)
                # What the script's HSETNXs did to the settings, so the cache stays true.
                settings.first_priced(catalog.name, catalog.currency)
                return (
                    len(priced.batch),
                    duplicates,
                    priced.total_cost,
                    priced.overflowed_batch,
                    beyond,
                )
            self._tier_hints.pop(project, None)
            if outcome.status == IngestAnswer.SETTINGS_CHANGED:
                return None
            if outcome.status == IngestAnswer.PAST_BOUNDS:
                # The batch would take the project's sums past what they hold: the events
                # that fit stay (in order), the others are refused; the rest is priced again.
                refused = _past_bounds(priced, outcome.bounds)
                beyond += [priced.batch.index[i] for i in refused]
                gone = {priced.batch.events[i].id for i in refused}
                events = events.take([i for i, ev in enumerate(events.events) if ev.id not in gone])
                if not len(events):
                    return 0, duplicates, 0, events, beyond
                tier_keys = tier_keys_needed(events, catalog)
            if outcome.status == IngestAnswer.DUPLICATES:
                dup_ids = {priced.batch.events[i].id for i in outcome.duplicate_positions}
                duplicates += len(dup_ids)
                events = events.take(
                    [i for i, ev in enumerate(events.events) if ev.id not in dup_ids]
                )
                if not len(events):
                    return 0, duplicates, 0, events, beyond
                tier_keys = tier_keys_needed(events, catalog)
            if outcome.status == IngestAnswer.BUDGETS_CHANGED:
                # The project's budgets changed since they were read: read them again.
                budgets_rev = settings.budgets_rev = outcome.budgets_rev
            # TIER_MOVED: a tier counter moved under us; read it again and price again.
        raise IngestConflict(project)

    def _end_turn(self, project: str, turn: asyncio.Future[None]) -> None:
        """The batch of `turn` is answered (or failed): the one behind it may go on."""
        turn.set_result(None)
        if self._in_flight.get(project) is turn:
            del self._in_flight[project]

    async def _plan(
        self,
        project: str,
        priced: PricedBatch,
        catalog: PricingCatalog,
        budgets: list[Budget],
        budgets_rev: str,
        duplicates: int,
        expected_meta: tuple[str | None, str | None, str | None],
    ) -> IngestPlan:
        batch = priced.batch
        counters: list[BudgetCounter] = []
        if budgets:
            counters = await budget_counters(
                self.store,
                project,
                budgets,
                list(
                    zip(batch.events, batch.epoch_us, priced.categories, priced.costs, strict=True)
                ),
                catalog.currency or "",
                datetime.now(UTC),
            )
        min_id = ""
        if self.log_retention_ms:
            min_id = str(int(time.time() * 1000) - self.log_retention_ms)
        expiry = self.window_days + 1
        return IngestPlan(
            project=project,
            event_ids=[ev.id for ev in batch.events],
            seen_shards=batch.shard,
            expiry_days=[day + expiry for day in batch.day],
            tier_checks=priced.tier_checks,
            increments=(),
            tier_increments=priced.tier_increments,
            log_blob=priced.log_entry(),
            currency=catalog.currency or "",
            rate_card=catalog.name,
            duplicates_seen=duplicates,
            log_min_id=min_id,
            counters=counters,
            budgets_rev=budgets_rev,
            expected_meta=expected_meta,
            rate_card_revision=catalog.revision,
            cost_nano=priced.total_cost,
            quantity_micro=priced.total_quantity,
        )

    async def budgets_of(self, project: str, revision: str) -> list[Budget]:
        """The project's budgets, read again only when their revision moved."""
        cached = self._budgets.get(project)
        if cached is not None and cached[0] == revision:
            return cached[1]
        budgets = [_budget_decoder.decode(raw) for raw in await self.store.budgets.budgets(project)]
        self._budgets[project] = (revision, budgets)
        return budgets


PAST_BOUNDS = (
    "the project's lifetime cost or quantity would pass what its totals can hold exactly "
    f"({CAP_UNITS} x 10^9 nano or micro-units)"
)


def _past_bounds(priced: PricedBatch, bounds: tuple[int, int]) -> list[int]:
    """Positions in `priced.batch` of the events refused when the project's lifetime bounds
    (meta bound_c, bound_q) stand at `bounds`: in order, an event stays while the events kept
    before it and itself fit (service/storage/limbs.py, `bound_units`)."""
    room_cost, room_quantity = CAP_UNITS - bounds[0], CAP_UNITS - bounds[1]
    cost = quantity = 0
    refused = []
    for i, (c, q) in enumerate(zip(priced.costs, priced.batch.quantity_micro, strict=True)):
        if bound_units(cost + c) <= room_cost and bound_units(quantity + q) <= room_quantity:
            cost += c
            quantity += q
        else:
            refused.append(i)
    return refused


def _usable_rows(catalog: PricingCatalog, currency: str | None) -> list[bool]:
    """Per rate-table row: whether its version is priced in the project's currency."""
    usable = [True] * len(catalog.sku_of_row)
    if currency:
        versions = catalog.history.versions
        for (vi, _code), row in catalog.row_of.items():
            usable[row] = versions[vi].currency == currency
    return usable


def _unpriceable(
    ev: EventIn, catalog: PricingCatalog | None, card_name: str, currency: str | None
) -> tuple[str, str] | None:
    if not is_valid_sku(ev.sku):  # no rate card holds it: say why, without echoing it
        return f"must match {SKU_PATTERN}", "sku"
    if catalog is None:
        return f"no rate card named {card_name!r} exists for project {ev.project!r}", "sku"
    vi = catalog.history.index_at(ev.time)
    if vi < 0:
        return (
            f"no version of rate card {card_name!r} is in effect at {ev.time.isoformat()}",
            "time",
        )
    if (vi, ev.sku) not in catalog.row_of:
        version = catalog.history.versions[vi].version
        return f"unknown SKU {ev.sku!r} in rate card {card_name!r} version {version}", "sku"
    card_currency = catalog.history.versions[vi].currency
    if currency and card_currency != currency:
        return (
            f"rate card version is priced in {card_currency} but project {ev.project!r} "
            f"keeps its ledger in {currency}",
            "sku",
        )
    return None


def _raw_project(raw: Any) -> str | None:
    value = raw.get("project") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and valid_project(value) else None


def _raw_id(raw: Any) -> str | None:
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None
