"""Passes over a decoded ingest batch: the per-event checks and columns, and the grouping of
logged events by totals cell, and the small gathers that pricing and the ingest script's
arguments need (pure computation). Each compiled function (``costcore/_columns.pyx``) has a
plain-Python reference here, described there and checked equal by
tests/unit/costcore/test_columns.py; the
rest of this docstring is `scan_events`'s contract.

`scan_events` (compiled, ``costcore/_columns.pyx``) and `scan_events_reference` (this plain
Python) have one contract, checked equal by tests/unit/costcore/test_costcore.py. For every
event they
decide whether it passes the fast checks, and if so give its columns:

* the id matches ``^[A-Za-z0-9][A-Za-z0-9_.:/@+=\\-]{0,199}$`` (checked here, character by
  character); the project, experiment and owner (when not empty) and every tag key and value
  are members of the given sets of values already known valid (the caller checks and adds
  new values the slow way);
* the quantity's text (``str()``) is a key of ``quantities``, a memo of quantities already
  parsed to micro-units (by text: hashing a ``Decimal`` costs five times its ``str()``);
* the time is an aware datetime within ``[min_epoch_us, max_epoch_us]`` µs since the epoch.

An event that passes gets status 0 and its ``epoch_us``, ``day`` (days since 1970-01-01
UTC, floored), ``quantity_micro`` and ``shard`` (CRC-32 of the id's UTF-8 bytes modulo
``shards``, as ``zlib.crc32``). Any other event gets status 1 and zeros: the caller decides
about it with the exact checks (and their messages), so the fast pass never rejects on its
own. A ``None`` in ``events`` (an item that failed to decode) gets status 1. Nothing is
modified.
"""

from __future__ import annotations

import bisect
import re
import zlib
from array import array
from collections.abc import Callable, Container, Hashable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

