"""costcore.scan_events (compiled) against its plain-Python reference, and both against the
service's exact checks: same columns, same pass/fail for every event."""

from __future__ import annotations

import re
import zlib
from array import array
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainledger.events.model import EVENT_ID_PATTERN, EventIn

from costcore import (
    ScanResult,
    json_array_length,
    json_array_length_reference,
    scan_events_reference,
    text_line_count,
    text_line_count_reference,
)
from costcore.columns import id_ok

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
    """One 300-event batch and the same events in batches of 10 give the same costs, tier
    counters and totals (summed as a fold of their log entries sums them)."""
    import msgspec
    from trainledger.ingest.checks import EventChecks
    from trainledger.ingest.pricing import price_events, tier_keys_needed
    from trainledger.ingest.rate_rows import resolve_rows
    from trainledger.ledger.eventlog import decode_log_entry
    from trainledger.ledger.folding import sums_of_log
    from trainledger.ledger.store import sums_key
    from trainledger.ratecards.catalog import build_catalog
    from trainledger.ratecards.model import RateCardIn, RateCardVersion
    from trainledger.storage.keys import Keys

    from bench.common import BENCH_CARD, EventFactory, Workload

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
    batches, _ = EventChecks(35, 24).columns(
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
            entry = decode_log_entry(priced.log_entry())  # summed as a fold sums it
            assert entry is not None
            cells = sums_of_log([entry])
            tiers_moved = [(Keys.tier("p", m), sku, d) for m, sku, d in priced.tier_increments]
            folded = [(sums_key("p", h), f, d) for h, f, d in cells.increments()]
            for key, field, delta in [*tiers_moved, *folded]:
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


# --- dictionary_encode, group_coded: the fold's compiled pass --------------------------------

try:
    from costcore import dictionary_encode as _compiled_encode
    from costcore import group_coded as _compiled_group
except ImportError as _group_exc:  # pragma: no cover - only when the build is missing
    _GROUP_ERROR: str | None = str(_group_exc)
else:
    _GROUP_ERROR = None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["", "a", "b", "pretrain", "é"]) | st.integers(0, 3)))
def test_compiled_dictionary_encode_equals_the_reference(values: list[Any]) -> None:
    if _GROUP_ERROR is not None:
        pytest.fail(f"compiled dictionary_encode unavailable: {_GROUP_ERROR}")
    from costcore import dictionary_encode_reference

    distinct, codes = _compiled_encode(values)
    assert (distinct, codes) == dictionary_encode_reference(values)
    assert [distinct[c] for c in codes] == values and len(set(map(repr, distinct))) == len(distinct)


# An entry: events as (µs, cost, quantity, 5 local codes); each column's local -> fold map.
coded_entries = st.lists(
    st.tuples(
        st.lists(
            st.tuples(
                # Around the epoch and far from it: hours and days floor for negative µs too.
                st.integers(-3 * 86_400_000_000, 3 * 86_400_000_000)
                | st.integers(NOW_US - 86_400_000_000, NOW_US + 86_400_000_000),
                # Small and near the ends of int64: sums past int64 (either way) must be exact.
                st.integers(0, 2**40) | st.integers(2**62, 2**63 - 1),
                st.integers(-(2**20), 2**40) | st.integers(-(2**63), -(2**62)),
                st.lists(st.integers(0, 2), min_size=5, max_size=5),
            ),
            max_size=40,
        ),
        st.lists(st.lists(st.integers(0, 4), min_size=3, max_size=3), min_size=5, max_size=5),
    ),
    max_size=4,
)


