"""Rebuild a project's totals from its accepted-event log.

The log holds every accepted batch in the order it was applied; pricing it again
in that order with the current rate cards reproduces the incrementally kept totals
exactly (or applies a retroactive rate-card fix). The new totals are written to
staging keys and swapped in by one Lua script that first checks no batch was
accepted meanwhile.

A use case above ingest and budgets: it prices with ingest's pricing and counts with the
budgets' counters, and the ledger's store writes what it derives.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from costcore.money import format_money

from ..budgets.firing import day_field, spend_field, threshold_checks
from ..budgets.model import Budget, counters_for, daily_for
from ..errors import Conflict
from ..ingest.batches import PendingEvent, PricedBatch
from ..ingest.pricing import price_events, tier_keys_needed
from ..ledger.effectsums import live_effect_sums
from ..ledger.eventlog import LoggedEvent, decode_log, decode_log_entry, read_log_entries
from ..ledger.folding import CellSums, settle, sums_of_log
from ..ledger.hashes import BUDGET_DAILY, BUDGET_SPEND, TIER, SumsHash
from ..ledger.rollups import live_rollups
from ..projects.model import ProjectSettings
from ..projects.service import project_catalog, project_currency
from ..ratecards.catalog import PricingCatalog, RateCards
from ..storage.limbs import CAP_UNITS, bound_units
from .model import RebuildReport

if TYPE_CHECKING:
    from ..stores import Stores

_budget_decoder = msgspec.json.Decoder(Budget)


# Called after each batch priced again with the events priced so far (a job's progress; it
# may raise to stop the rebuild before anything is written).
OnBatch = Callable[[int], Awaitable[None]]


class RebuildError(Conflict):
    title = "Cannot rebuild"
    kind = "rebuild-failed"


def _add(counters: dict[str, int], field: str, delta: int) -> None:
    counters[field] = counters.get(field, 0) + delta


class _Replay:
    """What pricing the log again adds up, batch after batch: the hashes of sums a rebuild
    writes (budget and tier counters, then the totals), and the events, batches, cost and
    quantity it priced."""

    def __init__(
        self,
        project: str,
        catalog: PricingCatalog | None,
        budgets: list[Budget],
        tag_keys: frozenset[str],
    ) -> None:
        self.project = project
        self.catalog = catalog
        self.budgets = budgets
        self.tag_keys = tag_keys
        self.hashes: dict[SumsHash, dict[str, int]] = {}
        self.tiers: dict[tuple[str, str], int] = {}
        self.sums = CellSums()
        self.events = self.batches = self.cost_total = self.quantity_total = 0

    def add_batch(self, rows: list[LoggedEvent], entry_id: str = "", blob: bytes = b"") -> None:
        """Price one logged batch (log entry `entry_id`, as stored: `blob`) again, in order,
        and add what it makes. The log's indexes come from the entry as stored (the export
        reads the log, its rate versions as first priced), the totals from its new prices."""
        project, catalog = self.project, self.catalog
        assert catalog is not None  # a log with entries and no catalog is refused first
        batch = [PendingEvent.logged(row, project, i) for i, row in enumerate(rows)]
        for row in rows:
            if (catalog.history.index_at(row.event(project).time), row.sku) not in catalog.row_of:
                raise RebuildError(
                    f"event {row.id!r} can no longer be priced: SKU {row.sku!r} "
                    "has no price in effect at its time"
                )
        for tier_key in tier_keys_needed(batch, catalog):
            self.tiers.setdefault(tier_key, 0)
        priced = price_events(project, batch, catalog, self.tiers, self.tag_keys)
        if priced.overflowed:
            raise RebuildError(f"{len(priced.overflowed)} events overflow when priced again")
        self.tiers.update(priced.tier_after)
        entry = decode_log_entry(priced.log_entry())
        assert entry is not None
        self.sums.add(sums_of_log([entry]))
        stored = decode_log_entry(blob) if blob else None
        if stored is not None:
            self.sums.add_index(entry_id, stored)
        self._add_budget_counters(priced)
        self.events += len(batch)
        self.batches += 1
        self.cost_total += priced.total_cost
        self.quantity_total += priced.total_quantity

    def _add_budget_counters(self, priced: PricedBatch) -> None:
        b = priced.batch
        costed = list(zip(b.events, b.epoch_us, priced.categories, priced.costs, strict=True))
        spend = self.hashes.setdefault(SumsHash(BUDGET_SPEND), {})
        for (budget_id, period), (_, _, delta) in counters_for(self.budgets, costed).items():
            _add(spend, spend_field(budget_id, period), delta)
        daily = self.hashes.setdefault(SumsHash(BUDGET_DAILY), {})
        for (budget_id, day_number), delta in daily_for(self.budgets, costed).items():
            _add(daily, day_field(budget_id, day_number), delta)

    def finished(self) -> dict[SumsHash, dict[str, int]]:
        """Every hash of sums the log makes: the tier counters as they stand after the last
        batch, the totals from every batch's sums."""
        hashes = self.hashes
        for (month, sku), cumulative in self.tiers.items():
            if cumulative:
                _add(hashes.setdefault(SumsHash(TIER, month), {}), sku, cumulative)
        for address, field, delta in self.sums.increments():
            _add(hashes.setdefault(address, {}), field, delta)
        return hashes

    def samples(self) -> dict[SumsHash, dict[str, bytes]]:
        """The waste cells' and facts' samples, whole (service/ledger/wastecells.py)."""
        out: dict[SumsHash, dict[str, bytes]] = {}
        for address, field, _, flat in self.sums.waste.merges():
            out.setdefault(address, {})[field] = msgspec.msgpack.encode(flat)
        return out


