"""Folding: totals queued by the ingest script are summed in exactly once.

The totals a fold writes must equal those of applying every batch on its own (the rebuild
derives them batch by batch from the log), however many folds race, whenever a worker
stops, and whether a rebuild runs with batches still queued.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from service.domain.auth import Principal
from service.domain.catalog import RateCards
from service.domain.costs import cost_report
from service.domain.eventlog import decode_log
from service.domain.events import JSON, decode_events
from service.domain.folding import FOLD_MAX_CELLS, CellSums, Folder, _sums_of, settle
from service.domain.ingest import Ingestor
from service.domain.ratecards import RateCardIn
from service.domain.rebuild import rebuild_project
from service.domain.rollups import ROLLUP_VERSION
from service.storage.embedded import EmbeddedValkey
from service.storage.redis_store import Keys, Store
from tests.conftest import TEST_CARD, sync_client
from tests.test_rebuild import random_events, snapshot

ADMIN = Principal("test", "admin", None)


async def _ingest_batches(store: Store, n_batches: int, size: int = 40, seed: int = 3) -> int:
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


async def _logged_cost(store: Store, project: str = "llm") -> int:
    """The sum of every logged event's cost: what the totals must add up to."""
    total = 0
    after = "-"
    while page := await store.log_entries(project, after=after):
        for entry_id, blob in page:
            after = entry_id
            total += sum(row.cost_nano for row in decode_log(blob))
    return total


def _pending(url: str, project: str = "llm") -> tuple[int, dict[bytes, bytes]]:
    client = sync_client(url)
    try:
        length = int(client.llen(Keys.pending(project)))
        meta = client.hgetall(Keys.meta(project))
        return length, {k: v for k, v in meta.items() if k.startswith(b"pend_")}
    finally:
        client.close()


async def test_batches_wait_in_the_queue_until_a_fold(store: Store, clean_redis: str) -> None:
    accepted = await _ingest_batches(store, 5)
    length, meta = _pending(clean_redis)
    assert length == 5 and meta == {b"pend_events": str(accepted).encode()}
    assert snapshot(clean_redis) == {  # only the tier counters move at once
        k: v for k, v in snapshot(clean_redis).items() if b":tier:" in k
    }
    assert await settle(store, "llm") == 5
    assert _pending(clean_redis) == (0, {b"pend_head": b"5", b"pend_events": b"0"})
    daily, folded, covered = await store.totals_state("llm", ROLLUP_VERSION)
    assert folded == covered == accepted == 200
    assert sum(daily.values()) == await _logged_cost(store) > 0
    assert await settle(store, "llm") == 0  # nothing left: folding again changes nothing


async def test_racing_folds_count_every_batch_once(store: Store, clean_redis: str) -> None:
    await _ingest_batches(store, 12)
    # One batch per fold for some of them, so the racers interleave at many heads.
    folded = await asyncio.gather(*(settle(store, "llm") for _ in range(6)))
    assert sum(folded) == 12
    assert _pending(clean_redis) == (0, {b"pend_head": b"12", b"pend_events": b"0"})
    folded_totals = snapshot(clean_redis)
    # The rebuild prices the log again batch by batch: the same totals, field for field.
    cards = RateCards(store)
    report = await rebuild_project(store, cards, "llm")
    assert report.changed is False and report.events == 480
    assert snapshot(clean_redis) == folded_totals


async def test_a_fold_that_lost_the_race_writes_nothing(store: Store, clean_redis: str) -> None:
    await _ingest_batches(store, 3)
    head, length, blobs = await store.pending_batches("llm", 10)
    assert (head, length, len(blobs)) == (0, 3, 3)
    sums, count = _sums_of(blobs)
    assert await settle(store, "llm") == 3  # another worker folded them first
    settled = snapshot(clean_redis)
    late = await store.fold_batches("llm", head, count, sums.events, sums.increments("llm"))
    assert late is False
    assert snapshot(clean_redis) == settled
    assert _pending(clean_redis) == (0, {b"pend_head": b"3", b"pend_events": b"0"})


async def test_a_rebuild_drops_the_queue_it_already_counts(store: Store, clean_redis: str) -> None:
    await _ingest_batches(store, 4)
    stale = await store.pending_batches("llm", 10)
    report = await rebuild_project(store, RateCards(store), "llm")  # folds, then rebuilds
    assert report.events == 160 and report.changed is False
    assert _pending(clean_redis)[0] == 0
    rebuilt = snapshot(clean_redis)
    # Batches queued after the rebuild read the log are folded as usual.
    await _ingest_batches(store, 1, seed=9)
    assert _pending(clean_redis)[0] == 1
    # A fold that read the queue before the rebuild cannot apply it afterwards.
    sums, count = _sums_of(stale[2])
    assert not await store.fold_batches("llm", stale[0], count, sums.events, [])
    assert await settle(store, "llm") == 1
    assert sum((await store.daily_costs("llm")).values()) == await _logged_cost(store)
    assert snapshot(clean_redis) != rebuilt