def _entries(raw: list[Any]) -> list[Any]:
    from costcore import CodedEntry

    out = []
    for events, to_global in raw:
        codes = [[ev[3][c] for ev in events] for c in range(5)]
        out.append(
            CodedEntry(
                [ev[0] for ev in events],
                [ev[1] for ev in events],
                [ev[2] for ev in events],
                codes,
                to_global,
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(coded_entries, st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_compiled_group_coded_equals_the_reference(raw: list[Any], hour_class: list[int]) -> None:
    if _GROUP_ERROR is not None:
        pytest.fail(f"compiled group_coded unavailable: {_GROUP_ERROR}")
    from costcore import group_coded_reference

    entries = _entries(raw)
    want = group_coded_reference(entries, hour_class)
    assert _compiled_group(entries, hour_class) == want
    # The reference's meaning: sums per key, keys in order of first appearance.
    cells: dict[tuple[int, ...], list[int]] = {}
    hours: dict[tuple[int, ...], int] = {}
    hour_events: dict[tuple[int, ...], int] = {}
    for events, to_global in raw:
        for us, cost, qty, local in events:
            codes = [to_global[c][local[c]] for c in range(5)]
            have = cells.setdefault((us // 86_400_000_000, *codes), [0, 0, 0])
            have[0] += cost
            have[1] += qty
            have[2] += 1
            hour = (us // 3_600_000_000, codes[0], hour_class[codes[3]])
            hours[hour] = hours.get(hour, 0) + cost
            hour_events[hour] = hour_events.get(hour, 0) + 1
    assert want.keys == list(cells)
    sums = zip(want.cost_nano, want.quantity_micro, want.events, strict=True)
    assert [list(t) for t in sums] == [cells[k] for k in want.keys]
    assert want.hour_keys == list(hours) and list(want.hour_cost_nano) == list(hours.values())
    assert list(want.hour_events) == list(hour_events.values())


def test_group_coded_sums_exactly_past_int64_and_refuses_ragged_columns() -> None:
    if _GROUP_ERROR is not None:
        pytest.fail(f"compiled group_coded unavailable: {_GROUP_ERROR}")
    from costcore import CodedEntry, group_coded_reference

    zero = [[0]] * 5
    top = 2**63 - 1
    one = CodedEntry([0], [2**62], [1], [[0]] * 5, zero)
    # Sums past int64 and past 2**64 (the high half of the compiled 128-bit sums in use),
    # and negative ones: exact ints, equal in both implementations.
    many = CodedEntry([0] * 5, [top] * 5, [top] * 5, [[0] * 5] * 5, zero)
    low = CodedEntry([0] * 3, [-(2**63)] * 3, [-1] * 3, [[0] * 3] * 5, zero)
    for group in (_compiled_group, group_coded_reference):
        assert group([one], [0]).cost_nano[0] == 2**62
        assert group([one, one], [0]).cost_nano == [2**63]
        assert group([one, one], [0]).hour_cost_nano == [2**63]
        wide = group([many, many, one], [0])
        assert wide.cost_nano == [10 * top + 2**62] and wide.quantity_micro == [10 * top + 1]
        assert wide.hour_cost_nano == [10 * top + 2**62] and list(wide.events) == [11]
        assert group([low], [0]).cost_nano == [-3 * 2**63]
        with pytest.raises(ValueError):
            group([CodedEntry([0, 1], [1], [1, 1], [[0, 0]] * 5, zero)], [0])
    # Many distinct keys: the compiled sums grow past their first allocation; codes too large
    # to pack into one integer fall back to tuples with the same answer.
    many = CodedEntry(
        [i * 3_600_000_000 for i in range(5000)],
        list(range(5000)),
        list(range(5000)),
        [list(range(5000))] * 5,
        [[2 * i for i in range(5000)]] * 5,  # 5 code spaces of 10,000: over 62 bits
    )
    classes = [i % 3 for i in range(10_000)]
    assert _compiled_group([many], classes) == group_coded_reference([many], classes)


# --- the gathers of pricing and of the ingest script's arguments ---------------------------


def _compiled_fn(name: str) -> Any:
    import costcore

    try:
        return getattr(costcore, name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"compiled {name} unavailable: {exc}")


versions = st.lists(st.integers(-(2**40), 2**40), max_size=4, unique=True).map(sorted)


@settings(max_examples=300, deadline=None)
@given(
    versions,
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "é"]), st.integers(-(2**41), 2**41)),
        max_size=40,
    ),
    st.data(),
)
def test_compiled_rate_rows_equals_the_reference(
    starts: list[int], events: list[tuple[str, int]], data: st.DataObject
) -> None:
    from costcore import rate_rows_reference

    tables = [
        data.draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 50)))
        for _ in starts
    ]
    # Times on the version starts themselves too: a start belongs to its own version.
    events += [("a", t) for t in starts] + [("b", t - 1) for t in starts]
    skus = [sku for sku, _ in events]
    times = [t for _, t in events]
    want = rate_rows_reference(skus, times, starts, tables)
    assert _compiled_fn("rate_rows")(skus, times, starts, tables) == want
    assert _compiled_fn("rate_rows")(skus, array("q", times), starts, tables) == want
    for sku, t, row in zip(skus, times, want, strict=True):  # the reference's meaning
        live = [v for v, start in enumerate(starts) if start <= t]
        assert row == (tables[live[-1]].get(sku, -1) if live else -1)


