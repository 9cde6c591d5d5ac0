"""A window's FOCUS export reads the log by its index (service/ledger/ranges.py) and answers
exactly what reading the whole log answered: randomized batches (late and early events,
a graduated-tier SKU, batches not folded yet), random windows; and the index a rebuild
writes is the one the folds wrote."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from trainledger.export.focus import Cell
from trainledger.export.pricing import LogPricing
from trainledger.export.stream import FocusExport, _window_us, prepare_export, rows_of_batch
from trainledger.ledger.eventlog import read_log
from trainledger.ledger.folding import settle
from trainledger.ledger.ranges import RangeStats
from trainledger.ratecards.catalog import RateCards
from trainledger.rebuild.service import rebuild_project
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, event
from tests.integration.export.test_focus import at, ingest

START = datetime(2025, 2, 20, tzinfo=UTC)
SKUS = ["gpu.h100.hour", "storage.hot.gb_day", "network.cross_region.gb", "gpu.h100.reserved.hour"]


def _batches(rng: random.Random, n: int) -> list[list[dict[str, object]]]:
    batches, k = [], 0
    for _ in range(n):
        base = START + timedelta(hours=rng.randrange(0, 24 * 50))
        batch = []
        for _ in range(rng.randint(1, 12)):
            # Mostly within the batch's hour; now and then days before or after it.
            spread = rng.choice([0, 0, 0, 1, 30])
            when = base + timedelta(minutes=rng.randrange(0, 60 + spread * 60 * 24))
            k += 1
            batch.append(
                event(
                    f"e{k}",
                    f"{rng.randint(1, 400)}.{rng.randint(0, 999):03d}",
                    rng.choice(SKUS),
                    time=when.isoformat(),
                    experiment=rng.choice(["a", "b", ""]),
                )
            )
        batches.append(batch)
    return batches


async def _reference(export: FocusExport, start: datetime | None, end: datetime | None) -> list:
    """The export as it was before the index: every entry of the log, in order."""
    pricing = LogPricing(export.catalog)
    rows: list[list[Cell]] = []
    start_us, end_us = _window_us(start), _window_us(end)
    async for _, batch in read_log(export.store, export.context.project, export.last_entry):
        rows.extend(rows_of_batch(export.context, pricing, batch, start_us, end_us))
    return rows


def _windows(rng: random.Random) -> list[tuple[datetime | None, datetime | None]]:
    out: list[tuple[datetime | None, datetime | None]] = [
        (None, None),
        (START + timedelta(days=20), None),
        (None, START + timedelta(days=12)),
        (datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 2, tzinfo=UTC)),
    ]
    for _ in range(5):
        first = START + timedelta(minutes=rng.randrange(0, 60 * 24 * 55))
        out.append((first, first + timedelta(minutes=rng.choice([30, 60 * 24, 60 * 24 * 9]))))
    return out


async def _index(store: Stores, project: str = "llm") -> dict[str, dict[bytes, bytes]]:
    """The log index of every day and the tier index of every month."""
    days = sorted(await store.ledger.daily_costs(project))
    months = sorted({d[:6] for d in days})
    return {
        **dict(zip(days, await store.ledger.log_index(project, days), strict=True)),
        **dict(zip(months, await store.ledger.tier_index(project, months), strict=True)),
    }


async def test_a_ranged_export_equals_the_whole_log_read(store: Stores) -> None:
    rng = random.Random(26)
    batches = _batches(rng, 27)
    for i, batch in enumerate(batches[:24]):
        await ingest(store, batch)
        if i % 5 == 0:
            await settle(store, "llm")
    windows = _windows(rng)
    # Folded (prepare_export folds first): the tier counters before each entry come from
    # the tier index.
    for start, end in windows:
        export = await prepare_export(store, RateCards(store), "llm")
        got = [row async for row in export.rows(start, end)]
        assert got == await _reference(export, start, end), (start, end)
        assert export.stats.indexed == (start is not None or end is not None)
    # Batches not folded yet: read from the log's tail, the months before them replayed.
    for batch in batches[24:]:
        await ingest(store, batch)
    for w, (start, end) in enumerate(windows):
        export = replace(
            await prepare_export(store, RateCards(store), "llm"),
            stats=RangeStats(),
        )
        for batch in _batches(rng, 2):
            await ingest(store, [{**e, "id": f"late{w}-{e['id']}"} for e in batch])
        export = replace(export, last_entry=await store.ledger.last_log_entry("llm"))
        got = [row async for row in export.rows(start, end)]
        assert got == await _reference(export, start, end), (start, end)


async def test_a_window_reads_only_the_entries_of_its_hours(store: Stores) -> None:
    """Without a graduated price, a window fetches the entries holding its events, no other."""
    card = {**TEST_CARD, "skus": [s for s in TEST_CARD["skus"] if "tiers" not in s]}  # type: ignore[attr-defined]
    rng = random.Random(3)
    batches = [[e for e in b if e["sku"] != "storage.hot.gb_day"] for b in _batches(rng, 30)]
    batches = [b for b in batches if b]
    for batch in batches:
        await ingest(store, batch, card=card)
    await settle(store, "llm")
    start, end = START + timedelta(days=10), START + timedelta(days=11)
    holding = sum(any(start <= at(str(e["time"])) < end for e in b) for b in batches)
    export = await prepare_export(store, RateCards(store), "llm")
    got = [row async for row in export.rows(start, end)]
    assert got == await _reference(export, start, end)
    assert export.stats.indexed and 0 < export.stats.entries == holding < len(batches)


async def test_the_index_a_rebuild_writes_is_the_folds_one(store: Stores) -> None:
    rng = random.Random(7)
    for batch in _batches(rng, 15):
        await ingest(store, batch)
        await settle(store, "llm")
    folded = await _index(store)
    assert sum(len(v) for k, v in folded.items() if len(k) == 8) >= 15  # an hour per entry at least
    assert sum(len(v) for k, v in folded.items() if len(k) == 6) >= 15  # a SKU per entry at least
    await rebuild_project(store, RateCards(store), "llm")
    assert await _index(store) == folded


async def test_a_log_from_before_the_index_is_read_whole(store: Stores) -> None:
    rng = random.Random(11)
    for batch in _batches(rng, 6):
        await ingest(store, batch)
    await store.ledger.client.hdel(Keys.meta("llm"), "logix")
    window = (START + timedelta(days=3), START + timedelta(days=20))
    export = await prepare_export(store, RateCards(store), "llm")
    got = [row async for row in export.rows(*window)]
    assert got == await _reference(export, *window)
    assert not export.stats.indexed and export.stats.entries == 6
    await rebuild_project(store, RateCards(store), "llm")  # writes the index: used from then on
    export = await prepare_export(store, RateCards(store), "llm")
    assert [row async for row in export.rows(*window)] == got
    assert export.stats.indexed