__all__ = [
    "CodedEntry",
    "CodedGroups",
    "EventLike",
    "ScanResult",
    "dictionary_encode_reference",
    "group_coded_reference",
    "group_positions_reference",
    "pair_codes_reference",
    "parse_time_reference",
    "rate_rows_reference",
    "remap_codes_reference",
    "scan_events_reference",
    "scan_wire_events_reference",
    "take_reference",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ID_REST = _ALNUM | frozenset("_.:/@+=-")
MAX_ID_LENGTH = 200


class EventLike(Protocol):
    id: str
    time: datetime
    project: str
    quantity: Decimal
    experiment: str
    owner: str
    tags: dict[str, str]


class ScanResult(NamedTuple):
    status: bytearray  # 0: passed every fast check; 1: the caller decides
    epoch_us: array[int]  # 'q'
    day: array[int]  # 'q', days since 1970-01-01 (UTC)
    quantity_micro: array[int]  # 'q'
    shard: array[int]  # 'q'
    passed: int  # how many have status 0


def id_ok(event_id: str) -> bool:
    """Whether an event id matches the id pattern (without the regular expression engine)."""
    if not 0 < len(event_id) <= MAX_ID_LENGTH or event_id[0] not in _ALNUM:
        return False
    return all(c in _ID_REST for c in event_id)


def scan_events_reference(
    events: Sequence[Any],
    quantities: Mapping[str, int],
    min_epoch_us: int,
    max_epoch_us: int,
    shards: int,
    projects: Container[str],
    labels: Container[str],
    tag_keys: Container[str],
    tag_values: Container[str],
) -> ScanResult:
    """Plain-Python reference of `costcore.scan_events` (see the module docstring)."""
    args = (min_epoch_us, max_epoch_us, shards, projects, labels, tag_keys, tag_values)
    return _scan_reference(events, lambda ev: quantities.get(str(ev.quantity)), _epoch_us, *args)


def scan_wire_events_reference(
    events: Sequence[Any],
    quantities: Mapping[Any, int],
    min_epoch_us: int,
    max_epoch_us: int,
    shards: int,
    projects: Container[str],
    labels: Container[str],
    tag_keys: Container[str],
    tag_values: Container[str],
) -> ScanResult:
    """Plain-Python reference of `costcore.scan_wire_events`: `scan_events` for events as they
    arrive, their time the text sent (read by `parse_time_reference`; any other form does not
    pass) and their quantity the value sent (a str or an int, looked up in `quantities` as it
    is, not by its str())."""
    args = (min_epoch_us, max_epoch_us, shards, projects, labels, tag_keys, tag_values)
    return _scan_reference(events, lambda ev: quantities.get(ev.quantity), _wire_epoch_us, *args)


def _epoch_us(ev: Any) -> int | None:
    if not isinstance(ev.time, datetime) or ev.time.utcoffset() is None:
        return None
    delta = ev.time - _EPOCH
    return int((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _wire_epoch_us(ev: Any) -> int | None:
    return parse_time_reference(ev.time) if isinstance(ev.time, str) else None


def _scan_reference(
    events: Sequence[Any],
    quantity_of: Callable[[Any], int | None],
    epoch_us_of: Callable[[Any], int | None],
    min_epoch_us: int,
    max_epoch_us: int,
    shards: int,
    projects: Container[str],
    labels: Container[str],
    tag_keys: Container[str],
    tag_values: Container[str],
) -> ScanResult:
    if shards <= 0:
        raise ValueError(f"shards must be > 0, got {shards}")
    n = len(events)
    status = bytearray(n)
    epoch_us = array("q", bytes(8 * n))
    day = array("q", bytes(8 * n))
    quantity = array("q", bytes(8 * n))
    shard = array("q", bytes(8 * n))
    passed = 0
    for i, ev in enumerate(events):
        status[i] = 1
        if ev is None:
            continue
        if not id_ok(ev.id) or ev.project not in projects:
            continue
        if (ev.experiment and ev.experiment not in labels) or (ev.owner and ev.owner not in labels):
            continue
        if any(k not in tag_keys or v not in tag_values for k, v in ev.tags.items()):
            continue
        q = quantity_of(ev)
        if q is None:
            continue
        us = epoch_us_of(ev)
        if us is None or not min_epoch_us <= us <= max_epoch_us:
            continue
        status[i] = 0
        epoch_us[i] = us
        day[i] = us // 86_400_000_000
        quantity[i] = q
        shard[i] = zlib.crc32(ev.id.encode()) % shards
        passed += 1
    return ScanResult(status, epoch_us, day, quantity, shard, passed)


_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})",
    re.ASCII,
)


def parse_time_reference(text: str) -> int | None:
    """Plain-Python reference of `costcore.parse_time`: µs since the epoch of a time written
    ``YYYY-MM-DDTHH:MM:SS[.f]`` with a fraction of 1 to 6 digits, then ``Z`` or ``±HH:MM``
    (hours below 24), or None for any other text (a subset of what RFC 3339 and msgspec
    accept: the fast pass reads only this form and leaves the rest to msgspec)."""
    m = _TIME.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0").ljust(6, "0"))
    zone = m.group(8)
    try:
        offset = timedelta(0)
        if zone != "Z":
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if minutes > 59:
                return None
            offset = timedelta(hours=hours, minutes=minutes) * (-1 if zone[0] == "-" else 1)
        when = datetime(year, month, day, hour, minute, second, micro, timezone(offset))
    except ValueError:  # no such date or time, or an offset of 24 hours or more
        return None
    return (when - _EPOCH) // timedelta(microseconds=1)


def dictionary_encode_reference(values: Sequence[Hashable]) -> tuple[list[Any], array[int]]:
    """Plain-Python reference of `costcore.dictionary_encode`: the distinct values in order of
    first appearance, and per value its index among them (``array('i')``)."""
    index: dict[Hashable, int] = {}
    codes = array("i", [index.setdefault(v, len(index)) for v in values])
    return list(index), codes


class CodedEntry(NamedTuple):
    """One log entry's events with their labels as codes (see service/ledger/eventlog.py)."""

    epoch_us: Sequence[int]
    cost_nano: Sequence[int]
    quantity_micro: Sequence[int]
    # Five columns of the entry's own codes: stage, experiment, owner, rate, attributed tags.
    codes: Sequence[Sequence[int]]
    # Per column: the entry's code -> the fold's code (entries code their labels each alone).
    to_global: Sequence[Sequence[int]]


