"""replace_evaluation.lua corrects and deletes exactly as its Python reference says
(`replace_reference` in service/evaluations/capacity.py): random sequences of corrections and
deletions on a small id space, each made with the stored result as read or with a stale one,
sent through the real script; after each, the answer and the stored results equal the
reference's, both indexes hold exactly the stored results' members, and the audit stream one
record per change made."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.evaluations.capacity import index_entries, replace_reference
from trainledger.evaluations.model import EvaluationResult
from trainledger.storage.keys import Keys
from trainledger.storage.replies import as_bytes, as_text
from trainledger.stores import Stores

_names = itertools.count()
IDS = ["r0", "r1", "r2"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# (id, read the stored result (else a stale one), the new result's hour and experiment or None
# to delete)
Op = tuple[str, bool, tuple[int, int] | None]
ops = st.lists(
    st.tuples(
        st.sampled_from(IDS),
        st.booleans(),
        st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(0, 2))),
    ),
    min_size=1,
    max_size=10,
)


def body(result_id: str, hour: int, experiment: int, version: int = 1) -> bytes:
    result = EvaluationResult(
        id=result_id,
        experiment=f"x{experiment}",
        benchmark="b",
        value=str(hour),
        higher_is_better=True,
        time=T0 + timedelta(hours=hour),
        version=version,
    )
    return msgspec.json.encode(result)


async def check_ops(store: Stores, steps: list[Op]) -> None:
    project = f"rep-{next(_names)}"
    client = store.connection.client
    stored = {i: body(i, n, n % 3) for n, i in enumerate(IDS)}
    await store.evaluations.add_results(project, list(stored.items()))
    changes = 0
    for n, (result_id, fresh, new) in enumerate(steps):
        expected = stored.get(result_id) if fresh else None
        expected = expected or body(result_id, 9, 0)  # not what is stored: stale
        replacement = None if new is None else body(result_id, new[0], new[1], n + 2)
        done, stored = replace_reference(stored, result_id, expected, replacement)
        got = await store.evaluations.replace_result(
            project, result_id, expected, replacement, b'{"n":%d}' % n
        )
        assert got == done, (steps, n)
        changes += done
        held = await client.hgetall(Keys.evaluations(project))
        assert {as_text(k): as_bytes(v) for k, v in held.items()} == stored
        index = {as_text(m) for m in await client.zrange(Keys.evaluation_index(project), 0, -1)}
        key = Keys.evaluation_experiment_index(project)
        by_experiment = {as_text(m) for m in await client.zrange(key, 0, -1)}
        entries = [index_entries(b) for b in stored.values()]
        assert index == {m for m, _ in entries}
        assert by_experiment == {x for _, x in entries}
        assert await client.xlen(Keys.evaluation_audit(project)) == changes


async def test_the_script_replaces_as_the_reference_says(store: Stores) -> None:
    loop = asyncio.get_running_loop()

    @settings(max_examples=60, deadline=None, database=None)
    @given(ops)
    def agrees(steps: list[Op]) -> None:
        asyncio.run_coroutine_threadsafe(check_ops(store, steps), loop).result(timeout=60)

    await asyncio.to_thread(agrees)
