"""The waste report over the fold's cells (service/ledger/wastecells.py): equal to the report
over the whole log, rebuilt exactly, and reading what the window shows, not the history."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec
from trainledger.ledger.eventlog import LoggedEvent, read_log
from trainledger.ledger.folding import settle
from trainledger.projects.service import project_catalog
from trainledger.ratecards.catalog import RateCards
from trainledger.stores import Stores
from trainledger.waste.reference.report import find_waste
from trainledger.waste.service import waste_policy, waste_report

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event, sync_client
from tests.integration.spend_metrics.test_cap import Work, counted

NOW = datetime.now(UTC)
SKUS = [
    "gpu.h100.hour",
    "gpu.h100.reserved.hour",
    "storage.hot.gb_day",
    "network.cross_region.gb",
]


def random_events(
    rng: random.Random, n: int, days: int, prefix: str, project: str = "llm"
) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        when = NOW - timedelta(days=rng.randint(0, days), minutes=rng.randint(1, 1000))
        qty = Decimal(rng.randint(0, 400_000)) / Decimal(1_000)
        tags = {}
        if rng.random() < 0.5:
            tags["dataset"] = rng.choice(["ds1", "ds2"])
        if rng.random() < 0.3:
            tags["reservation"] = "gpu.h100.reserved.hour"
        if rng.random() < 0.4:
            tags["data_class"] = rng.choice(["raw", "checkpoint", "intermediate"])
            tags["created"] = (NOW - timedelta(days=rng.randint(0, 400))).date().isoformat()
        out.append(
            event(
                f"{prefix}{i}",
                str(qty),
                sku=rng.choice(SKUS),
                time=when.isoformat(),
                project=project,
                experiment=rng.choice(["", "mix-a", "mix-b"]),
                tags=tags,
            )
        )
    return out


async def whole_log_report(store: Stores, rate_cards: RateCards) -> bytes:
    """The per-event reference's report over the whole log."""
    policy = await waste_policy(store, "llm")
    events: list[LoggedEvent] = []
    async for _, rows in read_log(store, "llm", await store.ledger.last_log_entry("llm")):
        events.extend(rows)
    _, catalog = await project_catalog(store, rate_cards, "llm")
    assert catalog is not None
    skus = {}
    for index in range(len(catalog.history.versions)):
        skus.update(catalog.history.priced(index))
    report = find_waste("llm", events, skus, policy, {}, NOW, None, None, "USD")
    return msgspec.json.encode(report)


def waste_snapshot(url: str) -> dict[bytes, dict[bytes, bytes]]:
    """Every waste cells and facts hash of the project (and their high limbs)."""
    client = sync_client(url)
    keys = [k for k in client.keys("tl:{p:llm}:*") if b"wcell:" in k or k.endswith(b":wfacts")]
    return {k: client.hgetall(k) for k in sorted(keys)}


async def test_cells_report_equals_whole_log_and_survives_a_rebuild(
    api: Api, store: Stores
) -> None:
    rate_cards = RateCards(store)
    await put_card(api)
    rng = random.Random(3)
    events = random_events(rng, 400, 45, "w")
    for i in range(0, len(events), 25):
        await post(api, events[i : i + 25])
        await settle(store, "llm")  # one fold per batch: the script merges the samples
    assert await store.waste.cells_state("llm")
    report = await waste_report(store, rate_cards, "llm", None, None, NOW)
    kinds = {f.kind for f in report.findings}
    assert {"cross_region_repull", "storage_past_retention", "reserved_idle"} <= kinds, kinds
    assert any(len(f.evidence.event_ids) == 20 for f in report.findings)
    got = msgspec.json.encode(report)
    assert got == await whole_log_report(store, rate_cards)

    # Incremental == rebuilt: every waste hash, field for field.
    before = waste_snapshot(api.redis_url)
    assert any(b":wcell:" in k for k in before) and any(k.endswith(b":wfacts") for k in before)
    async with api.client() as c:
        r = await c.post("/v1/projects/llm/rebuild")
    assert r.status_code == 200, r.text
    assert waste_snapshot(api.redis_url) == before
    again = await waste_report(store, rate_cards, "llm", None, None, NOW)
    assert msgspec.json.encode(again) == got