async def test_a_rebuild_with_batches_still_queued_drops_them(
    store: Store, clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches still queued when the rebuild swaps (say, another worker's fold is slow) are
    in the log the rebuild priced: the swap drops them, so no fold can add them again."""
    from service.domain import rebuild as rebuild_module

    accepted = await _ingest_batches(store, 4)

    async def no_fold(s: Store, project: str) -> int:
        return 0

    monkeypatch.setattr(rebuild_module, "settle", no_fold)
    report = await rebuild_project(store, RateCards(store), "llm")
    assert report.events == accepted
    assert _pending(clean_redis) == (0, {b"pend_head": b"4", b"pend_events": b"0"})
    assert await settle(store, "llm") == 0
    daily, folded, covered = await store.totals_state("llm", ROLLUP_VERSION)
    assert folded == covered == accepted
    assert sum(daily.values()) == await _logged_cost(store)


def test_a_fold_takes_one_batch_when_their_sum_would_leave_int64() -> None:
    def blob(cost: int) -> bytes:
        sums = CellSums()
        sums.cells[("20261130", "pretrain")] = [cost, 1, 1]
        sums.events = 1
        return sums.encode()

    big = 2**62 + 1
    sums, count = _sums_of([blob(big), blob(big), blob(5)])
    assert count == 1 and sums.cells[("20261130", "pretrain")] == [big, 1, 1]
    sums, count = _sums_of([blob(big), blob(5), blob(7)])
    assert count == 3 and sums.cells[("20261130", "pretrain")] == [big + 12, 3, 3]
    assert sums.events == 3


def test_cell_sums_survive_their_encoding() -> None:
    sums = CellSums()
    sums.cells[("20261130", "a\x1fb")] = [10, 2, 1]
    sums.cells[("20261201", "c")] = [7, 0, 3]
    sums.hourly[("20261130", "c|05|pretrain")] = 10
    sums.events = 4
    again = CellSums()
    again.add_blob(sums.encode())
    again.add_blob(sums.encode())
    assert again.events == 8
    assert again.cells == {("20261130", "a\x1fb"): [20, 4, 2], ("20261201", "c"): [14, 0, 6]}
    assert again.hourly == {("20261130", "c|05|pretrain"): 20}


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
        store = Store.from_url(url)
        accepted = await _ingest_batches(store, 3)
        assert _pending(url)[0] == 3
        await store.close()
    finally:
        valkey.kill()  # SIGKILL: no shutdown, no fold
    again = EmbeddedValkey(data_dir)
    assert again.start() == url
    try:
        store = Store.from_url(url)
        assert _pending(url)[0] == 3
        report = await cost_report(store, "llm", None, None, ["day"], {})  # folds first
        assert _pending(url)[0] == 0
        assert report.total_events == accepted
        daily, folded, _ = await store.totals_state("llm", ROLLUP_VERSION)
        assert folded == accepted and sum(daily.values()) == await _logged_cost(store)
        await store.close()
    finally:
        again.stop()


async def test_a_read_right_after_an_answer_sees_the_batch(store: Store) -> None:
    """No background fold in this test: the read folds what is queued before it answers."""
    accepted = await _ingest_batches(store, 2)
    report = await cost_report(store, "llm", None, None, ["stage"], {})
    assert report.total_events == accepted


async def _until_folded(url: str, project: str = "llm") -> None:
    for _ in range(400):  # a bound on waiting, never an assertion about speed
        if _pending(url, project)[0] == 0:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the background fold did not run")


async def test_the_background_folder_folds_without_any_read(store: Store, clean_redis: str) -> None:
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
    daily, folded, covered = await store.totals_state("llm", ROLLUP_VERSION)
    assert folded == covered == left + 80
    assert sum(daily.values()) == await _logged_cost(store)


def test_one_fold_writes_a_bounded_number_of_cells() -> None:
    """Valkey runs a script alone: a fold takes blobs until it holds FOLD_MAX_CELLS cells."""

    def blob(first: int, n: int) -> bytes:
        sums = CellSums()
        for i in range(first, first + n):
            sums.cells[("20261130", f"cell-{i}")] = [1, 1, 1]
        sums.events = n
        return sums.encode()

    half = FOLD_MAX_CELLS // 2 + 1
    blobs = [blob(k * half, half) for k in range(4)]
    sums, count = _sums_of(blobs)
    assert count == 2 and len(sums.cells) == 2 * half
    # Blobs over the same cells merge: all of them fit in one fold.
    same = [blob(0, half)] * 4
    sums, count = _sums_of(same)
    assert count == 4 and len(sums.cells) == half and sums.events == 4 * half


async def test_a_fold_reads_a_bounded_number_of_bytes(store: Store) -> None:
    await _ingest_batches(store, 3)
    _, length, everything = await store.pending_batches("llm", 10)
    assert length == 3 and len(everything) == 3
    assert (await store.pending_batches("llm", 10, max_bytes=1))[2] == everything[:1]
    two = await store.pending_batches("llm", 10, max_bytes=len(everything[0]) + 1)
    assert two == (0, 3, everything[:2])
    assert (await store.pending_batches("llm", 2))[2] == everything[:2]
