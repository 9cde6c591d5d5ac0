"""costcore.scan_events (compiled) against its plain-Python reference, and both against the
service's exact checks: same columns, same pass/fail for every event."""

from __future__ import annotations

import re
import zlib
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costcore import ScanResult, scan_events_reference
from costcore.columns import id_ok
from service.domain.events import EVENT_ID_PATTERN, EventIn

try:
    from costcore import scan_events as _compiled
except ImportError as _exc:  # pragma: no cover - only when the build is missing
    _ERROR: str | None = str(_exc)
else:
    _ERROR = None


def compiled() -> Any:
    if _ERROR is not None:
        pytest.fail(f"compiled scan_events unavailable: {_ERROR}")
    return _compiled


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOW_US = int((NOW - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000
MIN_US = NOW_US - 35 * 86_400_000_000
MAX_US = NOW_US + 86_400_000_000
PROJECTS = {"llm", "p-1"}
LABELS = {"exp-a", "alice", ""}
TAG_KEYS = {"team", "rework"}
TAG_VALUES = {"data", "true"}
QUANTITIES = {"1": 1_000_000, "0.5": 500_000, "12.75": 12_750_000, "1E+1": 10_000_000}

ids = st.one_of(
    st.text(alphabet="abcXYZ019_.:/@+=-", min_size=0, max_size=205),
    st.text(max_size=30),  # anything, non-ASCII included
    st.sampled_from(["job-1", "a" * 200, "a" * 201, "-x", ".x", "x y", "é1", "x\n", "x{"]),
)
offsets = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=2)),
        timezone(timedelta(hours=-9, minutes=-30)),
        timezone(timedelta(hours=5, minutes=45, seconds=7, microseconds=11)),
    ]
)
times = st.builds(
    lambda seconds, micro, tz: (NOW + timedelta(seconds=seconds, microseconds=micro)).astimezone(
        tz
    ),
    st.integers(-40 * 86_400, 2 * 86_400),
    st.integers(0, 999_999),
    offsets,
)
events = st.builds(
    EventIn,
    id=ids,
    time=times,
    project=st.sampled_from(["llm", "p-1", "other", "LLM"]),
    sku=st.just("gpu.h100.hour"),
    quantity=st.sampled_from(
        [
            Decimal("1"),
            Decimal("0.5"),
            Decimal("12.75"),
            Decimal("1E+1"),
            Decimal("10"),
            Decimal("sNaN"),
            Decimal("-1"),
            Decimal("1.0"),
        ]
    ),
    stage=st.just("pretrain"),
    experiment=st.sampled_from(["", "exp-a", "exp-b"]),
    owner=st.sampled_from(["", "alice", "bob"]),
    tags=st.dictionaries(
        st.sampled_from(["team", "rework", "other"]),
        st.sampled_from(["data", "true", "x"]),
        max_size=2,
    ),
)


def scan(impl: Any, batch: list[Any], shards: int = 64) -> ScanResult:
    result: ScanResult = impl(
        batch, QUANTITIES, MIN_US, MAX_US, shards, PROJECTS, LABELS, TAG_KEYS, TAG_VALUES
    )
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(events, st.none()), max_size=30), st.sampled_from([1, 7, 64]))
def test_compiled_scan_equals_the_reference(batch: list[Any], shards: int) -> None:
    assert scan(compiled(), batch, shards) == scan(scan_events_reference, batch, shards)


