"""The regression alerts script fires exactly as the Python reference of the rule says
(`fire_reference` in service/evaluations/regression.py): a random fired hash to start with,
then random lists of candidates (ids drawn from a small pool, so they repeat within a list,
across lists and against the fired hash; each with its own record), each sent through the
real script in turn; after each, the ids it fired, the alerts stream and the fired hash equal
the reference's."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.evaluations.regression import fire_reference
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

_names = itertools.count()
IDS = [f"evr_{n:024x}" for n in range(6)]

record = st.binary(min_size=1, max_size=40).map(lambda b: b'{"r":"%s"}' % b.hex().encode())
candidate = st.tuples(st.sampled_from(IDS), record)
Case = tuple[dict[str, bytes], list[list[tuple[str, bytes]]]]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    fired = draw(st.dictionaries(st.sampled_from(IDS), record, max_size=4))
    lists = draw(st.lists(st.lists(candidate, max_size=8), min_size=1, max_size=5))
    return fired, lists


async def check_case(store: Stores, case: Case) -> None:
    project = f"regress-{next(_names)}"
    fired, lists = case
    if fired:
        await store.connection.client.hset(Keys.evaluation_fired(project), mapping=fired)
    stream: list[tuple[str, bytes]] = []
    for candidates in lists:
        expected_ids, fired = fire_reference(candidates, fired)
        stream += [(i, fired[i]) for i in expected_ids]

        got_ids = await store.evaluations.fire_regressions(project, candidates)

        assert got_ids == expected_ids, candidates
        entries = await store.budgets.alerts(project, count=10_000)
        assert [(f["id"].decode(), f["a"]) for _, f in entries] == stream
        assert await store.evaluations.fired_regressions(project) == fired


async def test_the_regression_script_fires_as_the_reference_says(store: Stores) -> None:
    loop = asyncio.get_running_loop()

    # Hypothesis drives a plain function; each example runs on this test's loop (where the
    # store's connections live), from the thread the function runs in.
    @settings(max_examples=60, deadline=None, database=None)
    @given(cases())
    def agrees(case: Case) -> None:
        asyncio.run_coroutine_threadsafe(check_case(store, case), loop).result(timeout=60)

    await asyncio.to_thread(agrees)