async def rebuild_project(
    store: Stores, rate_cards: RateCards, project: str, on_batch: OnBatch | None = None
) -> RebuildReport:
    for _ in range(5):
        report = await _rebuild_once(store, rate_cards, project, on_batch)
        if report is not None:
            report.alerts_fired = await settle_budget_alerts(store, rate_cards, project)
            return report
    raise RebuildError("events kept arriving while rebuilding; try again when ingestion is quiet")


async def _replay_log(
    store: Stores,
    project: str,
    last: str,
    catalog: PricingCatalog | None,
    settings: ProjectSettings,
    on_batch: OnBatch | None = None,
) -> _Replay:
    """The log up to entry `last`, priced again."""
    budgets = [_budget_decoder.decode(raw) for raw in await store.budgets.budgets(project)]
    if last and catalog is None:
        raise RebuildError("the project's rate card no longer exists")
    replay = _Replay(project, catalog, budgets, settings.attribution_tags)
    async for entry_id, blob in read_log_entries(store, project, last):
        replay.add_batch(decode_log(blob), entry_id, blob)
        if on_batch is not None:
            await on_batch(replay.events)
    return replay


async def _rebuild_once(
    store: Stores, rate_cards: RateCards, project: str, on_batch: OnBatch | None
) -> RebuildReport | None:
    settings, catalog = await project_catalog(store, rate_cards, project)
    last = await store.ledger.last_log_entry(project)
    replay = await _replay_log(store, project, last, catalog, settings, on_batch)
    hashes = replay.finished()
    events = replay.events
    cost_bound, quantity_bound = bound_units(replay.cost_total), bound_units(replay.quantity_total)
    if max(cost_bound, quantity_bound) > CAP_UNITS:
        raise RebuildError("the rebuilt totals exceed what a project's sums may hold")
    accepted = settings.accepted
    if events != accepted:
        raise RebuildError(
            f"the log holds {events} events but {accepted} were accepted: it was trimmed by "
            "its retention, so the totals cannot be re-derived from it"
        )
    await settle(store, project)  # the figure before includes batches still queued
    daily_before = await store.ledger.daily_costs(project)
    before = sum(daily_before.values())
    rollups = live_rollups(daily_before) + live_effect_sums(daily_before)
    if not await store.ledger.replace_sums(
        project, last, hashes, rollups, (cost_bound, quantity_bound), replay.samples()
    ):
        return None
    after_total = sum((await store.ledger.daily_costs(project)).values())
    return RebuildReport(
        project=project,
        events=events,
        batches=replay.batches,
        cost_before=format_money(before),
        cost_after=format_money(after_total),
        changed=before != after_total,
    )


async def settle_budget_alerts(store: Stores, rate_cards: RateCards, project: str) -> list[str]:
    """After the swap: every budget threshold the project's spend now reaches fires, once.

    A rebuild moves spend counters without passing through the ingest script that fires a
    threshold as a batch crosses it: a repricing that lifts a period's spend over a limit would
    otherwise leave that alert unfired for good (later batches start above it). Alerts already
    fired stay as they are (at most once per alert id, `HSETNX`); the counters read are the
    rebuilt ones (and the batches accepted since, which the ingest script already checked).
    Returns the ids fired now."""
    budgets = [_budget_decoder.decode(raw) for raw in await store.budgets.budgets(project)]
    if not budgets:
        return []
    by_id = {b.id: b for b in budgets}
    currency = await project_currency(store, rate_cards, project)
    for _ in range(10):
        last = await store.ledger.last_log_entry(project)
        spend = await store.budgets.spend_counters(project)
        checks = []
        for field, spent in spend.items():
            budget_id, _, period = field.partition("|")
            budget = by_id.get(budget_id)
            if budget is None:
                continue
            for check in threshold_checks(budget, period, currency):
                checks.append((spent, check.limit, check.alert_id, check.alert_json))
        before = await store.budgets.fired_alerts(project)
        if await store.budgets.fire_reached(project, last, checks):
            after = await store.budgets.fired_alerts(project)
            return sorted(set(after) - set(before) & {c[2] for c in checks})
    raise RebuildError("events kept arriving while the budget alerts were being settled")
