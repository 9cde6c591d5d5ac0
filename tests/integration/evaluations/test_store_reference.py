"""add_evaluations.lua stores and refuses exactly as its Python reference says (`store_batch`
in service/evaluations/capacity.py): random limits, random stored ids and random batches
(repeats inside a batch, ids stored already, batches that land right on the limit, one past
it), sent through the real script one after another; after each batch the answer, the stored
ids and both indexes equal the reference's."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.evaluations.capacity import (
    ResultsLimitReached,
    StoreAnswer,
    experiment_member,
    index_member,
    store_batch,
)
from trainledger.evaluations.model import EvaluationResult
from trainledger.storage.keys import Keys
from trainledger.storage.replies import as_text
from trainledger.stores import Stores

_names = itertools.count()
IDS = [f"r{i}" for i in range(12)]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Case:
    limit: int
    start: list[str]  # ids stored before the first batch (within the limit)
    batches: list[list[str]]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    limit = draw(st.integers(1, 10))
    start = draw(st.lists(st.sampled_from(IDS), unique=True, max_size=limit))
    # Small id space: batches repeat ids, hit stored ones, and land on and past the limit.
    batch = st.lists(st.sampled_from(IDS), min_size=1, max_size=8)
    return Case(limit, start, draw(st.lists(batch, min_size=1, max_size=6)))


def record(result_id: str) -> tuple[str, bytes]:
    n = int(result_id[1:])
    result = EvaluationResult(
        id=result_id,
        experiment=f"x{n % 3}",
        benchmark="b",
        value="1",
        higher_is_better=True,
        time=T0 + timedelta(hours=n % 4),
    )
    return result_id, msgspec.json.encode(result)


def members(ids: set[str]) -> tuple[set[str], set[str]]:
    out, by_experiment = set(), set()
    for result_id in ids:
        n = int(result_id[1:])
        member = index_member(T0 + timedelta(hours=n % 4), result_id)
        out.add(member)
        by_experiment.add(experiment_member(f"x{n % 3}", member))
    return out, by_experiment


async def check_case(store: Stores, case: Case) -> None:
    project = f"cap-{next(_names)}"
    client = store.connection.client
    if case.start:
        await store.evaluations.add_results(project, [record(i) for i in case.start], case.limit)
    stored = set(case.start)
    for batch in case.batches:
        answer, new, count, added = store_batch(stored, batch, case.limit)
        try:
            got = await store.evaluations.add_results(
                project, [record(i) for i in batch], case.limit
            )
        except ResultsLimitReached as exc:
            assert answer == StoreAnswer.OVER_LIMIT, (case, batch)
            assert (exc.limit, exc.stored, exc.new) == (case.limit, count, added)
        else:
            assert answer == StoreAnswer.STORED, (case, batch)
            assert got == new
            stored |= {i for i, fresh in zip(batch, new, strict=True) if fresh}
        assert {as_text(k) for k in await client.hkeys(Keys.evaluations(project))} == stored
        index = {as_text(m) for m in await client.zrange(Keys.evaluation_index(project), 0, -1)}
        key = Keys.evaluation_experiment_index(project)
        by_experiment = {as_text(m) for m in await client.zrange(key, 0, -1)}
        assert (index, by_experiment) == members(stored)
        assert len(stored) <= case.limit


async def test_the_script_stores_and_refuses_as_the_reference_says(store: Stores) -> None:
    loop = asyncio.get_running_loop()

    @settings(max_examples=80, deadline=None, database=None)
    @given(cases())
    def agrees(case: Case) -> None:
        asyncio.run_coroutine_threadsafe(check_case(store, case), loop).result(timeout=60)

    await asyncio.to_thread(agrees)
