"""Folding: the totals are summed from the accepted-event log, every batch exactly once.

The totals a fold writes must equal those of applying every batch on its own (the rebuild
derives them batch by batch from the log), however many folds race, whenever a worker
stops, whether a rebuild runs with batches not yet folded, and whatever the log's retention.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from trainledger.auth.model import Principal
from trainledger.costs.report import cost_report
from trainledger.events.decoding import JSON, decode_events
from trainledger.events.model import EventIn
from trainledger.ingest.service import Ingestor
from trainledger.ledger.eventlog import decode_log, encode_log
from trainledger.ledger.folding import (
    FOLD_MAX_CELLS,
    CellSums,
    Folder,
    _log_plan_sliced,
    settle,
)
from trainledger.ledger.hashes import HOURLY, SumsHash
from trainledger.ledger.rollups import ROLLUP_VERSION
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.rebuild.service import rebuild_project
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, sync_client
from tests.integration.ingest.test_dedup import ingest_plan
from tests.integration.rebuild.test_rebuild import random_events, snapshot

ADMIN = Principal("test", "admin", None)
_NOON = datetime(2026, 9, 21, 12, tzinfo=UTC)


async def _ingest_batches(store: Stores, n_batches: int, size: int = 40, seed: int = 3) -> int:
    """Ingest random batches with no folder (nothing is folded); returns events accepted."""
    cards = RateCards(store)
    await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
    ingestor = Ingestor(store, cards)
    events = random_events(random.Random(seed), n_batches * size)
    for e in events:
        e["id"] = f"s{seed}-{e['id']}"  # distinct ids per seed
    accepted = 0
    for i in range(0, len(events), size):
        items, _ = decode_events(msgspec.json.encode(events[i : i + size]), JSON)
        report = await ingestor.ingest(items, ADMIN)
        assert not report.rejected, report.rejected
        accepted += report.accepted
    return accepted


async def _logged_cost(store: Stores, project: str = "llm") -> int:
    """The sum of every logged event's cost: what the totals must add up to."""
    total = 0
    after = "-"
    while page := await store.ledger.log_entries(project, after=after):
        for entry_id, blob in page:
            after = entry_id
            total += sum(row.cost_nano for row in decode_log(blob))
    return total


def _pending(url: str, project: str = "llm") -> tuple[str, dict[bytes, bytes]]:
    """The log's last entry id and the meta fields of the fold (cursor, events not folded)."""
    client = sync_client(url)
    try:
        last = client.xrevrange(Keys.log(project), count=1)
        meta = client.hgetall(Keys.meta(project))
        fields = (b"fold_cursor", b"pend_events")
        return (last[0][0].decode() if last else ""), {k: v for k, v in meta.items() if k in fields}
    finally:
        client.close()


def _folded(url: str, project: str = "llm") -> bool:
    last, meta = _pending(url, project)
    return meta.get(b"fold_cursor", b"").decode() == last and meta.get(b"pend_events") == b"0"


async def test_batches_wait_in_the_log_until_a_fold(store: Stores, clean_redis: str) -> None:
    accepted = await _ingest_batches(store, 5)
    last, meta = _pending(clean_redis)
    assert meta == {b"fold_cursor": b"0-0", b"pend_events": str(accepted).encode()}
    assert snapshot(clean_redis) == {  # only the tier counters move at once
        k: v for k, v in snapshot(clean_redis).items() if b":tier:" in k
    }
    assert await settle(store, "llm") == 5
    assert _pending(clean_redis) == (last, {b"fold_cursor": last.encode(), b"pend_events": b"0"})
    daily, folded, covered = await store.ledger.totals_state("llm", ROLLUP_VERSION)
    assert folded == covered == accepted == 200
    assert sum(daily.values()) == await _logged_cost(store) > 0
    assert await settle(store, "llm") == 0  # nothing left: folding again changes nothing


