"""Ingestion: validate events, price them in the compiled core, apply them exactly once.

The steps live beside this module: `checks` (the body's events into per-project columns),
`caches` (settings, catalogs, budgets), `rate_rows` and `pricing` (the compiled kernel),
`apply` (the script's round trips until the batch lands) and `rejections` (the report's
entries and dead letters).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from costcore.money import format_money

from ..auth.model import Principal
from ..events.decoding import DecodedItem
from ..events.model import WireEvent
from ..ledger.folding import Folder
from ..metrics import DEAD_LETTERS_DROPPED
from ..projects.model import ProjectSettings
from ..ratecards.catalog import PricingCatalog, RateCards
from .apply import Applied, BatchApplier
from .batches import PendingBatch
from .bounds import PAST_BOUNDS
from .caches import ProjectCaches
from .checks import EventChecks
from .rate_rows import resolve_rows, unpriceable, usable_rows
from .rejections import DEFAULT_DEAD_LETTER_LIMIT, Rejections, raw_project
from .report import ForbiddenProject, IngestConflict, IngestReport

if TYPE_CHECKING:
    from ..stores import Stores

# `ingest` (the exact path, not `ingest_wire`) checks larger bodies in a worker thread.
CHECK_IN_THREAD_EVENTS = 2_000
MAX_SETTINGS_ATTEMPTS = 5

ItemAt = Callable[[int], DecodedItem]


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
        self.checks = EventChecks(dedup_window_days, max_future_skew_hours)
        self.caches = ProjectCaches(store, rate_cards)
        self.applier = BatchApplier(
            store, self.caches, folder, dedup_window_days, log_retention_days * 86_400_000
        )

    async def ingest(
        self, items: list[DecodedItem], principal: Principal, batch: bool = True
    ) -> IngestReport:
        """Validate, price and apply a decoded batch. Raises ForbiddenProject before any write.

        Rejections name their field as a JSON path into the body (`$[3].quantity`, or
        `$.quantity` when the body was a single event).
        """
        if principal.projects is not None:
            for item in items:
                project = item.event.project if item.event else raw_project(item.raw)
                if project is not None and not principal.can_access(project):
                    raise ForbiddenProject(project, item.index)
        rejections = Rejections(datetime.now(UTC), batch)
        columns = self.checks.columns
        if len(items) > CHECK_IN_THREAD_EVENTS:
            # The exact checks of a large body (each rejection with its message and dead
            # letter) in a thread: the loop goes on answering meanwhile.
            batches, duplicates = await asyncio.to_thread(
                columns, items, rejections.now, rejections.reject
            )
        else:
            batches, duplicates = columns(items, rejections.now, rejections.reject)
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
        if not events:
            return None
        now = datetime.now(UTC)
        pending = self.checks.wire_batch(events, now)
        if pending is None:
            return None

        def item_at(index: int) -> DecodedItem:  # for a rejection's message and dead letter
            return DecodedItem(index, events[index].event())

        project = events[0].project
        return await self._ingest_batches({project: pending}, {}, Rejections(now, True), item_at)

    async def _ingest_batches(
        self,
        batches: dict[str, PendingBatch],
        in_body: dict[str, int],
        rejections: Rejections,
        item_at: ItemAt,
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
            applied = await self._ingest_project(project, pending, in_body, rejections, item_at)
            done, dups, cost, overflowed, beyond = applied
            for index in overflowed.index:
                reject(item_at(index), "cost exceeds the largest representable amount", "quantity")
            for index in beyond:
                reject(item_at(index), PAST_BOUNDS, "quantity")
            accepted += done
            duplicates += dups
            if done:
                cost_by_project[project] = cost_by_project.get(project, 0) + cost
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

    async def _ingest_project(
        self,
        project: str,
        pending: PendingBatch,
        in_body: dict[str, int],
        rejections: Rejections,
        item_at: ItemAt,
    ) -> Applied:
        """Price and apply one project's events: what became of them (as `BatchApplier.apply`
        answers), its duplicates counted in the project's counter when nothing is applied.

        Settings and rate card come from this worker's cache first; the ingest script refuses
        a batch priced with settings that moved (then they are read again). Events are only
        ever rejected as unpriceable on freshly read ones."""
        for attempt in range(MAX_SETTINGS_ATTEMPTS):
            fresh = attempt > 0
            settings = await self.caches.settings_of(project, fresh)
            catalog = await self.caches.catalog_of(settings.rate_card, fresh)
            bad = _unpriced(pending, catalog, settings)
            if bad:
                if not fresh:
                    continue
                pending = _reject_unpriceable(pending, bad, catalog, settings, rejections, item_at)
            if not len(pending) or catalog is None:
                if in_body.get(project):
                    await self.store.ingest.count_duplicates(project, in_body[project])
                return 0, in_body.get(project, 0), 0, pending.take(()), []
            applied = await self.applier.apply(
                project, pending, catalog, settings, in_body.get(project, 0)
            )
            if applied is None:
                continue  # settings or rate card moved: read them again
            done, dups = applied[0], applied[1]
            if not done and dups:
                await self.store.ingest.count_duplicates(project, dups)
            return applied
        raise IngestConflict(project)


def _unpriced(
    pending: PendingBatch, catalog: PricingCatalog | None, settings: ProjectSettings
) -> list[int]:
    """Positions of the events without a price in the project's currency (resolving every
    event's rate-table row into `pending.rows` on the way)."""
    rows: Sequence[int] = []
    if catalog is not None:
        rows = resolve_rows(pending, catalog)
        usable = usable_rows(catalog, settings.currency)
        bad = []
        if not (all(usable) and min(rows, default=0) >= 0):  # the usual batch
            bad = [i for i, row in enumerate(rows) if row < 0 or not usable[row]]
    else:
        bad = list(range(len(pending)))
    pending.rows = rows
    return bad


def _reject_unpriceable(
    pending: PendingBatch,
    bad: list[int],
    catalog: PricingCatalog | None,
    settings: ProjectSettings,
    rejections: Rejections,
    item_at: ItemAt,
) -> PendingBatch:
    """Reject the events at `bad` with the reason each has no price; the others."""
    for i in bad:
        item = item_at(pending.index[i])
        assert item.event is not None
        reason = unpriceable(item.event, catalog, settings.rate_card, settings.currency)
        assert reason is not None
        rejections.reject(item, reason[0], reason[1])
    bad_set = set(bad)
    return pending.take([i for i in range(len(pending)) if i not in bad_set])
