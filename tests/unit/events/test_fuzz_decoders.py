"""Fuzzing the wire decoders: whatever bytes arrive, decoding either yields items (each an
event or a rejection with a reason and a JSON path) or raises `MalformedBody`; nothing else.

Anything else would surface as a 500 from `POST /v1/events`. The strategies mix random bytes,
random JSON/msgpack documents and near-valid events with one field broken, because purely
random bytes rarely get past the first byte of a parser.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainledger.events.decoding import (
    CLOUDEVENT,
    CLOUDEVENT_BATCH,
    CONTENT_TYPES,
    JSON,
    MSGPACK,
    NDJSON,
    DecodedItem,
    MalformedBody,
    decode_events,
)
from trainledger.events.model import EventIn, identifier_problem

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)

VALID: dict[str, Any] = {
    "id": "job-1",
    "time": "2026-11-01T00:00:00Z",
    "project": "llm",
    "sku": "gpu.h100.hour",
    "quantity": "8",
    "stage": "pretrain",
    "experiment": "exp-1",
    "owner": "ana",
    "tags": {"team": "core"},
}


def documents(min_int: int, max_int: int) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=min_int, max_value=max_int)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=40),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
        max_leaves=20,
    )


json_values = documents(-(2**70), 2**70)  # JSON numbers have no range
msgpack_values = documents(-(2**63), 2**64 - 1)  # what msgpack can carry


@st.composite
def near_valid_events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with some fields replaced by arbitrary values or removed."""
    event = dict(VALID)
    for key in draw(st.lists(st.sampled_from([*VALID, "extra"]), max_size=3, unique=True)):
        if draw(st.booleans()):
            event[key] = draw(msgpack_values)  # also sent as msgpack
        else:
            event.pop(key, None)
    return event


def _check(items: list[DecodedItem]) -> None:
    for item in items:
        if item.event is None:
            assert item.reason, item
            assert item.field.startswith("$") or item.field, item
        else:
            assert isinstance(item.event, EventIn)
            # The pattern checks run after decoding; they too must answer, not raise.
            identifier_problem(item.event)


def _decode(body: bytes, media: str) -> None:
    try:
        items, _batch = decode_events(body, media)
    except MalformedBody as exc:
        assert exc.reason and exc.field
        return
    _check(items)


@FUZZ
@given(body=st.binary(max_size=300), media=st.sampled_from(CONTENT_TYPES))
def test_random_bytes_never_crash_a_decoder(body: bytes, media: str) -> None:
    _decode(body, media)


@FUZZ
@given(doc=json_values, media=st.sampled_from([JSON, NDJSON, CLOUDEVENT, CLOUDEVENT_BATCH]))
def test_random_json_documents_never_crash(doc: Any, media: str) -> None:
    _decode(json.dumps(doc).encode(), media)


@FUZZ
@given(doc=msgpack_values)
def test_random_msgpack_documents_never_crash(doc: Any) -> None:
    _decode(msgspec.msgpack.encode(doc), MSGPACK)


@FUZZ
@given(events=st.lists(near_valid_events(), min_size=1, max_size=4), as_batch=st.booleans())
def test_near_valid_events_are_decoded_or_rejected_one_by_one(
    events: list[dict[str, Any]], as_batch: bool
) -> None:
    # msgspec writes NaN and infinities as null, so every body here is well-formed
    # (json.dumps would write the non-JSON `NaN`, which is a different, malformed-body case).
    for media, body in (
        (JSON, msgspec.json.encode(events if as_batch else events[0])),
        (MSGPACK, msgspec.msgpack.encode(events if as_batch else events[0])),
        (NDJSON, b"\n".join(msgspec.json.encode(e) for e in events)),
    ):
        items, batch = decode_events(body, media)
        _check(items)
        assert len(items) == (len(events) if batch else 1)


@FUZZ
@given(
    data=st.one_of(json_values, st.dictionaries(st.text(max_size=8), json_values)),
    envelope=st.dictionaries(
        st.sampled_from(["id", "source", "type", "specversion", "subject", "time"]),
        json_values,
    ),
    as_batch=st.booleans(),
)
def test_cloudevents_with_odd_envelopes_and_data_never_crash(
    data: Any, envelope: dict[str, Any], as_batch: bool
) -> None:
    ce = {"specversion": "1.0", "id": "a", "source": "s", "type": "t", **envelope, "data": data}
    body = json.dumps([ce] if as_batch else ce).encode()
    _decode(body, CLOUDEVENT_BATCH if as_batch else CLOUDEVENT)


def test_a_broken_ndjson_line_is_rejected_alone() -> None:
    good = json.dumps(VALID).encode()
    items, batch = decode_events(good + b"\n{not json\n" + good, NDJSON)
    assert batch and len(items) == 3
    assert items[0].event is not None and items[2].event is not None
    assert items[1].event is None and items[1].field == "$[1]"
    assert "JSON" in items[1].reason


def test_cloudevent_tags_that_are_not_an_object_are_rejected() -> None:
    ce = {
        "specversion": "1.0",
        "id": "a",
        "source": "s",
        "type": "t",
        "data": {**VALID, "tags": ["not", "an", "object"]},
    }
    items, _ = decode_events(json.dumps(ce).encode(), CLOUDEVENT)
    assert items[0].event is None
    assert items[0].field == "$.tags"


def test_deeply_nested_documents_are_refused_cleanly() -> None:
    for media, body in (
        (JSON, b"[" * 100_000 + b"]" * 100_000),
        (MSGPACK, b"\x91" * 100_000 + b"\xc0"),
        (NDJSON, b"[" * 100_000),
        (CLOUDEVENT, b'{"data":' * 50_000 + b"1" + b"}" * 50_000),
    ):
        _decode(body, media)
