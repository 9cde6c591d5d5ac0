"""Ingestion: validate events, price them in the compiled core, apply them exactly once.

Per project, one batch is priced and then applied by one Lua script that checks,
before it writes anything, that no event id was seen before and that no tier counter
moved since it was read. If either check fails nothing was written; the batch is
priced again without the duplicates, or against the new counters. That loop is what
keeps graduated prices exact when several workers post for one project at once.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
import zlib
from array import array
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec

from costcore import price_batch
from costcore.money import format_money, parse_quantity
from costcore.result import STATUS_PRICED
from service.domain.alerting import budget_counters
from service.domain.auth import Principal
from service.domain.budgets import Budget
from service.domain.catalog import DEFAULT_RATE_CARD, PricingCatalog, RateCards
from service.domain.events import (
    DecodedItem,
    EventIn,
    identifier_problem,
    valid_project,
)
from service.storage.redis_store import (
    FIELD_SEP,
    TAG_SEP,
    IngestPlan,
    Keys,
    Store,
    seen_shard,
)

MAX_APPLY_ATTEMPTS = 64
# Tags that costs are attributed by unless the project names others (`attribution_tags`).
DEFAULT_ATTRIBUTION_TAGS = frozenset({"rework", "team"})
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
    event: EventIn
    quantity_micro: int
    epoch_us: int
    day: str
    month: str
    expiry_day: int


@dataclass
class _ProjectBatch:
    project: str
    events: list[PendingEvent] = field(default_factory=list)


@functools.lru_cache(maxsize=4096)
def _day_name(days_since_epoch: int) -> str:
    return (_EPOCH + timedelta(days=days_since_epoch)).strftime("%Y%m%d")


def _dims(
    stage: str, experiment: str, category: str, sku: str, owner: str, fixed: bool, tags: str
) -> str:
    return FIELD_SEP.join((stage, experiment, category, sku, owner, "f" if fixed else "e", tags))


def attributed_tags(tags: dict[str, str], keys: frozenset[str]) -> str:
    """The event's tags that the project attributes costs by, canonically ordered."""
    if not tags or not keys:
        return ""
    return TAG_SEP.join(f"{k}={tags[k]}" for k in sorted(keys & tags.keys()))


def encode_log(
    events: Sequence[PendingEvent],
    costs: Sequence[int],
    versions: Sequence[int],
    categories: Sequence[str],
) -> bytes:
    """The log record of an accepted batch: enough to price every event again.

    Row: id, time (µs since epoch), stage, experiment, owner, sku, quantity (micro), tags,
    cost (nano), rate-card version number, category.
    """
    rows = [
        (
            e.event.id,
            e.epoch_us,
            e.event.stage,
            e.event.experiment,
            e.event.owner,
            e.event.sku,
            e.quantity_micro,
            e.event.tags or None,
            cost,
            version,
            category,
        )
        for e, cost, version, category in zip(events, costs, versions, categories, strict=True)
    ]
    return zlib.compress(msgspec.msgpack.encode(rows), 1)


