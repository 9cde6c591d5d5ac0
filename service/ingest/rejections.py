"""The events a body loses: the report's entries and their dead letters."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import msgspec

from ..events.decoding import DecodedItem
from ..events.model import valid_project
from .report import RejectedEvent

# A dead letter keeps the rejected event whole up to this size (as compact JSON; any event
# the model accepts is smaller), and past it only an excerpt of its first bytes, with the
# size and SHA-256 of the whole: an oversized event neither fills the store nor the listing
# (it cannot be replayed, its sender must post it again). Reasons are cut to a bound too.
DEAD_LETTER_EVENT_BYTES = 8192
MAX_REASON_CHARS = 512
# Dead letters kept per project by default (the oldest dropped, counted in /metrics).
DEFAULT_DEAD_LETTER_LIMIT = 10_000


def dead_letter(
    event_id: str, project: str, reason: str, where: str, rejected_at: str, raw: Any
) -> bytes:
    """A dead letter's JSON record: the event whole, or only its excerpt when it is larger
    than `DEAD_LETTER_EVENT_BYTES` (`truncated`), with its size and digest either way."""
    text = msgspec.json.encode(raw)
    record: dict[str, Any] = {
        "id": event_id,
        "project": project,
        "reason": reason,
        "field": where,
        "rejected_at": rejected_at,
        "event": raw,
        "size": len(text),
        "sha256": hashlib.sha256(text).hexdigest(),
        "truncated": False,
    }
    if len(text) > DEAD_LETTER_EVENT_BYTES:
        record["event"] = None
        record["excerpt"] = text[:DEAD_LETTER_EVENT_BYTES].decode("utf-8", "ignore")
        record["truncated"] = True
    return msgspec.json.encode(record)


class Rejections:
    """The events a body loses, as the report lists them and as dead letters (kept per
    project, for the caller to see, fix and post again)."""

    def __init__(self, now: datetime, batch: bool) -> None:
        self.now = now
        self.batch = batch
        self.rejected: list[RejectedEvent] = []
        self.dead_letters: dict[str, list[tuple[str, bytes, int]]] = {}

    def reject(self, item: DecodedItem, reason: str, where: str) -> None:
        ev = item.event
        raw = msgspec.to_builtins(ev) if ev is not None else item.raw
        project = ev.project if ev is not None else raw_project(item.raw)
        if project is not None and not valid_project(project):
            project = None  # never a key built from a name that breaks the pattern
        event_id = ev.id if ev is not None else _raw_id(item.raw)
        if not where.startswith("$"):
            where = f"$[{item.index}].{where}" if self.batch else f"$.{where}"
        if len(reason) > MAX_REASON_CHARS:  # msgspec quotes a bad value (an enum's) whole
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        if len(where) > MAX_REASON_CHARS:
            where = where[: MAX_REASON_CHARS - 3] + "..."
        self.rejected.append(RejectedEvent(item.index, event_id, reason, where, project))
        if project is not None and event_id is not None:
            record = dead_letter(event_id, project, reason, where, self.now.isoformat(), raw)
            self.dead_letters.setdefault(project, []).append(
                (event_id, record, int(self.now.timestamp() * 1000))
            )


def raw_project(raw: Any) -> str | None:
    """The project an undecodable event names, if it is a valid name."""
    value = raw.get("project") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and valid_project(value) else None


def _raw_id(raw: Any) -> str | None:
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None