def test_rate_rows_refuses_ragged_columns() -> None:
    from costcore import rate_rows_reference

    for rows in (_compiled_fn("rate_rows"), rate_rows_reference):
        with pytest.raises(ValueError):
            rows(["a"], [], [0], [{}])
        with pytest.raises(ValueError):
            rows(["a"], [1], [0], [])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 3)), max_size=40),
    st.lists(st.booleans(), max_size=5),
)
def test_compiled_pair_codes_equals_the_reference(
    events: list[tuple[int, int]], wanted: list[bool]
) -> None:
    from costcore import pair_codes_reference

    firsts = array("i", [f for f, _ in events])
    seconds = [s for _, s in events]
    pairs, codes = pair_codes_reference(firsts, seconds, wanted)
    assert _compiled_fn("pair_codes")(firsts, seconds, wanted) == (pairs, codes)
    for (first, second), code in zip(events, codes, strict=True):  # the reference's meaning
        if 0 <= first < len(wanted) and wanted[first]:
            assert pairs[code] == (first, second)
        else:
            assert code == -1
    assert len(set(pairs)) == len(pairs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=6), st.data())
def test_compiled_remap_codes_equals_the_reference(table: list[int], data: st.DataObject) -> None:
    from costcore import remap_codes_reference

    codes = data.draw(st.lists(st.integers(-1, len(table) - 1), max_size=30))
    want = remap_codes_reference(array("i", codes), table)
    assert _compiled_fn("remap_codes")(array("i", codes), table) == want
    assert list(want) == [table[c] if c >= 0 else -1 for c in codes]
    for remap in (_compiled_fn("remap_codes"), remap_codes_reference):
        with pytest.raises(IndexError):
            remap([len(table)], table)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.data())
def test_compiled_group_positions_equals_the_reference(nkeys: int, data: st.DataObject) -> None:
    from costcore import group_positions_reference

    keys = data.draw(st.lists(st.integers(0, nkeys - 1), max_size=50))
    order, counts = group_positions_reference(keys, nkeys)
    assert _compiled_fn("group_positions")(keys, nkeys) == (order, counts)
    # The reference's meaning: a stable sort of the positions by key, and each key's count.
    assert list(order) == sorted(range(len(keys)), key=lambda i: (keys[i], i))
    assert list(counts) == [keys.count(k) for k in range(nkeys)]
    for group in (_compiled_fn("group_positions"), group_positions_reference):
        with pytest.raises(ValueError):
            group([*keys, nkeys], nkeys)
        with pytest.raises(ValueError):
            group([-1], nkeys)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=3) | st.integers(), max_size=20), st.data())
def test_compiled_take_equals_the_reference(values: list[Any], data: st.DataObject) -> None:
    from costcore import take_reference

    positions = data.draw(st.lists(st.integers(0, max(len(values) - 1, 0)), max_size=30))
    if not values:
        positions = []
    want = take_reference(values, array("q", positions))
    assert (
        _compiled_fn("take")(values, array("q", positions))
        == want
        == [values[p] for p in positions]
    )
    for take in (_compiled_fn("take"), take_reference):
        with pytest.raises(IndexError):
            take(values, [len(values)])
        with pytest.raises(IndexError):
            take(values, [-1])


# --- the fast path's reading of times as sent ------------------------------------------------

time_texts = st.one_of(
    st.builds(
        lambda y, mo, d, h, mi, s, frac, zone, sep: (
            f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}"
        ),
        st.integers(0, 9999),
        st.integers(0, 13),
        st.integers(0, 32),
        st.integers(0, 24),
        st.integers(0, 60),
        st.integers(0, 60),
        st.sampled_from(["", ".", ".5", ".25", ".123", ".123456", ".1234567", ".0000001"]),
        st.sampled_from(
            ["Z", "z", "", "+00:00", "-00:00", "+05:45", "-09:30", "+23:59", "+24:00", "+05:60"]
        ),
        st.sampled_from(["T", "T", "T", "t", " "]),
    ),
    st.text(alphabet="0123456789-:TZ.+ ", max_size=32),
)


@settings(max_examples=1000, deadline=None)
@given(time_texts)
def test_compiled_parse_time_equals_the_reference_and_agrees_with_msgspec(text: str) -> None:
    from costcore import parse_time_reference

    want = parse_time_reference(text)
    assert _compiled_fn("parse_time")(text) == want
    if want is not None:  # what the fast path reads, msgspec reads as the same instant
        read = msgspec.json.decode(msgspec.json.encode(text), type=datetime)
        assert read.tzinfo is not None
        assert (read - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) == want