@settings(max_examples=300, deadline=None)
@given(events)
def test_reference_follows_the_exact_checks(ev: EventIn) -> None:
    """An event passes only if every exact check would accept it, with the exact columns."""
    result = scan(scan_events_reference, [ev])
    delta = ev.time - datetime(1970, 1, 1, tzinfo=UTC)
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    expected = (
        re.fullmatch(EVENT_ID_PATTERN, ev.id) is not None
        and ev.project in PROJECTS
        and ev.experiment in LABELS
        and ev.owner in LABELS
        and all(k in TAG_KEYS and v in TAG_VALUES for k, v in ev.tags.items())
        and str(ev.quantity) in QUANTITIES
        and MIN_US <= us <= MAX_US
    )
    assert result.passed == int(expected) and result.status[0] == (0 if expected else 1)
    if expected:
        assert result.epoch_us[0] == us
        assert result.day[0] == delta.days
        assert result.quantity_micro[0] == QUANTITIES[str(ev.quantity)]
        assert result.shard[0] == zlib.crc32(ev.id.encode()) % 64


@given(ids)
def test_id_check_is_the_pattern(event_id: str) -> None:
    assert id_ok(event_id) == (re.fullmatch(EVENT_ID_PATTERN, event_id) is not None)


def test_window_edges_and_day_floor_are_exact() -> None:
    def at(us: int) -> EventIn:
        when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
        return EventIn(id="e", time=when, project="llm", sku="s", quantity=Decimal("1"))

    batch = [at(MIN_US - 1), at(MIN_US), at(MAX_US), at(MAX_US + 1)]
    for impl in (compiled(), scan_events_reference):
        result = scan(impl, batch)
        assert list(result.status) == [1, 0, 0, 1]
        assert result.epoch_us[1] == MIN_US and result.epoch_us[2] == MAX_US
    # Before 1970 the day is floored, as timedelta.days is.
    early = [
        EventIn(
            id="e",
            time=datetime(1969, 12, 31, 23, tzinfo=UTC),
            project="llm",
            sku="s",
            quantity=Decimal("1"),
        )
    ]
    for impl in (compiled(), scan_events_reference):
        r = impl(early, QUANTITIES, -(2**62), 2**62, 64, PROJECTS, LABELS, TAG_KEYS, TAG_VALUES)
        assert r.status[0] == 0 and r.day[0] == -1 and r.epoch_us[0] == -3_600_000_000


def test_bad_shard_count_is_refused() -> None:
    for impl in (compiled(), scan_events_reference):
        with pytest.raises(ValueError):
            scan(impl, [], shards=0)


def test_large_and_small_batches_price_to_the_same_increments() -> None:
    """One 300-event batch (hourly sums from a second kernel call) and the same events in
    batches of 10 (hourly sums in Python) give the same totals, tiers and log rows."""
    import msgspec

    from bench.common import BENCH_CARD, EventFactory, Workload
    from service.domain.catalog import build_catalog
    from service.domain.ingest import Ingestor, price_events, resolve_rows, tier_keys_needed
    from service.domain.ratecards import RateCardIn, RateCardVersion

    card = msgspec.convert(BENCH_CARD, RateCardIn, strict=False)
    version = RateCardVersion(
        name="default",
        version=1,
        currency=card.currency,
        effective_from=card.effective_from.astimezone(UTC),
        created_at=datetime.now(UTC),
        skus=card.skus,
    )
    catalog = build_catalog("default", 1, [version])
    raw = EventFactory(Workload(experiments=3, skus=20, stages=2)).batch(1, 300)
    evs = [msgspec.convert(e, EventIn) for e in raw]
    batches, _ = Ingestor(None, None)._columns(  # type: ignore[arg-type]
        [type("Item", (), {"event": e, "index": i})() for i, e in enumerate(evs)],  # type: ignore[misc]
        datetime.now(UTC),
        lambda *a: pytest.fail(f"rejected: {a}"),
    )
    whole = batches["bench"]
    whole.rows = resolve_rows(whole, catalog)

    def totals(parts: list[Any]) -> tuple[dict[tuple[str, str], int], list[int]]:
        sums: dict[tuple[str, str], int] = {}
        tiers = {k: 0 for k in tier_keys_needed(whole, catalog)}
        costs: list[int] = []
        for part in parts:
            priced = price_events("p", part, catalog, tiers)
            tiers.update(priced.tier_after)
            costs += list(priced.costs)
            for key, field, delta in [*priced.increments, *priced.sums.increments("p")]:
                sums[(key, field)] = sums.get((key, field), 0) + delta
        return sums, costs

    small = [whole.take(range(i, min(i + 10, 300))) for i in range(0, 300, 10)]
    big_sums, big_costs = totals([whole])
    small_sums, small_costs = totals(small)
    assert big_costs == small_costs
    assert sum(1 for k in big_sums if ":hr:" in k[0]) > 10  # hour cells exist
    assert {k: v for k, v in big_sums.items() if ":hr:" in k[0]} == {
        k: v for k, v in small_sums.items() if ":hr:" in k[0]
    }
    # Every total agrees: cells, hours, the daily index, tiers and roll-ups.
    assert any(":ru:" in k[0] for k in big_sums) and any(":tier:" in k[0] for k in big_sums)
    assert big_sums == small_sums


