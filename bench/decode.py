"""2. Decode: msgspec decoding of the same batch as JSON and as msgpack.

This is the ceiling of the HTTP ingest path: a `POST /v1/events` cannot accept events faster
than the service can decode its body. Timed on the encoded bytes of the core benchmark's
100,000-event batch, with the garbage collector on as in the server (the figure with it
paused is in the details: the difference is what the collector costs):

* the headline, `service.events.decoding.decode_wire_batch`: what the HTTP path does with a
  batch first (since the fourth session): one typed msgspec call into `WireEvent` structs,
  every length check, the time and quantity left as sent (the compiled checks read them);
* `decode_events`, the exact path (one typed msgspec call into `EventIn` structs, a
  datetime and a Decimal per event, then one `DecodedItem` per event): what the HTTP path
  does with a batch the fast path does not take whole, and what it did with every batch
  before the fourth session.

Their own ceiling is msgspec parsing the same bytes with no schema (`msgspec.json.decode` /
`msgspec.msgpack.decode` into dicts and strings): the cost of the bytes themselves, before
validation (typed structs are cheaper to build than dicts, so a typed decode can beat it).

The issue sets no target for this benchmark; the ingest benchmark compares against it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from trainledger.events.decoding import JSON, MSGPACK, decode_events, decode_wire_batch

from bench.common import EventFactory, Workload, encode, median, result, row, time_repeated

DEFAULTS: dict[str, Any] = {"events": 100_000, "repeat": 10, "min_seconds": 2.0}
QUICK: dict[str, Any] = {"events": 100_000, "repeat": 5, "min_seconds": 0.5}
TINY: dict[str, Any] = {"events": 1_000, "repeat": 2, "min_seconds": 0.0}

_MEDIA = {"json": JSON, "msgpack": MSGPACK}
_UNTYPED: dict[str, Callable[[bytes], Any]] = {
    "json": msgspec.json.decode,
    "msgpack": msgspec.msgpack.decode,
}


def decode_rate(
    body: bytes,
    fmt: str,
    n: int,
    repeat: int,
    min_seconds: float,
    *,
    gc_enabled: bool = True,
    exact: bool = False,
) -> float:
    """Events/s of the service's decoder on `body` (n events), median of the samples: the
    fast path's `decode_wire_batch`, or with `exact` `decode_events`."""
    media = _MEDIA[fmt]

    def once() -> None:
        if exact:
            items, _ = decode_events(body, media)
            if len(items) != n or items[-1].event is None:
                raise AssertionError("decode_events did not decode the batch")
        else:
            events = decode_wire_batch(body, media)
            if events is None or len(events) != n:
                raise AssertionError("decode_wire_batch did not decode the batch")

    samples = time_repeated(once, repeat=repeat, min_seconds=min_seconds, gc_enabled=gc_enabled)
    return n / median(samples)


def _untyped_rate(body: bytes, fmt: str, n: int, repeat: int, min_seconds: float) -> float:
    parse = _UNTYPED[fmt]
    samples = time_repeated(
        lambda: parse(body), repeat=repeat, min_seconds=min_seconds, gc_enabled=True
    )
    return n / median(samples)


def measure(bodies: dict[str, bytes], n: int, repeat: int, min_seconds: float) -> dict[str, Any]:
    """Decode rates of the same n-event batch encoded as JSON and msgpack.

    Measured in this process with the garbage collector on, as the server runs (`events_per_s`),
    and paused (`gc_paused_events_per_s`: what the decoder costs without the collector's
    passes over the ~10 objects per event it allocates).
    """
    out: dict[str, Any] = {}
    for fmt, body in bodies.items():
        typed = decode_rate(body, fmt, n, repeat, min_seconds, gc_enabled=True)
        exact = decode_rate(body, fmt, n, repeat, min_seconds, exact=True)
        paused = decode_rate(body, fmt, n, max(2, repeat // 2), min_seconds / 2, gc_enabled=False)
        untyped = _untyped_rate(body, fmt, n, max(2, repeat // 2), min_seconds / 2)
        out[fmt] = {
            "events_per_s": typed,
            "exact_events_per_s": exact,
            "gc_paused_events_per_s": paused,
            "untyped_events_per_s": untyped,
            "bytes_per_event": len(body) / n,
            "mb_per_s": typed * len(body) / n / 1e6,
        }
    return out


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    n = int(p["events"])
    events = EventFactory(Workload(days=1)).batch(0, n)
    bodies = {fmt: encode(events, fmt) for fmt in ("json", "msgpack")}
    del events  # keep the heap as small as the server's: only the bodies stay
    m = measure(bodies, n, int(p["repeat"]), float(p["min_seconds"]))
    rows = [
        row(
            f"{fmt} {name}",
            m[fmt][key],
            "events/s",
            ceiling=m[fmt]["untyped_events_per_s"],
            ratio=m[fmt][key] / m[fmt]["untyped_events_per_s"],
        )
        for fmt in ("json", "msgpack")
        for name, key in (
            ("decode_wire_batch (ingest path)", "events_per_s"),
            ("decode_events (exact path)", "exact_events_per_s"),
        )
    ]
    return result(
        "decode",
        figure=m["json"]["events_per_s"],
        unit="events/s",
        ceiling=m["json"]["untyped_events_per_s"],
        ceiling_label="schemaless msgspec parse of the same bytes, events/s",
        ratio=m["json"]["events_per_s"] / m["json"]["untyped_events_per_s"],
        ratio_label="typed decode_wire_batch / schemaless parse (JSON headline; rest in rows)",
        target=None,
        met=True,
        details={"events": n, **m},
        notes=[
            "no target in the issue: this is the HTTP path's ceiling (see ingest_http)",
            "measured with the garbage collector on, as in the server; gc-paused in details",
        ],
        rows=rows,
    )
