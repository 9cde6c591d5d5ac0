"""The ingest script's plan of a priced batch: ids to check, counters to check and move, the
log entry, and the budget counters the batch adds to."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..budgets.firing import BudgetCounter, budget_counters
from ..budgets.model import Budget
from ..ratecards.catalog import PricingCatalog
from .batches import PricedBatch
from .store import IngestPlan

if TYPE_CHECKING:
    from ..stores import Stores


class BatchTerms:
    """What a batch is applied under, besides its prices: the project's budgets (and their
    revision), the duplicates found before, and the settings it was priced with."""

    __slots__ = ("budgets", "budgets_rev", "duplicates", "expected_meta")

    def __init__(
        self,
        budgets: list[Budget],
        budgets_rev: str,
        duplicates: int,
        expected_meta: tuple[str | None, str | None, str | None],
    ) -> None:
        self.budgets = budgets
        self.budgets_rev = budgets_rev
        self.duplicates = duplicates
        self.expected_meta = expected_meta


async def build_plan(
    store: Stores,
    project: str,
    priced: PricedBatch,
    catalog: PricingCatalog,
    terms: BatchTerms,
    window_days: int,
    log_retention_ms: int,
) -> IngestPlan:
    """The plan of `priced`; ids are remembered `window_days` (+1) past their event's day, and
    the log keeps `log_retention_ms` of entries (0: all)."""
    batch = priced.batch
    counters: list[BudgetCounter] = []
    if terms.budgets:
        counters = await budget_counters(
            store,
            project,
            terms.budgets,
            list(zip(batch.events, batch.epoch_us, priced.categories, priced.costs, strict=True)),
            catalog.currency or "",
            datetime.now(UTC),
        )
    min_id = ""
    if log_retention_ms:
        min_id = str(int(time.time() * 1000) - log_retention_ms)
    expiry = window_days + 1
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
        duplicates_seen=terms.duplicates,
        log_min_id=min_id,
        counters=counters,
        budgets_rev=terms.budgets_rev,
        expected_meta=terms.expected_meta,
        rate_card_revision=catalog.revision,
        cost_nano=priced.total_cost,
        quantity_micro=priced.total_quantity,
    )
