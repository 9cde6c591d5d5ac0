"""Pricing a project's batch in the compiled kernel, graduated tiers included."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from costcore import dictionary_encode, pair_codes, price_batch, remap_codes
from costcore.result import STATUS_PRICED

from ..ledger.fields import attributed_tags
from ..ledger.logindex import day_name
from ..projects.model import DEFAULT_ATTRIBUTION_TAGS
from ..ratecards.catalog import PricingCatalog
from .batches import PendingBatch, PendingEvent, PricedBatch
from .rate_rows import resolve_rows, row_facts


def _tier_pairs(batch: PendingBatch, catalog: PricingCatalog) -> tuple[list[Any], array[int]]:
    """The distinct (row, day) of the events whose SKU is graduated, and each event's pair
    (-1 for the others)."""
    rows = batch.rows if batch.rows is not None else resolve_rows(batch, catalog)
    return pair_codes(rows, batch.day, row_facts(catalog)[0])


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
    row_tiered, row_category, row_fixed, row_version = row_facts(catalog)

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
