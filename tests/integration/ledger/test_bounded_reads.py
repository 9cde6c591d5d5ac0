"""Reads that show a part of a large log do work and allocate memory for that part only
(issue 26): counted in commands the server ran (INFO commandstats) and entries fetched, and
in peak allocation (tracemalloc), never in time."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from trainledger.budgets.model import BudgetIn, new_budget
from trainledger.budgets.spend import counters_now, spend_by_day
from trainledger.export.stream import prepare_export
from trainledger.ledger.eventlog import read_log
from trainledger.ledger.folding import settle
from trainledger.ratecards.catalog import RateCards
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, event, sync_client
from tests.integration.export.test_focus import ingest
from tests.integration.export.test_ranged_export import _reference

START = datetime(2025, 1, 1, tzinfo=UTC)
DAYS, BATCHES, SIZE = 60, 240, 40  # 9,600 events, 4 batches a day
FLAT = {**TEST_CARD, "skus": [s for s in TEST_CARD["skus"] if "tiers" not in s]}  # type: ignore[attr-defined]


@pytest.fixture
async def big(embedded_valkey: str) -> AsyncIterator[Stores]:
    client = sync_client(embedded_valkey)
    client.flushdb()
    client.close()
    store = Stores.from_url(embedded_valkey)
    for b in range(BATCHES):
        when = START + timedelta(hours=6 * b)
        batch = [
            event(
                f"b{b}-{i}",
                "1.5",
                "gpu.h100.hour" if i % 3 else "network.cross_region.gb",
                time=(when + timedelta(seconds=i)).isoformat(),
                experiment=f"x{i % 12}",
                stage="pretrain" if i % 2 else "eval",
            )
            for i in range(SIZE)
        ]
        await ingest(store, batch, card=FLAT if b == 0 else None)
    await settle(store, "llm")
    yield store
    await store.close()


async def _calls(store: Stores, command: str) -> int:
    stats = await store.connection.client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_days_export_fetches_that_days_entries(big: Stores) -> None:
    day = (START + timedelta(days=30), START + timedelta(days=31))
    export = await prepare_export(big, RateCards(big), "llm")
    before = await _calls(big, "xrange")
    tracemalloc.start()
    rows = [row async for row in export.rows(*day)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(rows) == 4 * SIZE
    assert export.stats.entries == 4  # the day's four batches, of 240
    assert await _calls(big, "xrange") - before == 4  # one per entry, no page of the log
    assert peak < 2 << 20  # the day's rows (160) and their CSV cells, not the log's


async def test_with_graduated_prices_too(big: Stores) -> None:
    """A graduated price's counters come from the tier index: still the day's entries only."""
    await ingest(big, [event("tier-0", "1", time=START.isoformat())], card=TEST_CARD)
    for b in range(BATCHES // 4):  # a storage batch a day, on the graduated SKU
        when = START + timedelta(days=b, hours=3)
        await ingest(
            big,
            [
                event(
                    f"s{b}-{i}",
                    "40",
                    "storage.hot.gb_day",
                    time=(when + timedelta(seconds=i)).isoformat(),
                )
                for i in range(SIZE)
            ],
            card=None,
        )
    day = (START + timedelta(days=30), START + timedelta(days=31))
    export = await prepare_export(big, RateCards(big), "llm")
    rows = [row async for row in export.rows(*day)]
    assert len(rows) >= 5 * SIZE  # 160 compute events, 40 storage ones (some split by tier)
    assert export.stats.indexed and export.stats.entries == 5  # of 301
    assert rows == await _reference(export, *day)  # priced as replaying the whole log does


async def test_budget_reads_read_no_log(big: Stores) -> None:
    budget = new_budget(
        msgspec.convert(
            {"project": "llm", "name": "b", "amount": "100", "scope": {"experiment": "x3"}},
            BudgetIn,
        )
    )
    before = await _calls(big, "xrange")
    tracemalloc.start()
    counted = await counters_now(big, budget)
    by_day = await spend_by_day(big, budget, START, START + timedelta(days=31))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert counted is not None and len(counted[1]) == 3  # January to March
    assert len(by_day) == 31
    # No entry of the log read: the only XRANGE are each read's fold looking past its
    # cursor (one each, nothing there).
    assert await _calls(big, "xrange") - before <= 2
    # What reading the log allocates, for scale: the new reads hold a small part of it.
    tracemalloc.start()
    rows = [row async for _, batch in read_log(big, "llm", counted[0]) for row in batch]
    _, log_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(rows) == BATCHES * SIZE
    assert peak * 5 < log_peak
