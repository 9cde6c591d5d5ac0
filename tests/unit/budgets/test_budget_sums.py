"""A batch's budget sums (`counters_for`, `daily_for`) are formed per group of events (same
UTC day and the labels some scope reads), not per event; they equal the per-event sums of
the plain definition below (each event's time as a datetime, every budget) for any mix of
scopes, periods, window edges inside the batch's days and tags, keys in the same order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, NamedTuple

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.budgets.model import (
    Budget,
    PeriodBounds,
    counters_for,
    daily_for,
    day_number,
    matches,
    period_of,
)

T0 = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)  # a Saturday: weeks and a month end nearby


class _Event(NamedTuple):
    stage: str
    experiment: str
    owner: str
    tags: dict[str, str]


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def counters_by_event(
    budgets: Sequence[Budget], priced: Sequence[tuple[Any, int, str, int]]
) -> dict[tuple[str, str], tuple[Budget, PeriodBounds, int]]:
    """The definition: every event, every budget."""
    sums: dict[tuple[str, str], tuple[Budget, PeriodBounds, int]] = {}
    for budget in budgets:
        for event, us, category, cost in priced:
            if not matches(budget, event, category):
                continue
            bounds = period_of(budget, _at(us))
            if bounds is None:
                continue
            key = (budget.id, bounds.name)
            held = sums.get(key)
            sums[key] = (budget, bounds, (held[2] if held else 0) + cost)
    return sums


def daily_by_event(
    budgets: Sequence[Budget], priced: Sequence[tuple[Any, int, str, int]]
) -> dict[tuple[str, int], int]:
    sums: dict[tuple[str, int], int] = {}
    for budget in budgets:
        if budget.growth is None:
            continue
        for event, us, category, cost in priced:
            if matches(budget, event, category):
                key = (budget.id, day_number(_at(us)))
                sums[key] = sums.get(key, 0) + cost
    return sums


# Minutes from T0 over four days (and before the epoch); windows start and end on minutes of
# those days too, written with offsets.
T0_US = (T0 - EPOCH) // timedelta(microseconds=1)
minutes = st.integers(-2 * 1440, 2 * 1440)
events = st.tuples(
    st.builds(
        _Event,
        st.sampled_from(["pretrain", "eval"]),
        st.sampled_from(["", "exp-a", "exp-b"]),
        st.sampled_from(["", "alice"]),
        st.dictionaries(st.sampled_from(["team", "rework"]), st.sampled_from(["x", "y"])),
    ),
    st.one_of(
        st.builds(lambda m, s: T0_US + m * 60_000_000 + s, minutes, st.integers(0, 59_999_999)),
        st.integers(-3 * 86_400_000_000, 86_400_000_000),  # around the epoch: floors
    ),
    st.sampled_from(["compute", "storage"]),
    st.integers(0, 10**12),
)
offsets = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=45)), timezone(timedelta(hours=-9, minutes=-30))]
)


@st.composite
def budgets(draw: st.DrawFn) -> list[Budget]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        period = draw(st.sampled_from(["monthly", "weekly", "window"]))
        fields: dict[str, Any] = {
            "id": f"b{i}",
            "created_at": T0.isoformat(),
            "project": "p",
            "name": "n",
            "amount": "100",
            "period": period,
            "scope": draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "stage": st.sampled_from(["pretrain", "eval"]),
                        "category": st.sampled_from(["compute", "storage"]),
                        "experiment": st.sampled_from(["exp-a", ""]),
                        "owner": st.just("alice"),
                        "tags": st.dictionaries(st.just("team"), st.just("x"), max_size=1),
                    },
                )
            ),
        }
        if period == "window":
            start, end = sorted(draw(st.lists(minutes, min_size=2, max_size=2)))
            tz = draw(offsets)
            fields["window_start"] = (T0 + timedelta(minutes=start)).astimezone(tz).isoformat()
            fields["window_end"] = (T0 + timedelta(minutes=end)).astimezone(tz).isoformat()
        if draw(st.booleans()):
            fields["growth"] = {"multiple": "2", "trailing_days": 3}
        out.append(msgspec.convert(fields, Budget))
    return out


@settings(max_examples=300, deadline=None)
@given(budgets(), st.lists(events, max_size=60))
def test_grouped_sums_equal_the_per_event_definition(
    budget_list: list[Budget], priced: list[tuple[_Event, int, str, int]]
) -> None:
    got = counters_for(budget_list, priced)
    want = counters_by_event(budget_list, priced)
    assert list(got) == list(want)  # the same keys, in the same order
    assert {k: (v[1], v[2]) for k, v in got.items()} == {k: (v[1], v[2]) for k, v in want.items()}
    got_daily = daily_for(budget_list, priced)
    assert list(got_daily.items()) == list(daily_by_event(budget_list, priced).items())


def test_a_window_edge_inside_a_day_splits_that_day_exactly() -> None:
    budget = msgspec.convert(
        {
            "id": "w",
            "created_at": T0.isoformat(),
            "project": "p",
            "name": "n",
            "amount": "100",
            "period": "window",
            "window_start": (T0 + timedelta(hours=12)).isoformat(),
            "window_end": (T0 + timedelta(days=1, hours=6)).isoformat(),
        },
        Budget,
    )
    at = [T0_US + h * 3_600_000_000 for h in (11, 12, 13, 29, 30, 31)]
    priced = [(_Event("eval", "", "", {}), us, "compute", 1) for us in at]
    (key, (_, _, total)), *_ = counters_for([budget], priced).items()
    assert key == ("w", "window") and total == 3  # 12:00, 13:00 and the next day's 05:00
