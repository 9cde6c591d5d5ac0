"""What the client sends and reads: events (the server's own `EventIn`, or plain mappings)
and the ingest report, read leniently (a newer server may add fields)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import msgspec

from ..events.model import EventIn

Event: TypeAlias = EventIn | Mapping[str, Any]
NDJSON = "application/x-ndjson"
_encoder = msgspec.json.Encoder(decimal_format="string")


class RejectedEvent(msgspec.Struct):
    """An event the service refused, with why; it is kept as a dead letter
    (`GET /v1/events/rejected`), so sending it again changes nothing."""

    index: int
    id: str | None
    reason: str
    field: str | None = None
    project: str | None = None


class IngestReport(msgspec.Struct):
    """The answer to a post: accepted (newly counted), duplicates (already counted, by id),
    rejected. `cost_by_project`: the accepted events' cost, exact decimal strings."""

    accepted: int
    duplicates: int
    rejected: list[RejectedEvent] = msgspec.field(default_factory=list)
    cost_by_project: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def answered(self) -> int:
        return self.accepted + self.duplicates + len(self.rejected)

    def add(self, other: IngestReport, offset: int) -> None:
        """Fold in the report of the batch that started at event `offset` of this one."""
        self.accepted += other.accepted
        self.duplicates += other.duplicates
        for item in other.rejected:
            self.rejected.append(msgspec.structs.replace(item, index=item.index + offset))
        for project, cost in other.cost_by_project.items():
            self.cost_by_project[project] = _add_decimal(self.cost_by_project.get(project), cost)


def _add_decimal(a: str | None, b: str) -> str:
    from decimal import Decimal

    return b if a is None else str(Decimal(a) + Decimal(b))


def event_list(events: Event | Iterable[Event]) -> list[Event]:
    """One event (a struct or a mapping) as a list of one; many as a list."""
    if isinstance(events, EventIn | Mapping):
        return [events]
    return list(events)


def encode_event(event: Event) -> bytes:
    """One event as compact JSON (Decimal quantities as strings, times as RFC 3339)."""
    if isinstance(event, EventIn):
        return _encoder.encode(event)
    return _encoder.encode(dict(event))


def ndjson(lines: Iterable[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n"


def read_report(body: bytes) -> IngestReport | None:
    """The ingest report in an answer (a 200, or the 422 when every event was rejected),
    None when the body is some other problem."""
    try:
        return msgspec.json.decode(body, type=IngestReport)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError:
        return None
