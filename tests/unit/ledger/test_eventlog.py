"""The accepted-event log's entries: written in coded columns, read back as the same events."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import lz4.frame
from trainledger.events.model import EventIn
from trainledger.ledger.eventlog import (
    LoggedEvent,
    compress_log,
    decode_log,
    decode_log_entry,
    decompress_log,
    encode_log,
)

_START = datetime(2026, 11, 1, tzinfo=UTC)


def _events(rng: random.Random, n: int) -> tuple[list[EventIn], list[int]]:
    events, epoch_us = [], []
    for i in range(n):
        when = _START + timedelta(microseconds=rng.randrange(10**11))
        events.append(
            EventIn(
                id=f"ev-{i}",
                time=when,
                project="llm",
                sku=rng.choice(["gpu", "disk"]),
                quantity=1,  # type: ignore[arg-type]
                stage=rng.choice(["pretrain", "eval"]),
                experiment=rng.choice(["", "exp-a", "exp-ü"]),
                owner=rng.choice(["", "alice"]),
                tags=rng.choice([{}, {"team": "a"}, {"team": "b", "rework": "yes"}]),
            )
        )
        epoch_us.append((when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1))
    return events, epoch_us


def test_an_entry_reads_back_as_the_events_it_was_written_from() -> None:
    rng = random.Random(4)
    events, epoch_us = _events(rng, 500)
    rates = [(1, "gpu", "compute", "e"), (2, "disk", "storage", "f")]
    rate_codes = [0 if ev.sku == "gpu" else 1 for ev in events]
    quantity = [rng.randrange(10**9) for _ in events]
    cost = [rng.randrange(10**12) for _ in events]
    attributed = ["team=a" if ev.tags.get("team") == "a" else "" for ev in events]
    blob = encode_log(events, epoch_us, quantity, cost, rates, rate_codes, attributed)

    rows = decode_log(blob)
    assert rows == [
        LoggedEvent(
            ev.id,
            epoch_us[i],
            ev.stage,
            ev.experiment,
            ev.owner,
            ev.sku,
            quantity[i],
            ev.tags or None,
            cost[i],
            rates[rate_codes[i]][0],
            rates[rate_codes[i]][2],
        )
        for i, ev in enumerate(events)
    ]
    assert [row.event("llm").time for row in rows] == [ev.time for ev in events]

    coded = decode_log_entry(blob)
    assert coded is not None
    assert [coded.stages[c] for c in coded.stage_codes] == [ev.stage for ev in events]
    assert [coded.owners[c] for c in coded.owner_codes] == [ev.owner for ev in events]
    assert [coded.attributed[c] for c in coded.attributed_codes] == attributed
    assert [tuple(coded.rates[c]) for c in coded.rate_codes] == [rates[c] for c in rate_codes]
    # Labels are written once per entry, not once per event.
    assert sorted(coded.stages) == ["eval", "pretrain"] and len(coded.experiments) == 3


def test_entries_are_lz4_frames() -> None:
    """Entries are LZ4 frames of the msgpack columns."""
    rng = random.Random(5)
    for n in (3, 5_000):
        events, epoch_us = _events(rng, n)
        args = (events, epoch_us, [1] * n, [2] * n, [(1, "gpu", "compute", "e")], [0] * n, [""] * n)
        raw = encode_log(*args, compress=False)  # type: ignore[arg-type]
        blob = encode_log(*args)  # type: ignore[arg-type]
        assert blob == compress_log(raw) and lz4.frame.decompress(blob) == raw
        assert decompress_log(blob) == raw
        assert decode_log_entry(blob) is not None
        assert [row.id for row in decode_log(blob)] == [ev.id for ev in events]
