"""The ingest decoders count a body's events before decoding any (work done, measured by the
memory allocated while refusing: no wall-clock time)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from trainledger.events.decoding import (
    CLOUDEVENT_BATCH,
    JSON,
    MIN_JSON_EVENT_BYTES,
    MSGPACK,
    NDJSON,
    TooManyEvents,
    count_events,
    decode_events,
    may_exceed,
)

from tests.conftest import event

LIMIT = 50_000
ITEMS = 1_000_000  # 20 times the limit


def peak_allocated(work: Callable[[], Any]) -> int:
    """Bytes allocated at the peak while `work` runs (beyond what was held before)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


BODIES = {
    JSON: b"[" + b",".join([b"{}"] * ITEMS) + b"]",
    CLOUDEVENT_BATCH: b"[" + b",".join([b"{}"] * ITEMS) + b"]",
    NDJSON: b"{}\n" * ITEMS,
    MSGPACK: b"\xdd" + ITEMS.to_bytes(4, "big") + b"\x80" * ITEMS,
}


@pytest.mark.parametrize("media_type", sorted(BODIES))
def test_a_batch_over_the_limit_is_refused_before_any_item_is_decoded(media_type: str) -> None:
    body = BODIES[media_type]
    assert count_events(body, media_type, LIMIT) == LIMIT + 1  # counted no further

    def refuse() -> None:
        with pytest.raises(TooManyEvents):
            decode_events(body, media_type, LIMIT)

    # Decoding a million `{}` one by one held ~1 GB; counting them holds nothing.
    assert peak_allocated(refuse) < 256 * 1024


def test_blank_ndjson_lines_make_no_list() -> None:
    body = b"\n" * (8 * ITEMS) + b'{"id": "x"}\n'
    items: list[Any] = []
    peak = peak_allocated(lambda: items.extend(decode_events(body, NDJSON, LIMIT)[0]))
    assert len(items) == 1 and items[0].field == "$[0]"
    assert peak < 1024 * 1024  # a list of 8 M blank lines would be 64 MB


def test_the_usual_batch_is_not_scanned_and_a_large_one_is_counted_not_decoded() -> None:
    one = msgspec.json.encode(event("e-0"))
    usual = b"[" + b",".join([one] * 5_000) + b"]"
    assert len(usual) <= MIN_JSON_EVENT_BYTES * LIMIT and not may_exceed(usual, JSON, LIMIT)
    large = b"[" + b",".join([one] * (LIMIT + 1)) + b"]"
    decided: list[bool] = []
    assert peak_allocated(lambda: decided.append(may_exceed(large, JSON, LIMIT))) < 64 * 1024
    assert decided == [True]
    assert not may_exceed(b"[" + b",".join([one] * LIMIT) + b"]", JSON, LIMIT)
    packed = msgspec.msgpack.encode([event("e-0")] * (LIMIT + 1))
    assert may_exceed(packed, MSGPACK, LIMIT)
    assert not may_exceed(msgspec.msgpack.encode([event("e-0")] * 3), MSGPACK, LIMIT)
