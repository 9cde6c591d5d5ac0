"""Passes over a decoded ingest batch: the per-event checks and columns, and the grouping of
events by totals key (pure computation). `group_events` is described at its reference,
`group_events_reference`; the rest of this docstring is `scan_events`'s contract.

`scan_events` (compiled, ``costcore/_columns.pyx``) and `scan_events_reference` (this plain
Python) have one contract, checked equal by tests/test_costcore.py. For every event they
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

import zlib
from array import array
from collections.abc import Callable, Container, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

__all__ = [
    "EventLike",
    "GroupResult",
    "ScanResult",
    "group_events_reference",
    "scan_events_reference",
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
        q = quantities.get(str(ev.quantity))
        if q is None:
            continue
        offset = ev.time.utcoffset()
        if offset is None:
            continue
        delta = ev.time - _EPOCH
        us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        if not min_epoch_us <= us <= max_epoch_us:
            continue
        status[i] = 0
        epoch_us[i] = us
        day[i] = us // 86_400_000_000
        quantity[i] = q
        shard[i] = zlib.crc32(ev.id.encode()) % shards
        passed += 1
    return ScanResult(status, epoch_us, day, quantity, shard, passed)


class GroupResult(NamedTuple):
    group: array[int]  # 'i': per event, its index in `keys`
    keys: list[tuple[int, int, str, str, str, str]]  # (day, row, stage, experiment, owner, tags)
    hour_group: array[int]  # 'i': per event, its index in `hour_keys`
    hour_keys: list[tuple[int, int, str]]  # (hours since 1970-01-01, row, stage)


def group_events_reference(
    events: Sequence[Any],
    rows: Sequence[int],
    day: Sequence[int],
    epoch_us: Sequence[int],
    tag_text: Callable[[dict[str, str]], str],
) -> GroupResult:
    """Plain-Python reference of `costcore.group_events`: intern every event's totals key and
    hour key, numbering distinct keys in order of first appearance.

    An event's key is (day, rate-table row, stage, experiment, owner, tag text), where the tag
    text is ``tag_text(event.tags)`` for an event with tags and "" otherwise; its hour key is
    (epoch_us // 3,600,000,000 floored, row, stage). Pricing aggregates by these keys; the
    caller maps each distinct key (not each event) to its totals cell.
    """
    n = len(events)
    group = array("i", bytes(4 * n))
    hour_group = array("i", bytes(4 * n))
    key_index: dict[tuple[int, int, str, str, str, str], int] = {}
    hour_index: dict[tuple[int, int, str], int] = {}
    for i, ev in enumerate(events):
        tags = ev.tags
        key = (day[i], rows[i], ev.stage, ev.experiment, ev.owner, tag_text(tags) if tags else "")
        group[i] = key_index.setdefault(key, len(key_index))
        hour_key = (epoch_us[i] // 3_600_000_000, rows[i], ev.stage)
        hour_group[i] = hour_index.setdefault(hour_key, len(hour_index))
    return GroupResult(group, list(key_index), hour_group, list(hour_index))