class LoggedEvent(NamedTuple):
    """One row of the accepted-event log (see `encode_log`)."""

    id: str
    epoch_us: int
    stage: str
    experiment: str
    owner: str
    sku: str
    quantity_micro: int
    tags: dict[str, str] | None
    cost_nano: int
    version: int
    category: str

    def event(self, project: str) -> EventIn:
        """The event as it was accepted (quantity left out: `quantity_micro` is exact)."""
        return EventIn(
            id=self.id,
            time=_EPOCH + timedelta(microseconds=self.epoch_us),
            project=project,
            sku=self.sku,
            quantity=Decimal(0),
            stage=self.stage,  # type: ignore[arg-type]  # as validated when accepted
            experiment=self.experiment,
            owner=self.owner,
            tags=self.tags or {},
        )

    def pending(self, project: str, index: int) -> PendingEvent:
        """The event ready to be priced again, as ingestion would have prepared it."""
        day = _day_name(self.epoch_us // 86_400_000_000)
        return PendingEvent(
            index, self.event(project), self.quantity_micro, self.epoch_us, day, day[:6], 0
        )


def decode_log(blob: bytes) -> list[LoggedEvent]:
    return [LoggedEvent(*row) for row in msgspec.msgpack.decode(zlib.decompress(blob))]


async def read_log(
    store: Store, project: str, last: str
) -> AsyncIterator[tuple[str, list[LoggedEvent]]]:
    """Every logged batch of the project up to entry `last`, in the order it was applied."""
    after = "-"
    while last:
        page = await store.log_entries(project, after=after, count=200)
        if not page:
            return
        for entry_id, blob in page:
            after = entry_id
            yield entry_id, decode_log(blob)
            if entry_id == last:
                return


@dataclass
class PricedBatch:
    """The result of pricing one project's events against one catalog."""

    events: list[PendingEvent]
    costs: array[int]
    versions: list[int]  # rate-card version numbers
    categories: list[str]
    overflowed: list[PendingEvent]
    increments: list[tuple[str, str, int]]
    tier_checks: list[tuple[str, str, int]]
    tier_after: dict[tuple[str, str], int]  # (month, sku) -> cumulative after the batch
    total_cost: int


def tier_keys_needed(
    events: Sequence[PendingEvent], catalog: PricingCatalog
) -> list[tuple[str, str]]:
    """The (month, sku) tier counters that pricing these events reads."""
    keys = set()
    for e in events:
        vi = catalog.history.index_at(e.event.time)
        if catalog.sku_of_row[catalog.row_of[(vi, e.event.sku)]].tiers:
            keys.add((e.month, e.event.sku))
    return sorted(keys)


def price_events(
    project: str,
    events: list[PendingEvent],
    catalog: PricingCatalog,
    tier_reader: dict[tuple[str, str], int],
    tag_keys: frozenset[str] = DEFAULT_ATTRIBUTION_TAGS,
) -> PricedBatch:
    """Price events in order with the compiled kernel; build the total increments.

    `tier_reader` maps (month, sku) -> cumulative quantity before this batch; `tag_keys` are
    the tags the project attributes costs by (they become part of the totals' keys).
    """
    n = len(events)
    quantity = array("q", [e.quantity_micro for e in events])
    rate_row = array("i", bytes(4 * n))
    group = array("i", bytes(4 * n))
    tier_slot = array("i", bytes(4 * n))
    versions: list[int] = []
    categories: list[str] = []
    slots: dict[tuple[str, str], int] = {}
    groups: dict[tuple[str, str], int] = {}
    group_keys: list[tuple[str, str]] = []
    history = catalog.history
    for i, e in enumerate(events):
        ev = e.event
        vi = history.index_at(ev.time)
        versions.append(history.versions[vi].version)
        row = catalog.row_of[(vi, ev.sku)]
        rate_row[i] = row
        sku = catalog.sku_of_row[row]
        categories.append(sku.category)
        if sku.tiers:
            slot_key = (e.month, ev.sku)
            slot = slots.get(slot_key)
            if slot is None:
                slot = slots[slot_key] = len(slots)
            tier_slot[i] = slot
        else:
            tier_slot[i] = -1
        tags = attributed_tags(ev.tags, tag_keys)
        gkey = (
            e.day,
            _dims(ev.stage, ev.experiment, sku.category, ev.sku, ev.owner, sku.fixed, tags),
        )
        g = groups.get(gkey)
        if g is None:
            g = groups[gkey] = len(group_keys)
            group_keys.append(gkey)
        group[i] = g
    slot_keys = list(slots)
    before = array("q", [tier_reader[k] for k in slot_keys])
    cumulative = array("q", before)
    result = price_batch(
        quantity, rate_row, group, tier_slot, catalog.table, cumulative, len(groups)
    )

    increments: list[tuple[str, str, int]] = []
    daily: dict[str, int] = {}
    for g, (day, dims) in enumerate(group_keys):
        count = result.group_events[g]
        if count == 0:
            continue
        key = Keys.totals(project, day)
        increments.append((key, "c|" + dims, result.group_cost_nano[g]))
        increments.append((key, "q|" + dims, result.group_quantity_micro[g]))
        increments.append((key, "n|" + dims, count))
        daily[day] = daily.get(day, 0) + result.group_cost_nano[g]
    for day, cost in daily.items():
        increments.append((Keys.daily(project), day, cost))
    # Hourly totals at a coarser grain (stage, category, fixed): peaks and hour granularity.
    hourly: dict[tuple[str, str], int] = {}
    for i, e in enumerate(events):
        if result.status[i] != STATUS_PRICED or result.cost_nano[i] == 0:
            continue
        hour = (e.epoch_us // 3_600_000_000) % 24
        fixed = "f" if catalog.sku_of_row[rate_row[i]].fixed else "e"
        field = f"c|{hour:02d}|{e.event.stage}{FIELD_SEP}{categories[i]}{FIELD_SEP}{fixed}"
        hourly[(e.day, field)] = hourly.get((e.day, field), 0) + result.cost_nano[i]
    for (day, field), cost in hourly.items():
        increments.append((Keys.hourly(project, day), field, cost))
    tier_checks: list[tuple[str, str, int]] = []
    for s, (month, sku_code) in enumerate(slot_keys):
        tier_checks.append((month, sku_code, before[s]))
        if cumulative[s] != before[s]:
            increments.append((Keys.tier(project, month), sku_code, cumulative[s] - before[s]))

    priced: list[PendingEvent] = []
    costs = array("q")
    priced_versions: list[int] = []
    priced_categories: list[str] = []
    overflowed: list[PendingEvent] = []
    for i, e in enumerate(events):
        if result.status[i] == STATUS_PRICED:
            priced.append(e)
            costs.append(result.cost_nano[i])
            priced_versions.append(versions[i])
            priced_categories.append(categories[i])
        else:
            overflowed.append(e)
    return PricedBatch(
        priced,
        costs,
        priced_versions,
        priced_categories,
        overflowed,
        increments,
        tier_checks,
        {k: cumulative[s] for s, k in enumerate(slot_keys)},
        sum(daily.values()),
    )


class Ingestor:
    def __init__(
        self,
        store: Store,
        rate_cards: RateCards,
        dedup_window_days: int = 35,
        max_future_skew_hours: int = 24,
        log_retention_days: int = 0,
    ) -> None:
        self.store = store
        self.rate_cards = rate_cards
        self.window = timedelta(days=dedup_window_days)
        self.window_days = dedup_window_days
        self.future_skew = timedelta(hours=max_future_skew_hours)
        self.log_retention_ms = log_retention_days * 86_400_000
        # Batches that move tier counters queue per project inside this process, so the
        # optimistic check only ever races batches of other processes.
        self._tier_locks: dict[str, asyncio.Lock] = {}
        self._budgets: dict[str, tuple[str, list[Budget]]] = {}
        self._known_projects: set[str] = set()

    async def ingest(
        self, items: list[DecodedItem], principal: Principal, batch: bool = True
    ) -> IngestReport:
        """Validate, price and apply a decoded batch. Raises ForbiddenProject before any write.

        Rejections name their field as a JSON path into the body (`$[3].quantity`, or
        `$.quantity` when the body was a single event).
        """
        for item in items:
            project = item.event.project if item.event else _raw_project(item.raw)
            if project is not None and not principal.can_access(project):
                raise ForbiddenProject(project, item.index)

        now = datetime.now(UTC)
        rejected: list[RejectedEvent] = []
        dead_letters: dict[str, list[tuple[str, bytes, int]]] = {}
        duplicates = 0
        batches: dict[str, _ProjectBatch] = {}
        seen_in_batch: set[tuple[str, str]] = set()
        quantities: dict[Decimal, int] = {}

        def reject(item: DecodedItem, reason: str, where: str) -> None:
            ev = item.event
            raw = msgspec.to_builtins(ev) if ev is not None else item.raw
            project = ev.project if ev is not None else _raw_project(item.raw)
            if project is not None and not valid_project(project):
                project = None  # never a key built from a name that breaks the pattern
            event_id = ev.id if ev is not None else _raw_id(item.raw)
            if not where.startswith("$"):
                where = f"$[{item.index}].{where}" if batch else f"$.{where}"
            rejected.append(RejectedEvent(item.index, event_id, reason, where, project))
            if project is not None and event_id is not None:
                record = msgspec.json.encode(
                    {
                        "id": event_id,
                        "project": project,
                        "reason": reason,
                        "field": where,
                        "rejected_at": now.isoformat(),
                        "event": raw,
                    }
                )
                dead_letters.setdefault(project, []).append(
                    (event_id, record, int(now.timestamp() * 1000))
                )

        for item in items:
            ev = item.event
            if ev is None:
                reject(item, item.reason, item.field)
                continue
            problem = identifier_problem(ev)
            if problem is not None:
                reject(item, problem[1], problem[0])
                continue
            # Quantities repeat within a batch: parse each distinct value once.
            try:  # (hashing a signalling NaN raises, hence inside the try)
                quantity = quantities.get(ev.quantity)
                if quantity is None:
                    quantity = quantities[ev.quantity] = parse_quantity(ev.quantity)
            except (ValueError, TypeError) as exc:
                reject(item, str(exc), "quantity")
                continue
            if ev.time < now - self.window:
                reject(
                    item,
                    f"event time is older than the deduplication window ({self.window_days} days)",
                    "time",
                )
                continue
            if ev.time > now + self.future_skew:
                reject(item, "event time is too far in the future", "time")
                continue
            key = (ev.project, ev.id)
            if key in seen_in_batch:
                duplicates += 1
                continue
            seen_in_batch.add(key)
            delta = ev.time - _EPOCH  # aware datetimes subtract in UTC
            epoch_us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            day = _day_name(delta.days)
            batches.setdefault(ev.project, _ProjectBatch(ev.project)).events.append(
                PendingEvent(
                    item.index,
                    ev,
                    quantity,
                    epoch_us,
                    day,
                    day[:6],
                    delta.days + self.window_days + 1,
                )
            )

        accepted = 0
        cost_by_project: dict[str, int] = {}
        by_index = {it.index: it for it in items}
        for project, pending in batches.items():
            meta = await self.store.project_meta(project)
            card_name = meta.get("rate_card", DEFAULT_RATE_CARD)
            catalog = await self.rate_cards.catalog(card_name)
            priceable: list[PendingEvent] = []
            for e in pending.events:
                reason = _unpriceable(e.event, catalog, card_name, meta.get("currency"))
                if reason:
                    reject(by_index[e.index], reason[0], reason[1])
                else:
                    priceable.append(e)
            if not priceable or catalog is None:
                continue
            done, dups, cost, overflowed = await self._apply(
                project, priceable, catalog, meta.get("budgets_rev", "0"), attribution_tags_of(meta)
            )
            for e in overflowed:
                reject(
                    by_index[e.index], "cost exceeds the largest representable amount", "quantity"
                )
            accepted += done
            duplicates += dups
            if done:
                cost_by_project[project] = cost_by_project.get(project, 0) + cost
            elif dups:
                await self.store.count_duplicates(project, dups)

        for project, records in dead_letters.items():
            await self.store.put_rejected(project, records)
        return IngestReport(
            accepted=accepted,
            duplicates=duplicates,
            rejected=sorted(rejected, key=lambda r: r.index),
            cost_by_project={p: format_money(c) for p, c in cost_by_project.items()},
        )

    async def _apply(
        self,
        project: str,
        events: list[PendingEvent],
        catalog: PricingCatalog,
        budgets_rev: str,
        tag_keys: frozenset[str],
    ) -> tuple[int, int, int, list[PendingEvent]]:
        """Price and apply until it lands. Returns (accepted, duplicates, cost, overflowed)."""
        if project not in self._known_projects:
            await self.store.add_project(project)
            self._known_projects.add(project)
        if not tier_keys_needed(events, catalog):
            return await self._apply_unlocked(project, events, catalog, budgets_rev, tag_keys)
        lock = self._tier_locks.setdefault(project, asyncio.Lock())
        async with lock:
            return await self._apply_unlocked(project, events, catalog, budgets_rev, tag_keys)

    async def budgets_of(self, project: str, revision: str) -> list[Budget]:
        """The project's budgets, read again only when their revision moved."""
        cached = self._budgets.get(project)
        if cached is not None and cached[0] == revision:
            return cached[1]
        budgets = [_budget_decoder.decode(raw) for raw in await self.store.budgets(project)]
        self._budgets[project] = (revision, budgets)
        return budgets

    async def _apply_unlocked(
        self,
        project: str,
        events: list[PendingEvent],
        catalog: PricingCatalog,
        budgets_rev: str,
        tag_keys: frozenset[str],
    ) -> tuple[int, int, int, list[PendingEvent]]:
        duplicates = 0
        tier_keys = tier_keys_needed(events, catalog)
        for attempt in range(MAX_APPLY_ATTEMPTS):
            budgets = await self.budgets_of(project, budgets_rev)
            if attempt:
                # Another process moved a tier counter: back off a little, with jitter.
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
            values = await self.store.tier_cumulatives(project, tier_keys)
            priced = price_events(
                project, events, catalog, dict(zip(tier_keys, values, strict=True)), tag_keys
            )
            if not priced.events:
                return 0, duplicates, 0, priced.overflowed
            counters = await budget_counters(
                self.store,
                project,
                budgets,
                [
                    (e.event, c, cost)
                    for e, c, cost in zip(
                        priced.events, priced.categories, priced.costs, strict=True
                    )
                ],
                catalog.currency or "",
                datetime.now(UTC),
            )
            min_id = ""
            if self.log_retention_ms:
                min_id = str(int(time.time() * 1000) - self.log_retention_ms)
            outcome = await self.store.apply_batch(
                IngestPlan(
                    project=project,
                    event_ids=[e.event.id for e in priced.events],
                    seen_shards=[seen_shard(e.event.id) for e in priced.events],
                    expiry_days=[e.expiry_day for e in priced.events],
                    tier_checks=priced.tier_checks,
                    increments=priced.increments,
                    log_blob=encode_log(
                        priced.events, priced.costs, priced.versions, priced.categories
                    ),
                    currency=catalog.currency or "",
                    rate_card=catalog.name,
                    duplicates_seen=duplicates,
                    log_min_id=min_id,
                    counters=counters,
                    budgets_rev=budgets_rev,
                )
            )
            if outcome.status == 0:
                return len(priced.events), duplicates, priced.total_cost, priced.overflowed
            if outcome.status == 1:
                dup_ids = {priced.events[i].event.id for i in outcome.duplicate_positions}
                duplicates += len(dup_ids)
                events = [e for e in events if e.event.id not in dup_ids]
                if not events:
                    return 0, duplicates, 0, []
                tier_keys = tier_keys_needed(events, catalog)
            if outcome.status == 3:
                # The project's budgets changed since they were read: read them again.
                budgets_rev = outcome.budgets_rev
            # status 2: a tier counter moved under us; read it again and price again.
        raise IngestConflict(project)


def attribution_tags_of(meta: dict[str, str]) -> frozenset[str]:
    """The project's attribution tags (meta field `attribution_tags`, comma-separated)."""
    raw = meta.get("attribution_tags")
    if raw is None:
        return DEFAULT_ATTRIBUTION_TAGS
    return frozenset(t for t in raw.split(",") if t)


def _unpriceable(
    ev: EventIn, catalog: PricingCatalog | None, card_name: str, currency: str | None
) -> tuple[str, str] | None:
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