class CodedGroups(NamedTuple):
    # (day, stage, experiment, owner, rate, attributed): the fold's codes; day since 1970-01-01
    keys: list[tuple[int, int, int, int, int, int]]
    cost_nano: list[int]  # per key: exact sums, of any size
    quantity_micro: list[int]  # per key
    events: array[int]  # 'q', per key
    hour_keys: list[tuple[int, int, int]]  # (hours since 1970-01-01, stage, hour class)
    hour_cost_nano: list[int]  # per hour key
    hour_events: array[int]  # 'q', per hour key


def group_coded_reference(entries: Sequence[CodedEntry], hour_class: Sequence[int]) -> CodedGroups:
    """Plain-Python reference of `costcore.group_coded`: sum the events of several log entries
    by totals cell and by hour cell, numbering distinct keys in order of first appearance.

    An event's cell key is (day, stage, experiment, owner, rate, attributed) in the fold's
    codes (the entry's codes mapped through `to_global`), day = epoch_us // 86,400,000,000
    (floored); its hour key is (epoch_us // 3,600,000,000, stage, hour_class[rate]). Per cell
    key: cost, quantity and event count; per hour key: cost and event count. Sums are exact
    ints of any size (no sum limits a fold: the store keeps them in two limbs,
    service/storage/limbs.py). Raises ValueError when an entry's columns differ in length.
    """
    sums: dict[tuple[int, int, int, int, int, int], list[int]] = {}
    hours: dict[tuple[int, int, int], int] = {}
    hour_events: dict[tuple[int, int, int], int] = {}
    for entry in entries:
        n = len(entry.epoch_us)
        if len(entry.codes) != 5 or len(entry.to_global) != 5:
            raise ValueError("an entry has five code columns and five code maps")
        if any(len(c) != n for c in (entry.cost_nano, entry.quantity_micro, *entry.codes)):
            raise ValueError("every column of an entry must have the same length")
        stage, experiment, owner, rate, attributed = (
            [to_global[c] for c in column]
            for column, to_global in zip(entry.codes, entry.to_global, strict=True)
        )
        for i in range(n):
            us = entry.epoch_us[i]
            cost = entry.cost_nano[i]
            key = (us // 86_400_000_000, stage[i], experiment[i], owner[i], rate[i], attributed[i])
            have = sums.get(key)
            if have is None:
                sums[key] = [cost, entry.quantity_micro[i], 1]
            else:
                have[0] += cost
                have[1] += entry.quantity_micro[i]
                have[2] += 1
            hour_key = (us // 3_600_000_000, stage[i], hour_class[rate[i]])
            hours[hour_key] = hours.get(hour_key, 0) + cost
            hour_events[hour_key] = hour_events.get(hour_key, 0) + 1
    return CodedGroups(
        list(sums),
        [v[0] for v in sums.values()],
        [v[1] for v in sums.values()],
        array("q", [v[2] for v in sums.values()]),
        list(hours),
        list(hours.values()),
        array("q", hour_events.values()),
    )


def rate_rows_reference(
    skus: Sequence[str],
    epoch_us: Sequence[int],
    starts: Sequence[int],
    tables: Sequence[Mapping[str, int]],
) -> array[int]:
    """Plain-Python reference of `costcore.rate_rows`: each event's rate-table row, -1 where
    none. The version in effect at an event's time is the last whose start (`starts`, epoch µs,
    ascending) is at or before it; `tables[v]` maps a SKU to its row in version v."""
    if len(epoch_us) != len(skus):
        raise ValueError("skus and epoch_us differ in length")
    if len(tables) != len(starts):
        raise ValueError("starts and tables differ in length")
    rows = array("i")
    for sku, t in zip(skus, epoch_us, strict=True):
        v = bisect.bisect_right(starts, t) - 1
        rows.append(tables[v].get(sku, -1) if v >= 0 else -1)
    return rows


def pair_codes_reference(
    firsts: Sequence[int], seconds: Sequence[Hashable], wanted: Sequence[bool]
) -> tuple[list[tuple[int, Any]], array[int]]:
    """Plain-Python reference of `costcore.pair_codes`: the distinct (first, second) pairs of
    the positions whose `first` is wanted (``wanted[first]``; a first outside `wanted` is
    not), in order of first appearance, and per position its pair's index, or -1."""
    if len(seconds) != len(firsts):
        raise ValueError("firsts and seconds differ in length")
    index: dict[tuple[int, Any], int] = {}
    codes = array("i")
    for first, second in zip(firsts, seconds, strict=True):
        if 0 <= first < len(wanted) and wanted[first]:
            codes.append(index.setdefault((first, second), len(index)))
        else:
            codes.append(-1)
    return list(index), codes


def remap_codes_reference(codes: Sequence[int], table: Sequence[int]) -> array[int]:
    """Plain-Python reference of `costcore.remap_codes`: ``table[code]`` per code
    (``array('q')``), -1 where the code is negative; a code past the table raises IndexError."""
    out = array("q")
    for i, code in enumerate(codes):
        if code >= len(table):
            raise IndexError(f"code {code} at position {i} is outside a table of {len(table)}")
        out.append(table[code] if code >= 0 else -1)
    return out


def group_positions_reference(keys: Sequence[int], nkeys: int) -> tuple[array[int], array[int]]:
    """Plain-Python reference of `costcore.group_positions`: the positions ordered by key
    (stable: in their order within a key) and each key's count (both ``array('q')``); a key
    outside ``[0, nkeys)`` raises ValueError."""
    counts = array("q", bytes(8 * max(nkeys, 0)))
    for i, key in enumerate(keys):
        if not 0 <= key < nkeys:
            raise ValueError(f"key {key} at position {i} is outside [0, {nkeys})")
        counts[key] += 1
    order = array("q", sorted(range(len(keys)), key=lambda i: keys[i]))
    return order, counts


def take_reference(values: Sequence[Any], positions: Sequence[int]) -> list[Any]:
    """Plain-Python reference of `costcore.take`: ``[values[p] for p in positions]``, no
    negative positions."""
    out = []
    for p in positions:
        if not 0 <= p < len(values):
            raise IndexError(f"position {p} is outside a sequence of {len(values)}")
        out.append(values[p])
    return out


_JSON_SPACE = b" \t\n\r"


def json_array_length_reference(body: bytes, limit: int) -> int:
    """The number of items of the JSON array `body` is, counted without decoding them, and
    no further than `limit + 1`; -1 when the body (after leading whitespace) does not start
    with "[". Only the structure is read (strings, escapes, nesting): a body that is not
    valid JSON gets a count of what it holds up to where the count stopped, which the decoder
    that reads it afterwards refuses anyway. Used to refuse an oversized batch before any of
    its items is decoded (service/events/model.py)."""
    i, n = 0, len(body)
    while i < n and body[i] in _JSON_SPACE:
        i += 1
    if i == n or body[i] != 0x5B:
        return -1
    i += 1
    depth, count, in_item, in_string = 1, 0, False, False
    while i < n:
        c = body[i]
        if in_string:
            if c == 0x5C:
                i += 1
            elif c == 0x22:
                in_string = False
        elif c == 0x22 or c in b"[{":
            if depth == 1 and not in_item:
                in_item = True
                count += 1
            if c == 0x22:
                in_string = True
            else:
                depth += 1
        elif c in b"]}":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1:
            if c == 0x2C:
                in_item = False
            elif not in_item and c not in _JSON_SPACE:
                in_item = True
                count += 1
        if count > limit:
            break
        i += 1
    return count


def text_line_count_reference(body: bytes, limit: int) -> int:
    """The number of lines of `body` that are not blank (hold a byte other than ASCII
    whitespace, as `bytes.strip` reads it), counted no further than `limit + 1`: the events
    of an NDJSON body, counted before any line is split off or decoded."""
    count = 0
    for line in body.split(b"\n"):
        if line.strip():
            count += 1
            if count > limit:
                break
    return count