def test_parse_time_reads_its_one_form_only() -> None:
    parse = _compiled_fn("parse_time")
    assert parse("1970-01-01T00:00:00Z") == 0
    assert parse("1970-01-01T01:00:00.5+01:00") == 500_000
    assert parse("1969-12-31T23:59:59.999999Z") == -1
    assert parse("2024-02-29T00:00:00Z") is not None and parse("2026-02-29T00:00:00Z") is None
    for other in (
        "2026-11-30t01:02:03Z",
        "2026-11-30 01:02:03Z",
        "2026-11-30T01:02:03z",
        "2026-11-30T01:02:03.1234567Z",
        "2026-11-30T01:02:03",
        "é",
        "",
        None,
        5,
    ):
        assert parse(other) is None, other


wire_events = st.builds(
    lambda e, text, q: _Wire(e.id, text, e.project, e.experiment, e.owner, e.tags, q),
    events,
    time_texts | st.just("2026-11-30T11:00:00Z") | st.just("2026-11-30T11:00:00.5+05:45"),
    st.sampled_from(["1", "0.5", "1.50", 3, 12, "x", None]),
)


class _Wire(NamedTuple):
    id: str
    time: str
    project: str
    experiment: str
    owner: str
    tags: dict[str, str]
    quantity: Any


WIRE_QUANTITIES: dict[Any, int] = {"1": 1_000_000, "0.5": 500_000, 3: 3_000_000}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(wire_events, st.none()), max_size=30), st.sampled_from([1, 7, 64]))
def test_compiled_scan_wire_equals_the_reference(batch: list[Any], shards: int) -> None:
    from costcore import parse_time_reference, scan_wire_events_reference

    args = (WIRE_QUANTITIES, MIN_US, MAX_US, shards, PROJECTS, LABELS, TAG_KEYS, TAG_VALUES)
    want = scan_wire_events_reference(batch, *args)
    assert _compiled_fn("scan_wire_events")(batch, *args) == want
    for i, ev in enumerate(batch):  # a passing event is read as its time and quantity say
        if want.status[i] == 0:
            assert want.epoch_us[i] == parse_time_reference(ev.time)
            assert want.quantity_micro[i] == WIRE_QUANTITIES[ev.quantity]


# Any JSON value, and bodies that are not valid JSON (cut short, stray bytes, escapes).
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_json_values, max_size=12), st.sampled_from([b"", b" ", b"\n\t "]))
def test_json_array_length_counts_what_msgspec_decodes(items: list[Any], space: bytes) -> None:
    body = space + msgspec.json.encode(items).replace(b",", b"," + space) + space
    assert json_array_length(body, 1000) == len(items)
    assert json_array_length_reference(body, 1000) == len(items)
    # No further than limit + 1: the scan stops there.
    limit = max(len(items) - 2, 0)
    expected = min(len(items), limit + 1)
    assert json_array_length(body, limit) == json_array_length_reference(body, limit) == expected


@settings(max_examples=300)
@given(st.binary(max_size=40), st.integers(0, 5))
def test_compiled_json_array_length_equals_the_reference(body: bytes, limit: int) -> None:
    for candidate in (body, b"[" + body, b'["\\' + body, b"[{" + body + b"]"):
        assert json_array_length(candidate, limit) == json_array_length_reference(candidate, limit)


def test_json_array_length_of_what_is_not_an_array_and_of_strings() -> None:
    for body in (b"", b"  ", b"{}", b'"[1,2]"', b"12", b"\xff["):
        assert json_array_length(body, 10) == json_array_length_reference(body, 10) == -1
    body = b'[ "a,b]", "c\\"],", {"k": [1, 2, {"x": "]"}]}, [], 3 ]'
    assert json_array_length(body, 10) == json_array_length_reference(body, 10) == 5
    assert json_array_length(b"[]", 10) == json_array_length(b"[ \n]", 10) == 0
    huge = b"[" + b",".join([b"{}"] * 100_000) + b"]"
    assert json_array_length(huge, 50_000) == 50_001


@settings(max_examples=300)
@given(st.binary(max_size=60), st.integers(0, 6))
def test_compiled_text_line_count_equals_the_reference(body: bytes, limit: int) -> None:
    expected = sum(1 for line in body.split(b"\n") if line.strip())
    assert text_line_count_reference(body, limit) == min(expected, limit + 1)
    assert text_line_count(body, limit) == text_line_count_reference(body, limit)
