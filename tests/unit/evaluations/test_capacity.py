"""The listing order's index members (service/evaluations/capacity.py): sorted as bytes, they
are in (time, id) order for any times and any labels; each gives back its id and matches the
cursor pattern `GET /v1/evaluations` accepts; one experiment's members are one range."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st
from trainledger.evaluations.capacity import (
    CURSOR_PATTERN,
    StoreAnswer,
    experiment_member,
    experiment_range,
    index_member,
    member_id,
    store_batch,
)

labels = st.from_regex(r"\A[A-Za-z0-9_.@/+=\-]{1,128}\Z")
times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
) | st.datetimes(timezones=st.just(timezone(timedelta(hours=-7)))).filter(
    lambda t: datetime(1, 1, 2) < t.replace(tzinfo=None) < datetime(9999, 12, 30)
)


@given(st.lists(st.tuples(times, labels), min_size=1, max_size=30))
def test_members_sort_as_time_then_id(results: list[tuple[datetime, str]]) -> None:
    by_member = sorted(results, key=lambda r: index_member(*r).encode())
    assert [(t, i) for t, i in by_member] == sorted(results, key=lambda r: (r[0], r[1]))
    for time, result_id in results:
        member = index_member(time, result_id)
        assert member_id(member) == result_id
        assert re.search(CURSOR_PATTERN, member)


@given(labels, labels, times, labels)
def test_one_experiments_members_are_one_range(
    experiment: str, other: str, time: datetime, result_id: str
) -> None:
    low, high = experiment_range(experiment)
    member = experiment_member(experiment, index_member(time, result_id)).encode()
    assert low[1:].encode() < member < high[1:].encode()
    foreign = experiment_member(other, index_member(time, result_id)).encode()
    assert (low[1:].encode() < foreign < high[1:].encode()) == (other == experiment)


def test_the_rule_at_the_limit() -> None:
    assert store_batch([], ["a", "b"], 2) == (StoreAnswer.STORED, [True, True], 0, 2)
    assert store_batch(["a"], ["a", "b", "c"], 2) == (
        StoreAnswer.OVER_LIMIT,
        [False, True, True],
        1,
        2,
    )
    assert store_batch(["a", "b", "c"], ["a", "a"], 2) == (StoreAnswer.STORED, [False, False], 3, 0)
    assert store_batch([], ["x", "x"], 1) == (StoreAnswer.STORED, [True, False], 0, 1)
