"""The ingest fast path (`decode_wire_batch` + `Ingestor.ingest_wire`) answers every body
exactly as the exact path (`decode_events` + `Ingestor.ingest`) does, and logs the same
events: same accepted, duplicates and rejections (reason and field), same log rows (ids,
times, quantities, costs), whichever events send it back to the exact path."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.auth.model import Principal
from trainledger.events.decoding import JSON, MSGPACK, decode_events, decode_wire_batch
from trainledger.events.model import time_text_problem
from trainledger.ingest.checks import wire_quantity
from trainledger.ingest.report import ForbiddenProject, IngestReport
from trainledger.ingest.service import Ingestor
from trainledger.ledger.eventlog import read_log
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import RateCardIn
from trainledger.stores import Stores

from costcore.columns import parse_time_reference
from costcore.money import JSON_NUMBER_PATTERN, decimal_text_problem, parse_quantity
from tests.conftest import TEST_CARD

ADMIN = Principal("test", "admin", None)
HOUR_AGO = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=250_000)


# Quantity texts no caller means: the and more.
REFUSED_QUANTITIES = (
    " 1",
    "1 ",
    "\t1",
    "1\n",
    "1_000",
    "+1",
    ".5",
    "5.",
    "\uff11",  # full-width 1
    "\u0661",  # Arabic-Indic 1
    "\u0661.\u0665",
    "01",
    "0x10",
    "1e",
    "Infinity",
    "-Infinity",
    "sNaN",
    "1,5",
    "",
)


def ev(event_id: str, **fields: Any) -> dict[str, Any]:
    base = {
        "id": event_id,
        "time": HOUR_AGO.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "project": "PROJECT",
        "sku": "gpu.h100.hour",
        "quantity": "1",
    }
    return {**base, **fields}


def at(delta: timedelta, form: str) -> str:
    """HOUR_AGO + delta written in one of several RFC 3339 forms."""
    when = HOUR_AGO + delta
    if form == "Z":
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    if form == "offset":
        return when.astimezone(datetime.now(UTC).astimezone().tzinfo).isoformat()
    if form == "+05:45":
        return when.astimezone(
            datetime.strptime("+0545", "%z").tzinfo  # type: ignore[arg-type]
        ).isoformat(timespec="milliseconds")
    if form == "-09:30":
        return when.astimezone(datetime.strptime("-0930", "%z").tzinfo).isoformat()  # type: ignore[arg-type]
    if form == "lower-z":
        return when.strftime("%Y-%m-%dt%H:%M:%Sz")
    if form == "space":
        return when.strftime("%Y-%m-%d %H:%M:%SZ")
    if form == "+0000":
        return when.strftime("%Y-%m-%dT%H:%M:%S+0000")
    if form == "+00":
        return when.strftime("%Y-%m-%dT%H:%M:%S+00")
    if form == "local":
        return when.strftime("%Y-%m-%dT%H:%M:%S")
    if form == "10 digits":
        return when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "7891Z"
    if form == "full-width":
        return when.strftime("%Y-%m-%dT%H:%M:%SZ").replace("0", "\uff10")
    if form == "newline":
        return when.strftime("%Y-%m-%dT%H:%M:%SZ\n")
    if form == "nanos":
        return when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "789Z"
    if form == "-00:00":
        return when.strftime("%Y-%m-%dT%H:%M:%S-00:00")
    raise ValueError(form)


def cases(new: str) -> dict[str, list[dict[str, Any]]]:
    """Each case: a list of events (project "PROJECT" is replaced per path). Some go the fast
    way, some fall back on the exact path, some mix accepted and rejected events. `new` makes
    the labels of "new labels and tags" new to this process (the checked-values caches are
    the process's)."""
    return _cases(new)


def _cases(new: str) -> dict[str, list[dict[str, Any]]]:
    return {
        "plain": [ev(f"a{i}", quantity=str(i % 4 + 1)) for i in range(20)],
        "time forms": [
            ev(f"t-{form}-{i}", time=at(timedelta(minutes=i), form))
            for i in range(3)
            for form in ("Z", "offset", "+05:45", "-09:30", "lower-z", "nanos", "-00:00")
        ],
        # Not RFC 3339 with "Z" or "+HH:MM" (msgspec reads the first two).
        "refused time forms": [ev("t-ok")]
        + [
            ev(f"t-{form}", time=at(timedelta(minutes=1), form))
            for form in ("+0000", "space", "+00", "local", "10 digits", "full-width", "newline")
        ],
        "quantity forms": [
            ev("q1", quantity=3),
            ev("q2", quantity="1.50"),
            ev("q3", quantity="1e1"),
            ev("q4", quantity="0.000001"),
            ev("q5", quantity="0"),
            ev("q6", quantity="2.5E-1"),
        ],
        # Not a JSON number's text (Decimal() reads them all but "0x10" and "1e").
        "refused quantity forms": [ev("rq-ok")]
        + [ev(f"rq{i}", quantity=text) for i, text in enumerate(REFUSED_QUANTITIES)],
        "a float quantity": [ev("f1"), ev("f2", quantity=1.5)],
        "bad quantities": [ev("b1"), ev("b2", quantity="-1"), ev("b3", quantity="1.1234567")],
        "nan": [ev("n1", quantity="NaN"), ev("n2")],
        "too old and too new": [
            ev("o1", time=at(-timedelta(days=400), "Z")),
            ev("o2", time=at(timedelta(days=30), "Z")),
            ev("o3"),
        ],
        "unknown sku": [ev("u1", sku="tpu.v9.hour"), ev("u2")],
        "id twice in the batch": [ev("d1"), ev("d1", quantity="2"), ev("d2")],
        "new labels and tags": [
            ev("l1", experiment=f"exp-{new}", owner=f"owner.{new}", tags={"team": f"x-{new}"}),
            ev("l2", experiment=f"exp-{new}", stage="pretrain"),
        ],
        "labels seen before": [
            ev("s1", experiment=f"exp-{new}", owner=f"owner.{new}", tags={"team": f"x-{new}"})
        ],
        "bad id and label": [ev("-bad"), ev("x1", experiment="has space"), ev("x2")],
        "graduated storage": [
            ev(f"g{i}", sku="storage.hot.gb_day", quantity=str(40 * (i + 1))) for i in range(6)
        ],
        "fixed and elastic": [ev("r1", sku="gpu.h100.reserved.hour"), ev("r2", quantity="2")],
    }


def body(events: list[dict[str, Any]], project: str, media: str) -> bytes:
    named = [{**e, "project": project} if e.get("project") == "PROJECT" else e for e in events]
    return msgspec.msgpack.encode(named) if media == MSGPACK else json.dumps(named).encode()


async def post_as_the_route_does(
    ingestor: Ingestor, data: bytes, media: str, who: Principal = ADMIN
) -> tuple[IngestReport, bool]:
    """(report, whether the fast path answered)."""
    wire = decode_wire_batch(data, media)
    if wire is not None:
        report = await ingestor.ingest_wire(wire, who)
        if report is not None:
            return report, True
    items, batch = decode_events(data, media)
    return await ingestor.ingest(items, who, batch), False


async def post_exactly(
    ingestor: Ingestor, data: bytes, media: str, who: Principal = ADMIN
) -> IngestReport:
    items, batch = decode_events(data, media)
    return await ingestor.ingest(items, who, batch)


def normalized(report: IngestReport, project: str) -> Any:
    raw = msgspec.to_builtins(report)
    for r in raw["rejected"]:
        if r.get("project") == project:
            r["project"] = "PROJECT"
    raw["cost_by_project"] = {
        ("PROJECT" if k == project else k): v for k, v in raw["cost_by_project"].items()
    }
    return raw


async def logged(store: Stores, project: str) -> list[Any]:
    rows = []
    async for _, batch in read_log(store, project, await store.ledger.last_log_entry(project)):
        rows += [row._replace(id=row.id) for row in batch]
    return rows


@pytest.mark.parametrize("media", [JSON, MSGPACK])
async def test_fast_and_exact_paths_answer_and_log_alike(store: Stores, media: str) -> None:
    cards = RateCards(store)
    await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
    fast, exact = Ingestor(store, cards), Ingestor(store, cards)
    answered_fast = []
    for name, events in cases(secrets.token_hex(4)).items():
        for attempt in range(2):  # the second time, every accepted event is a duplicate
            got, was_fast = await post_as_the_route_does(fast, body(events, "pa", media), media)
            want = await post_exactly(exact, body(events, "pb", media), media)
            assert normalized(got, "pa") == normalized(want, "pb"), (name, attempt)
            if was_fast:
                answered_fast.append((name, attempt))
    assert await logged(store, "pa") == await logged(store, "pb")
    # The cases meant for it went the fast way; the others fell back (and still agreed).
    assert ("plain", 1) in answered_fast and ("quantity forms", 0) in answered_fast
    assert ("labels seen before", 0) in answered_fast
    assert ("graduated storage", 0) in answered_fast
    for name in (
        "a float quantity",
        "bad quantities",
        "id twice in the batch",
        "nan",
        "refused quantity forms",
        "refused time forms",
    ):
        assert (name, 0) not in answered_fast, name
    assert ("new labels and tags", 0) not in answered_fast  # taught the caches, then fast
    assert ("time forms", 0) not in answered_fast  # "lower-z" and "nanos" are msgspec's


async def test_fast_path_refuses_a_project_outside_the_token_first(store: Stores) -> None:
    cards = RateCards(store)
    await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
    ingestor = Ingestor(store, cards)
    limited = Principal("t", "ingest", frozenset({"pa"}))
    data = json.dumps([ev("z1", project="pa"), ev("z2", project="other")]).encode()
    wire = decode_wire_batch(data, JSON)
    assert wire is not None
    with pytest.raises(ForbiddenProject) as fast:
        await ingestor.ingest_wire(wire, limited)
    with pytest.raises(ForbiddenProject) as exact:
        await post_exactly(ingestor, data, JSON, limited)
    assert (fast.value.project, fast.value.index) == (exact.value.project, exact.value.index)
    assert await store.ledger.last_log_entry("pa") == ""  # nothing written


def test_only_arrays_of_json_or_msgpack_events_go_the_fast_way() -> None:
    one = ev("w1", project="pa")
    assert decode_wire_batch(json.dumps([one]).encode(), JSON) is not None
    assert decode_wire_batch(msgspec.msgpack.encode([one]), MSGPACK) is not None
    assert decode_wire_batch(json.dumps(one).encode(), JSON) is None  # a single event
    assert decode_wire_batch(json.dumps([{**one, "extra": 1}]).encode(), JSON) is None
    assert decode_wire_batch(json.dumps([{**one, "quantity": 1.5}]).encode(), JSON) is None
    assert decode_wire_batch(b"[" * 10_000, JSON) is None
    assert decode_wire_batch(json.dumps([one]).encode(), "application/x-ndjson") is None
    wire = decode_wire_batch(json.dumps([one]).encode(), JSON)
    assert wire is not None and wire[0].event().time.tzinfo is not None


# --- the grammar, read alike by both paths ------------------------------------------------

_QUANTITY_ALPHABET = "0123456789.eE+-_ \t\n\uff11\u0661xabn"
_TIME_NOISE = st.sampled_from(
    ["", "Z", "z", "+0000", "+00:00", "-00:00", "+05:45", "+24:00", " ", "\n", "T", "t", ".", "1"]
)


def _exact_event(**fields: Any) -> Any:
    """The event as the exact path reads it (`decode_events`), or None if it refuses it."""
    items, _ = decode_events(json.dumps(ev("g1", project="pg", **fields)).encode(), JSON)
    return items[0].event


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.from_regex(JSON_NUMBER_PATTERN, fullmatch=True),
        st.text(alphabet=_QUANTITY_ALPHABET, max_size=10),
        st.integers(min_value=-(2**64), max_value=2**64),
    )
)
def test_fast_and_exact_paths_read_a_quantity_alike(value: str | int) -> None:
    """`ingest_wire`'s quantity memo (`wire_quantity`) and the exact path (`decode_events`
    then `parse_quantity`) accept the same quantities, as the same micro-units."""
    fast = wire_quantity(value)
    event = _exact_event(quantity=value)
    exact = None
    if event is not None:
        try:
            exact = parse_quantity(event.quantity)
        except ValueError:
            exact = None
    assert fast == exact
    if isinstance(value, str) and fast is not None:
        assert decimal_text_problem(value, json_number=True) is None


@settings(max_examples=400, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    st.sampled_from(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"]),
    _TIME_NOISE,
    _TIME_NOISE,
)
def test_fast_and_exact_paths_read_a_time_alike(
    when: datetime, form: str, zone: str, extra: str
) -> None:
    """The compiled time reader reads a subset of the time grammar, to the instant the exact
    path reads; the exact path refuses whatever breaks the grammar."""
    from costcore import parse_time

    text = when.strftime(form) + zone + extra
    fast = parse_time(text)
    assert fast == parse_time_reference(text)
    event = _exact_event(time=text)
    if fast is not None:
        assert event is not None
        delta = event.time - datetime(1970, 1, 1, tzinfo=UTC)
        assert fast == delta // timedelta(microseconds=1)
    if event is not None:
        assert time_text_problem(text) is None
    else:
        assert fast is None
