"""The cost-effect sums (service/ledger/effectsums.py) of a fold's finest cells: the sums of a
history folded batch by batch equal those of it summed at once (a rebuild sums the whole log
in one `CellSums`), and both equal the sums spelled out from the cells one by one."""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st
from trainledger.ledger.effectsums import (
    EFFECT,
    EFFECT_QUANTITY,
    EFFECT_VERSION,
    cost_dims,
    effect_increments,
    live_effect_sums,
    quantity_field,
)
from trainledger.ledger.fields import joined_dims
from trainledger.ledger.hashes import ROLLUP_EVENTS, SumsHash, rollup_hash

_cells = st.lists(
    st.tuples(
        st.sampled_from(["20250130", "20250131", "20250201"]),
        st.sampled_from(["pretrain", "eval"]),  # stage
        st.sampled_from(["", "a", "b"]),  # experiment
        st.sampled_from(["compute", "storage"]),  # category
        st.sampled_from(["gpu", "disk"]),  # sku
        st.sampled_from(["ann", "bo"]),  # owner
        st.sampled_from(["f", "e"]),  # fixed
        st.sampled_from(["", "team=x"]),  # attributed tags
        st.integers(0, 10**20),  # cost: past int64 too
        st.integers(0, 10**9),
        st.integers(0, 5),  # events (0: a cell without events, skipped)
    ),
    max_size=40,
)


Row = tuple[str, str, str, str, str, str, str, str, int, int, int]


def _summed(increments: list[tuple[SumsHash, str, int]]) -> dict[tuple[SumsHash, str], int]:
    out: dict[tuple[SumsHash, str], int] = defaultdict(int)
    for address, field, delta in increments:
        out[(address, field)] += delta
    return dict(out)


def _of(rows: list[Row]) -> list[tuple[SumsHash, str, int]]:
    cells = [(r[0], joined_dims(r[1:8])) for r in rows]
    return effect_increments(
        cells,
        [r[8] for r in rows],
        [r[9] for r in rows],
        [r[10] for r in rows],
    )


@given(rows=_cells, cuts=st.lists(st.integers(0, 40), max_size=5))
def test_batch_by_batch_is_all_at_once_is_cell_by_cell(rows: list[Row], cuts: list[int]) -> None:
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    incremental: list[tuple[SumsHash, str, int]] = []
    for lo, hi in itertools.pairwise(bounds):
        incremental += _of(rows[lo:hi])
    expected: dict[tuple[SumsHash, str], int] = defaultdict(int)
    for day, stage, experiment, category, sku, owner, _, _, cost, qty, n in rows:
        if not n:
            continue
        expected[(SumsHash(ROLLUP_EVENTS), EFFECT_VERSION)] += n
        if not experiment:
            continue
        text = cost_dims(experiment, stage, owner, category)
        for period in (day, day[:6]):
            expected[(rollup_hash(EFFECT, period), "c|" + text)] += cost
            expected[(rollup_hash(EFFECT, period), "n|" + text)] += n
            field = quantity_field(experiment, stage, owner, sku)
            expected[(rollup_hash(EFFECT_QUANTITY, period), field)] += qty
    assert _summed(incremental) == _summed(_of(rows)) == dict(expected)
    written = {address for address, _, _ in incremental if address.kind != ROLLUP_EVENTS}
    days = {r[0] for r in rows}
    assert written <= set(live_effect_sums(days))
