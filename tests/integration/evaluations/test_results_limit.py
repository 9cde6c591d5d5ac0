"""The per-project limit on evaluation results, and their pages, on the real back-ends.

The limit is checked inside add_evaluations.lua, with the write: a batch right up to it is
stored, one result past it refuses the whole batch and writes nothing, duplicates are free,
and batches sent at once never take a project past it. Pages walk both indexes (all results,
one experiment's), by offset and by cursor; results stored before the indexes existed are
indexed on the first read."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from trainledger.evaluations.capacity import ResultsLimitReached
from trainledger.evaluations.model import EvaluationResult
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def record(result_id: str, hours: int = 0, experiment: str = "x") -> tuple[str, bytes]:
    result = EvaluationResult(
        id=result_id,
        experiment=experiment,
        benchmark="b",
        value="1.5",
        higher_is_better=True,
        time=T0 + timedelta(hours=hours),
    )
    return result_id, msgspec.json.encode(result)


def batch(prefix: str, n: int) -> list[tuple[str, bytes]]:
    return [record(f"{prefix}{i}", i) for i in range(n)]


async def stored_keys(store: Stores, project: str) -> tuple[int, int, int]:
    client = store.connection.client
    return (
        int(await client.hlen(Keys.evaluations(project))),
        int(await client.zcard(Keys.evaluation_index(project))),
        int(await client.zcard(Keys.evaluation_experiment_index(project))),
    )


@pytest.mark.parametrize("first", [4, 5])  # the cap less one, the cap
async def test_a_batch_up_to_the_limit_is_stored(store: Stores, first: int) -> None:
    added = await store.evaluations.add_results("p", batch("a", first), 5)
    assert added == [True] * first
    assert await stored_keys(store, "p") == (first, first, first)


async def test_one_past_the_limit_refuses_the_whole_batch_and_changes_nothing(
    store: Stores,
) -> None:
    await store.evaluations.add_results("p", batch("a", 3), 5)
    before = await store.evaluations.results("p")
    with pytest.raises(ResultsLimitReached) as refused:
        await store.evaluations.add_results("p", batch("b", 3), 5)  # 3 + 3 = cap + 1
    assert (refused.value.limit, refused.value.stored, refused.value.new) == (5, 3, 3)
    assert await store.evaluations.results("p") == before
    assert await stored_keys(store, "p") == (3, 3, 3)
    # Right up to it is still fine afterwards.
    assert await store.evaluations.add_results("p", batch("b", 2), 5) == [True, True]
    with pytest.raises(ResultsLimitReached):
        await store.evaluations.add_results("p", [record("c0")], 5)


async def test_duplicates_do_not_count_against_the_limit(store: Stores) -> None:
    await store.evaluations.add_results("p", batch("a", 5), 5)
    # A batch of stored ids and of repeats of one id: all duplicates at the limit.
    again = [*batch("a", 5), record("a0"), record("a0")]
    assert await store.evaluations.add_results("p", again, 5) == [False] * 7
    # Stored ids beside new ones: only the new ones count.
    await store.evaluations.add_results("q", batch("a", 4), 5)
    mixed = [*batch("a", 4), record("new"), record("new")]
    assert await store.evaluations.add_results("q", mixed, 5) == [False] * 4 + [True, False]
    assert await stored_keys(store, "q") == (5, 5, 5)


async def test_a_lowered_limit_keeps_what_is_stored_and_refuses_new_ones(store: Stores) -> None:
    await store.evaluations.add_results("p", batch("a", 5), 5)
    assert await store.evaluations.add_results("p", batch("a", 2), 3) == [False, False]
    with pytest.raises(ResultsLimitReached):
        await store.evaluations.add_results("p", [record("z")], 3)
    assert await stored_keys(store, "p") == (5, 5, 5)


async def test_batches_sent_at_once_never_pass_the_limit(store: Stores) -> None:
    limit = 50
    batches = [[record(f"s{n}-{i}", i) for i in range(7)] for n in range(20)]
    outcomes = await asyncio.gather(
        *(store.evaluations.add_results("p", b, limit) for b in batches), return_exceptions=True
    )
    stored = [o for o in outcomes if isinstance(o, list)]
    refused = [o for o in outcomes if isinstance(o, ResultsLimitReached)]
    others = [o for o in outcomes if not isinstance(o, list | ResultsLimitReached)]
    assert not others  # nothing else went wrong
    assert len(stored) == limit // 7  # whole batches only, as many as fit
    assert await stored_keys(store, "p") == (7 * len(stored),) * 3
    assert all(r.stored + r.new > limit for r in refused)


async def walk(
    store: Stores, experiment: str | None, limit: int, by_cursor: bool
) -> tuple[list[str], int]:
    ids: list[str] = []
    offset, after, total = 0, None, -1
    while True:
        raws, total, position, last = await store.evaluations.result_page(
            "p", experiment, offset, limit, after
        )
        assert position == len(ids)
        ids += [msgspec.json.decode(r)["id"] for r in raws]
        if len(raws) < limit or position + len(raws) >= total:
            return ids, total
        offset, after = (0, last) if by_cursor else (position + len(raws), None)


@pytest.mark.parametrize("by_cursor", [True, False])
async def test_pages_hold_every_result_once_in_time_then_id_order(
    store: Stores, by_cursor: bool
) -> None:
    # Same times for several ids, experiments that are prefixes of each other.
    results = [
        record(f"r{i:02}", hours=i % 5, experiment=("x", "xy", "y")[i % 3]) for i in range(23)
    ]
    await store.evaluations.add_results("p", results[::2], 100)
    await store.evaluations.add_results("p", results[1::2], 100)
    decoded = {rid: msgspec.json.decode(body) for rid, body in results}
    order = sorted(decoded, key=lambda rid: (datetime.fromisoformat(decoded[rid]["time"]), rid))
    for experiment in (None, "x", "xy", "y", "nothing"):
        wanted = [r for r in order if experiment in (None, decoded[r]["experiment"])]
        for limit in (1, 3, 100):
            ids, total = await walk(store, experiment, limit, by_cursor)
            assert (ids, total) == (wanted, len(wanted)), (experiment, limit)


async def test_a_cursor_keeps_its_place_when_older_results_arrive(store: Stores) -> None:
    await store.evaluations.add_results("p", [record(f"r{i}", i) for i in range(4)], 100)
    raws, _, _, last = await store.evaluations.result_page("p", None, 0, 2, None)
    await store.evaluations.add_results("p", [record("older", -5)], 100)
    raws, total, position, _ = await store.evaluations.result_page("p", None, 0, 2, last)
    assert [msgspec.json.decode(r)["id"] for r in raws] == ["r2", "r3"]
    assert (total, position) == (5, 3)


async def test_results_stored_before_the_indexes_are_indexed_on_first_read(
    store: Stores,
) -> None:
    client = store.connection.client
    # As the store wrote them before this version: the hash alone.
    for result_id, body in [record("b", 1, "y"), record("a", 2, "x"), record("c", 0)]:
        await client.hsetnx(Keys.evaluations("p"), result_id, body)
    raws, total, _, _ = await store.evaluations.result_page("p", None, 0, 10)
    assert ([msgspec.json.decode(r)["id"] for r in raws], total) == (["c", "b", "a"], 3)
    raws, total, _, _ = await store.evaluations.result_page("p", "x", 0, 10)
    assert ([msgspec.json.decode(r)["id"] for r in raws], total) == (["c", "a"], 2)
    assert await stored_keys(store, "p") == (3, 3, 3)