async def test_a_log_from_before_the_cells_is_read_whole_until_a_rebuild(
    api: Api, store: Stores
) -> None:
    rate_cards = RateCards(store)
    await put_card(api)
    await post(api, random_events(random.Random(5), 120, 40, "o"))
    await settle(store, "llm")
    cells = await waste_report(store, rate_cards, "llm", None, None, NOW)
    sync_client(api.redis_url).hdel("tl:{p:llm}:meta", "wastecells")  # as before the cells
    read = 0
    real = store.ledger.log_entries

    async def counting(*args: Any, **kwargs: Any) -> list[tuple[str, bytes]]:
        nonlocal read
        page = await real(*args, **kwargs)
        read += len(page)
        return page

    store.ledger.log_entries = counting  # type: ignore[method-assign]
    whole = await waste_report(store, rate_cards, "llm", None, None, NOW)
    assert read >= 1 and msgspec.json.encode(whole) == msgspec.json.encode(cells)
    async with api.client() as c:
        assert (await c.post("/v1/projects/llm/rebuild")).status_code == 200
    assert await store.waste.cells_state("llm")


@dataclass
class Read:
    entries: int = 0  # log entries fetched
    fields: int = 0  # waste cells' and facts' fields fetched


@contextmanager
def counting(store: Stores) -> Iterator[Read]:
    """Count the log entries and waste fields the store hands back (at the store)."""
    read = Read()
    ledger: Any = store.ledger
    waste: Any = store.waste
    by_id, pages, cells, facts = (
        ledger.entries_by_id,
        ledger.log_entries,
        waste.cells,
        waste.facts,
    )

    async def entries_by_id(*a: Any, **k: Any) -> Any:
        out = await by_id(*a, **k)
        read.entries += len(out)
        return out

    async def log_entries(*a: Any, **k: Any) -> Any:
        out = await pages(*a, **k)
        read.entries += len(out)
        return out

    async def waste_cells(*a: Any, **k: Any) -> Any:
        out = await cells(*a, **k)
        read.fields += sum(len(h) for h in out)
        return out

    async def waste_facts(*a: Any, **k: Any) -> Any:
        out = await facts(*a, **k)
        read.fields += len(out)
        return out

    ledger.entries_by_id, ledger.log_entries = entries_by_id, log_entries
    waste.cells, waste.facts = waste_cells, waste_facts
    try:
        yield read
    finally:
        ledger.entries_by_id, ledger.log_entries = by_id, pages
        waste.cells, waste.facts = cells, facts


async def report_work(
    api: Api, store: Stores, project: str, history_batches: int
) -> tuple[Read, Work]:
    """The waste report's reads over a project with the same 30 days and `history_batches`
    batches of history before them (the same SKUs, experiments and tags: the same facts)."""
    rng = random.Random(11)
    window = random_events(rng, 150, 25, "w", project)
    for i in range(0, len(window), 50):
        await post(api, window[i : i + 50])
    for b in range(history_batches):
        old = random_events(random.Random(b % 2), 40, 300, f"h{b}-", project)
        for e in old:  # the same events, moved before the window
            e["time"] = (datetime.fromisoformat(str(e["time"])) - timedelta(days=40)).isoformat()
        await post(api, old)
    await settle(store, project)
    with counting(store) as read, counted(store) as work:
        await waste_report(store, RateCards(store), project, None, None, NOW)
    return read, work


async def test_the_report_reads_the_same_whatever_the_history(api: Api, store: Stores) -> None:
    await put_card(api)
    small, small_work = await report_work(api, store, "small", 2)
    large, large_work = await report_work(api, store, "large", 20)
    assert small.entries > 0 and small.fields > 0
    assert (large.entries, large.fields) == (small.entries, small.fields)
    assert large_work.commands == small_work.commands