async def test_racing_folds_count_every_batch_once(store: Stores, clean_redis: str) -> None:
    await _ingest_batches(store, 12)
    folded = await asyncio.gather(*(settle(store, "llm") for _ in range(6)))
    assert sum(folded) == 12
    assert _folded(clean_redis)
    folded_totals = snapshot(clean_redis)
    # The rebuild prices the log again batch by batch: the same totals, field for field.
    cards = RateCards(store)
    report = await rebuild_project(store, cards, "llm")
    assert report.changed is False and report.events == 480
    assert snapshot(clean_redis) == folded_totals


async def test_racing_folds_one_entry_at_a_time(
    store: Stores, clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folds of one entry each interleave at many cursors; still every batch once."""
    from trainledger.ledger import folding

    await _ingest_batches(store, 10)
    monkeypatch.setattr(folding, "FOLD_MAX_ENTRIES", 1)
    folded = await asyncio.gather(*(settle(store, "llm") for _ in range(4)))
    assert sum(folded) == 10 and _folded(clean_redis)
    assert sum((await store.ledger.daily_costs("llm")).values()) == await _logged_cost(store)


async def test_a_fold_that_lost_the_race_writes_nothing(store: Stores, clean_redis: str) -> None:
    await _ingest_batches(store, 3)
    cursor, last, entries = await store.ledger.unfolded_entries("llm", 10, 1 << 30)
    assert (cursor, len(entries), entries[-1][0]) == ("0-0", 3, last)
    count, new_cursor, events, increments, _merges = await _log_plan_sliced(entries)
    assert (count, new_cursor, events) == (3, last, 120)
    assert await settle(store, "llm") == 3  # another worker folded them first
    settled = snapshot(clean_redis)
    assert await store.ledger.fold_log("llm", cursor, new_cursor, events, increments) is False
    assert snapshot(clean_redis) == settled
    assert _folded(clean_redis)


async def test_a_rebuild_moves_the_cursor_past_what_it_counts(
    store: Stores, clean_redis: str
) -> None:
    await _ingest_batches(store, 4)
    stale = await store.ledger.unfolded_entries("llm", 10, 1 << 30)
    report = await rebuild_project(store, RateCards(store), "llm")  # folds, then rebuilds
    assert report.events == 160 and report.changed is False
    assert _folded(clean_redis)
    rebuilt = snapshot(clean_redis)
    # Batches accepted after the rebuild read the log are folded as usual.
    await _ingest_batches(store, 1, seed=9)
    assert not _folded(clean_redis)
    # A fold that read the log before the rebuild cannot apply it afterwards.
    _, new_cursor, events, increments, _merges = await _log_plan_sliced(stale[2])
    assert not await store.ledger.fold_log("llm", stale[0], new_cursor, events, increments)
    assert await settle(store, "llm") == 1
    assert sum((await store.ledger.daily_costs("llm")).values()) == await _logged_cost(store)
    assert snapshot(clean_redis) != rebuilt


async def test_a_rebuild_with_batches_not_yet_folded_counts_them_once(
    store: Stores, clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches not folded when the rebuild swaps (say, another worker's fold is slow) are in
    the log the rebuild priced: the swap moves the cursor past them, so no fold adds them."""
    from trainledger.rebuild import service as rebuild_module

    accepted = await _ingest_batches(store, 4)

    async def no_fold(s: Stores, project: str) -> int:
        return 0

    monkeypatch.setattr(rebuild_module, "settle", no_fold)
    report = await rebuild_project(store, RateCards(store), "llm")
    assert report.events == accepted
    assert _folded(clean_redis)
    assert await settle(store, "llm") == 0
    daily, folded, covered = await store.ledger.totals_state("llm", ROLLUP_VERSION)
    assert folded == covered == accepted
    assert sum(daily.values()) == await _logged_cost(store)


def _entry(costs: list[int], experiments: list[str] | None = None) -> bytes:
    """A log entry (format 2) of events on one day, one per cost."""
    n = len(costs)
    event = EventIn(
        id="x",
        time=_NOON,
        project="llm",
        sku="gpu",
        quantity=1,
        stage="pretrain",  # type: ignore[arg-type]
    )
    events = [msgspec.structs.replace(event, experiment=e) for e in experiments or [""] * n]
    epoch = [1_790_000_000_000_000] * n
    rate = (1, "gpu", "compute", "e")
    return encode_log(events, epoch, [1] * n, costs, [rate], [0] * n, [""] * n)


async def test_a_fold_sums_entries_past_int64_exactly() -> None:
    """No sum limits a fold (the store splits an increment past int64 between two limbs)."""
    big = 2**63 - 1
    entries = [("1-0", _entry([big, big])), ("2-0", _entry([big])), ("3-0", _entry([5]))]
    count, cursor, events, increments, _merges = await _log_plan_sliced(entries)
    assert (count, cursor, events) == (3, "3-0", 4)
    assert max(delta for _, _, delta in increments) == 3 * big + 5


async def test_one_fold_writes_a_bounded_number_of_cells() -> None:
    """Valkey runs a script alone: a fold takes entries while they hold <= FOLD_MAX_CELLS."""
    half = FOLD_MAX_CELLS // 2 + 1

    def entry(first: int) -> bytes:
        return _entry([1] * half, [f"e{i}" for i in range(first, first + half)])

    entries = [(f"{k + 1}-0", entry(k * half)) for k in range(4)]
    count, cursor, events, _, _merges = await _log_plan_sliced(entries)
    assert (count, cursor, events) == (1, "1-0", half)  # halved until it fits
    # Entries over the same cells merge: all of them fit in one fold.
    same = [(f"{k + 1}-0", entry(0)) for k in range(4)]
    count, cursor, events, _, _merges = await _log_plan_sliced(same)
    assert (count, cursor, events) == (4, "4-0", 4 * half)


def test_cell_sums_add_up_and_make_their_increments() -> None:
    """Sums of several batches merge cell by cell, exactly past int64; an hour whose events
    cost nothing still counts them."""
    sums = CellSums()
    sums.cells[("20261130", "a\x1fb")] = [10, 2, 1]
    sums.cells[("20261201", "c")] = [7, 0, 3]
    sums.hourly[("20261130", "c|05|pretrain")] = [10, 1]
    sums.hourly[("20261130", "c|06|eval")] = [0, 2]  # events that cost nothing
    sums.events = 4
    again = CellSums()
    again.add(sums)
    again.add(sums)
    assert again.events == 8
    assert again.cells == {("20261130", "a\x1fb"): [20, 4, 2], ("20261201", "c"): [14, 0, 6]}
    assert again.hourly == {
        ("20261130", "c|05|pretrain"): [20, 2],
        ("20261130", "c|06|eval"): [0, 4],
    }
    increments = again.increments()
    assert (SumsHash(HOURLY, "20261130"), "n|06|eval", 4) in increments
    assert not any(field == "c|06|eval" for _, field, _ in increments)
    big = CellSums()
    big.cells[("20261130", "c")] = [2**62 + 1, 1, 1]
    big.events = 1
    # Sums past int64 are exact (the store keeps them in two limbs).
    total = CellSums()
    for one in (big, big, sums):
        total.add(one)
    assert total.events == 6 and total.cells[("20261130", "c")] == [2**63 + 2, 2, 2]


async def test_retention_never_trims_what_was_not_folded(store: Stores, clean_redis: str) -> None:
    """The log keeps every entry after the cursor, whatever the retention asks for."""
    await _ingest_batches(store, 2)
    entries = (await store.ledger.unfolded_entries("llm", 10, 1 << 30))[2]
    meta = await store.projects.project_meta("llm")
    # A batch asking to trim everything older than the far future.
    plan = dataclasses.replace(
        ingest_plan(["late-1"]),
        log_blob=_entry([5]),
        log_min_id="99999999999999-0",
        expected_meta=(meta.get("rate_card"), meta.get("currency"), None),
    )
    assert (await store.ingest.apply_batch(plan)).status == 0
    kept = [entry_id for entry_id, _ in await store.ledger.log_entries("llm")]
    assert kept[:2] == [entry_id for entry_id, _ in entries] and len(kept) == 3
    assert await settle(store, "llm") == 3
    assert _folded(clean_redis)
    # Once folded, the same retention trims them (the approximate MINID trims whole nodes,
    # so at least: nothing after the cursor is gone, and the fold's totals stay).
    assert (
        await store.ingest.apply_batch(dataclasses.replace(plan, event_ids=["late-2"]))
    ).status == 0
    assert len(await store.ledger.log_entries("llm")) >= 1
    assert await settle(store, "llm") == 1


@pytest.fixture
def data_dir() -> Iterator[Path]:
    short = Path(tempfile.mkdtemp(prefix="tl-fold-"))  # a unix socket path that fits
    try:
        yield short / "d"
    finally:
        shutil.rmtree(short, ignore_errors=True)


async def test_queued_totals_survive_a_killed_valkey(data_dir: Path) -> None:
    """Acknowledged batches still queued when the server dies are folded after the restart."""
    valkey = EmbeddedValkey(data_dir)
    url = valkey.start()
    try:
        store = Stores.from_url(url)
        accepted = await _ingest_batches(store, 3)
        assert not _folded(url)
        await store.close()
    finally:
        valkey.kill()  # SIGKILL: no shutdown, no fold
    again = EmbeddedValkey(data_dir)
    assert again.start() == url
    try:
        store = Stores.from_url(url)
        assert _pending(url)[1][b"pend_events"] == str(accepted).encode()
        report = await cost_report(store, "llm", None, None, ["day"], {})  # folds first
        assert _folded(url)
        assert report.total_events == accepted
        daily, folded, _ = await store.ledger.totals_state("llm", ROLLUP_VERSION)
        assert folded == accepted and sum(daily.values()) == await _logged_cost(store)
        await store.close()
    finally:
        again.stop()


async def test_a_read_right_after_an_answer_sees_the_batch(store: Stores) -> None:
    """No background fold in this test: the read folds what is queued before it answers."""
    accepted = await _ingest_batches(store, 2)
    report = await cost_report(store, "llm", None, None, ["stage"], {})
    assert report.total_events == accepted


async def _until_folded(url: str, project: str = "llm") -> None:
    for _ in range(400):  # a bound on waiting, never an assertion about speed
        if _folded(url, project):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the background fold did not run")


async def test_the_background_folder_folds_without_any_read(
    store: Stores, clean_redis: str
) -> None:
    # Queued before the folder starts (as if left by a stopped worker): folded at start-up.
    left = await _ingest_batches(store, 2, seed=5)
    folder = Folder(store, interval=0.02)
    task = asyncio.create_task(folder.run())
    try:
        await _until_folded(clean_redis)
        # Then every batch an ingestor tells it about.
        cards = RateCards(store)
        ingestor = Ingestor(store, cards, folder=folder)
        events = random_events(random.Random(8), 80)
        for e in events:
            e["id"] = f"bg-{e['id']}"
        items, _ = decode_events(msgspec.json.encode(events), JSON)
        assert (await ingestor.ingest(items, ADMIN)).accepted == 80
        await _until_folded(clean_redis)
    finally:
        task.cancel()
        await asyncio.wait([task], timeout=10)
    daily, folded, covered = await store.ledger.totals_state("llm", ROLLUP_VERSION)
    assert folded == covered == left + 80
    assert sum(daily.values()) == await _logged_cost(store)


async def test_a_fold_reads_a_bounded_number_of_bytes(store: Stores) -> None:
    await _ingest_batches(store, 3)
    cursor, last, everything = await store.ledger.unfolded_entries("llm", 10, 1 << 30)
    assert len(everything) == 3 and everything[-1][0] == last
    assert (await store.ledger.unfolded_entries("llm", 10, 1))[2] == everything[:1]
    two = await store.ledger.unfolded_entries("llm", 10, len(everything[0][1]) + 1)
    assert two == (cursor, last, everything[:2])
    assert (await store.ledger.unfolded_entries("llm", 2, 1 << 30))[2] == everything[:2]
