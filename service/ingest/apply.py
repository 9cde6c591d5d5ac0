"""Applying one project's priced batch exactly once: price, send, and on a refusal price
again what is left.

The ingest script checks, before it writes anything, that no event id was seen before and
that no tier counter moved since it was read. If either check fails nothing was written; the
batch is priced again without the duplicates, or against the new counters. That loop is what
keeps graduated prices exact when several workers post for one project at once.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..ledger.folding import Folder
from ..projects.model import ProjectSettings
from ..ratecards.catalog import PricingCatalog
from .batches import PendingBatch, PricedBatch
from .bounds import past_bounds
from .caches import ProjectCaches
from .plan import BatchTerms, build_plan
from .pricing import price_events, tier_keys_needed
from .report import IngestConflict
from .store import IngestAnswer, IngestOutcome

if TYPE_CHECKING:
    from ..stores import Stores

MAX_APPLY_ATTEMPTS = 64

# (accepted, duplicates, cost, overflowed, beyond): see `BatchApplier.apply`.
Applied = tuple[int, int, int, PendingBatch, list[int]]


class BatchApplier:
    def __init__(
        self,
        store: Stores,
        caches: ProjectCaches,
        folder: Folder | None,
        window_days: int,
        log_retention_ms: int,
    ) -> None:
        self.store = store
        self.caches = caches
        # Told of every accepted batch, so its queued totals are folded in soon (without one,
        # they are folded by the next read of the project's totals).
        self.folder = folder
        self.window_days = window_days
        self.log_retention_ms = log_retention_ms
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
        self._known_projects: set[str] = set()

    async def apply(
        self,
        project: str,
        events: PendingBatch,
        catalog: PricingCatalog,
        settings: ProjectSettings,
        duplicates: int = 0,
    ) -> Applied | None:
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
            budgets = await self.caches.budgets_of(project, budgets_rev)
            if attempt:
                # Another process moved a tier counter: back off a little, with jitter.
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
            terms = BatchTerms(budgets, budgets_rev, duplicates, expected)
            if tier_keys:
                sent = await self._send_in_turn(
                    project, events, catalog, tag_keys, tier_keys, terms, attempt > 0
                )
            else:
                sent = await self._send(project, events, catalog, tag_keys, terms)
            priced, outcome = sent
            if outcome is None:  # no event could be priced: nothing was sent
                return 0, duplicates, 0, priced.overflowed_batch, beyond
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
                refused = past_bounds(priced, outcome.bounds)
                beyond += [priced.batch.index[i] for i in refused]
                events, _ = _without(events, priced, refused)
                if not len(events):
                    return 0, duplicates, 0, events, beyond
                tier_keys = tier_keys_needed(events, catalog)
            if outcome.status == IngestAnswer.DUPLICATES:
                events, found = _without(events, priced, outcome.duplicate_positions)
                duplicates += found
                if not len(events):
                    return 0, duplicates, 0, events, beyond
                tier_keys = tier_keys_needed(events, catalog)
            if outcome.status == IngestAnswer.BUDGETS_CHANGED:
                # The project's budgets changed since they were read: read them again.
                budgets_rev = settings.budgets_rev = outcome.budgets_rev
            # TIER_MOVED: a tier counter moved under us; read it again and price again.
        raise IngestConflict(project)

    async def _send(
        self,
        project: str,
        events: PendingBatch,
        catalog: PricingCatalog,
        tag_keys: frozenset[str],
        terms: BatchTerms,
    ) -> tuple[PricedBatch, IngestOutcome | None]:
        """Price a batch that moves no tier counter and send it: its answer (None when no
        event could be priced, and nothing was sent)."""
        priced = price_events(project, events, catalog, {}, tag_keys)
        if not len(priced.batch):
            return priced, None
        plan = await build_plan(
            self.store, project, priced, catalog, terms, self.window_days, self.log_retention_ms
        )
        return priced, await self.store.ingest.submit_batch(plan)

    async def _send_in_turn(
        self,
        project: str,
        events: PendingBatch,
        catalog: PricingCatalog,
        tag_keys: frozenset[str],
        tier_keys: list[tuple[str, str]],
        terms: BatchTerms,
        retry: bool,
    ) -> tuple[PricedBatch, IngestOutcome | None]:
        """`_send` of a batch that moves tier counters.

        Priced one at a time per project in this process, each against the counters its
        predecessor leaves (the hint), and sent in that order once the predecessor's script
        answered: the next batch is priced while the script of the one before runs, instead
        of the two taking turns."""
        store = self.store.ingest
        lock = self._tier_locks.setdefault(project, asyncio.Lock())
        async with lock:
            before = self._in_flight.get(project)
            if retry and before is not None:
                await before  # read the counters fresh once the batches ahead landed
                before = None
            # The hint only while the batch it comes from is still in flight: after
            # that the counters are read (another process may have moved them).
            hints = self._tier_hints.get(project, {}) if before is not None else {}
            missing = [k for k in tier_keys if k not in hints]
            values = await store.tier_cumulatives(project, missing)
            tiers = {**dict(zip(missing, values, strict=True)), **hints}
            priced = price_events(project, events, catalog, tiers, tag_keys)
            if not len(priced.batch):
                return priced, None
            self._tier_hints[project] = {**hints, **priced.tier_after}
            plan = await build_plan(
                self.store, project, priced, catalog, terms, self.window_days, self.log_retention_ms
            )
            turn = self._in_flight[project] = asyncio.get_running_loop().create_future()
            # One server: on the wire now, behind the batch before it, so it need not
            # wait for that one's answer. A cluster: sent once that one has answered.
            try:
                answer = store.submit_batch(plan) if store.ordered else None
            except BaseException:
                self._end_turn(project, turn)  # the batches behind must not wait on it
                raise
        try:
            if answer is None:
                if before is not None:
                    await asyncio.shield(before)
                answer = store.apply_batch(plan)
            return priced, await answer
        finally:
            self._end_turn(project, turn)

    def _end_turn(self, project: str, turn: asyncio.Future[None]) -> None:
        """The batch of `turn` is answered (or failed): the one behind it may go on."""
        turn.set_result(None)
        if self._in_flight.get(project) is turn:
            del self._in_flight[project]


def _without(
    events: PendingBatch, priced: PricedBatch, positions: Sequence[int]
) -> tuple[PendingBatch, int]:
    """`events` without those at these positions of `priced.batch` (by id), and how many
    distinct ids that drops."""
    gone = {priced.batch.events[i].id for i in positions}
    return events.take([i for i, ev in enumerate(events.events) if ev.id not in gone]), len(gone)