# --- group_events: events interned by totals key and hour key ---------------------------------

try:
    from costcore import group_events as _compiled_group
except ImportError as _group_exc:  # pragma: no cover - only when the build is missing
    _GROUP_ERROR: str | None = str(_group_exc)
else:
    _GROUP_ERROR = None


class _Ev:
    def __init__(self, stage: str, experiment: str, owner: str, tags: dict[str, str]) -> None:
        self.stage, self.experiment, self.owner, self.tags = stage, experiment, owner, tags


def _tag_text(tags: dict[str, str]) -> str:
    return ";".join(f"{k}={v}" for k, v in sorted(tags.items()))


grouped_events = st.lists(
    st.tuples(
        st.sampled_from(["pretrain", "eval"]),
        st.sampled_from(["", "exp-a", "exp-b"]),
        st.sampled_from(["", "alice"]),
        st.dictionaries(st.sampled_from(["team", "rework"]), st.sampled_from(["a", "b"])),
        st.integers(0, 3),  # rate-table row
        # Times around the epoch and far from it: hours and days floor for negative µs too.
        st.integers(-3 * 86_400_000_000, 3 * 86_400_000_000)
        | st.integers(NOW_US - 86_400_000_000, NOW_US + 86_400_000_000),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(grouped_events)
def test_compiled_group_events_equals_the_reference(rows: list[Any]) -> None:
    if _GROUP_ERROR is not None:
        pytest.fail(f"compiled group_events unavailable: {_GROUP_ERROR}")
    from costcore import group_events_reference

    events = [_Ev(s, e, o, t) for s, e, o, t, _, _ in rows]
    table_rows = [r[4] for r in rows]
    epoch_us = [r[5] for r in rows]
    day = [us // 86_400_000_000 for us in epoch_us]
    got = _compiled_group(events, table_rows, day, epoch_us, _tag_text)
    want = group_events_reference(events, table_rows, day, epoch_us, _tag_text)
    assert got == want
    # The reference's meaning: equal keys share a group, numbered by first appearance.
    for i, ev in enumerate(events):
        key = want.keys[want.group[i]]
        tag_text = _tag_text(ev.tags) if ev.tags else ""
        assert key == (day[i], table_rows[i], ev.stage, ev.experiment, ev.owner, tag_text)
        assert want.hour_keys[want.hour_group[i]] == (
            epoch_us[i] // 3_600_000_000,
            table_rows[i],
            ev.stage,
        )
    assert sorted(set(want.group)) == list(range(len(want.keys)))
    assert [want.group.index(g) for g in range(len(want.keys))] == sorted(
        want.group.index(g) for g in range(len(want.keys))
    )


def test_group_events_refuses_columns_of_different_lengths() -> None:
    if _GROUP_ERROR is not None:
        pytest.fail(f"compiled group_events unavailable: {_GROUP_ERROR}")
    with pytest.raises(ValueError):
        _compiled_group([_Ev("a", "", "", {})], [0, 1], [0], [0], _tag_text)
