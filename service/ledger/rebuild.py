"""Rebuild a project's totals from its accepted-event log.

The log holds every accepted batch in the order it was applied; pricing it again
in that order with the current rate cards reproduces the incrementally kept totals
exactly (or applies a retroactive rate-card fix). The new totals are written to
staging keys and swapped in by one Lua script that first checks no batch was
accepted meanwhile.
"""

from __future__ import annotations

import msgspec

from costcore.money import format_money

from ..budgets.firing import day_field, spend_field
from ..budgets.model import Budget, counters_for, daily_for
from ..ingest.batches import PendingEvent
from ..ingest.pricing import price_events, tier_keys_needed
from ..projects.service import project_catalog
from ..ratecards.catalog import RateCards
from ..storage.keys import Keys
from ..storage.limbs import CAP_UNITS, bound_units, split_value
from ..stores import Stores
from .eventlog import decode_log_entry, read_log
from .folding import CellSums, settle, sums_of_log
from .rollups import live_keys as rollup_keys

_budget_decoder = msgspec.json.Decoder(Budget)


class RebuildReport(msgspec.Struct):
    project: str
    events: int
    batches: int
    cost_before: str
    cost_after: str
    changed: bool


class RebuildError(Exception):
    pass


def _add(counters: dict[str, int], field: str, delta: int) -> None:
    counters[field] = counters.get(field, 0) + delta


async def rebuild_project(store: Stores, rate_cards: RateCards, project: str) -> RebuildReport:
    for _ in range(5):
        report = await _rebuild_once(store, rate_cards, project)
        if report is not None:
            return report
    raise RebuildError("events kept arriving while rebuilding; try again when ingestion is quiet")


async def _rebuild_once(store: Stores, rate_cards: RateCards, project: str) -> RebuildReport | None:
    settings, catalog = await project_catalog(store, rate_cards, project)
    last = await store.ledger.last_log_entry(project)
    budgets = [_budget_decoder.decode(raw) for raw in await store.budgets.budgets(project)]
    tag_keys = settings.attribution_tags
    hashes: dict[str, dict[str, int]] = {}
    tiers: dict[tuple[str, str], int] = {}
    sums = CellSums()
    events = batches = cost_total = quantity_total = 0
    if last and catalog is None:
        raise RebuildError("the project's rate card no longer exists")
    async for _, rows in read_log(store, project, last):
        assert catalog is not None
        batch = [PendingEvent.logged(row, project, i) for i, row in enumerate(rows)]
        for row in rows:
            if (catalog.history.index_at(row.event(project).time), row.sku) not in catalog.row_of:
                raise RebuildError(
                    f"event {row.id!r} can no longer be priced: SKU {row.sku!r} "
                    "has no price in effect at its time"
                )
        for tier_key in tier_keys_needed(batch, catalog):
            tiers.setdefault(tier_key, 0)
        priced = price_events(project, batch, catalog, tiers, tag_keys)
        if priced.overflowed:
            raise RebuildError(f"{len(priced.overflowed)} events overflow when priced again")
        tiers.update(priced.tier_after)
        entry = decode_log_entry(priced.log_entry())
        assert entry is not None
        sums.add(sums_of_log([entry]))
        b = priced.batch
        costed = list(zip(b.events, b.epoch_us, priced.categories, priced.costs, strict=True))
        spend = hashes.setdefault(Keys.budget_spend(project), {})
        for (budget_id, period), (_, _, delta) in counters_for(budgets, costed).items():
            _add(spend, spend_field(budget_id, period), delta)
        daily = hashes.setdefault(Keys.budget_daily(project), {})
        for (budget_id, day_number), delta in daily_for(budgets, costed).items():
            _add(daily, day_field(budget_id, day_number), delta)
        events += len(batch)
        batches += 1
        cost_total += priced.total_cost
        quantity_total += priced.total_quantity
    # Tier counters as they stand after the last batch; the totals from every batch's sums.
    for (month, sku), cumulative in tiers.items():
        if cumulative:
            _add(hashes.setdefault(Keys.tier(project, month), {}), sku, cumulative)
    for key, field, delta in sums.increments(project):
        _add(hashes.setdefault(key, {}), field, delta)
    cost_bound, quantity_bound = bound_units(cost_total), bound_units(quantity_total)
    if max(cost_bound, quantity_bound) > CAP_UNITS:
        raise RebuildError("the rebuilt totals exceed what a project's sums may hold")
    # Sums past int64 in two limbs (service/storage/limbs.py): the high ones in their own keys.
    for key in [k for k in hashes if Keys.has_high(k)]:
        high = {f: split_value(v)[1] for f, v in hashes[key].items()}
        if any(high.values()):
            hashes[key] = {f: split_value(v)[0] for f, v in hashes[key].items()}
            hashes[Keys.high(key)] = {f: h for f, h in high.items() if h}
    accepted = settings.accepted
    if events != accepted:
        raise RebuildError(
            f"the log holds {events} events but {accepted} were accepted: it was trimmed by "
            "its retention, so the totals cannot be re-derived from it"
        )
    await settle(store, project)  # the figure before includes batches still queued
    daily_before = await store.ledger.daily_costs(project)
    before = sum(daily_before.values())
    live = await store.ledger.live_total_keys(project) + rollup_keys(project, daily_before)
    live += [Keys.high(k) for k in live if Keys.has_high(k)]
    replace = [k for k, v in hashes.items() if v]
    drop = [k for k in live if k not in hashes]
    await store.ledger.write_staging(project, {k: hashes[k] for k in replace})
    if not await store.ledger.swap_rebuild(
        project, last, replace, drop, (cost_bound, quantity_bound)
    ):
        return None
    after_total = sum((await store.ledger.daily_costs(project)).values())
    return RebuildReport(
        project=project,
        events=events,
        batches=batches,
        cost_before=format_money(before),
        cost_after=format_money(after_total),
        changed=before != after_total,
    )
