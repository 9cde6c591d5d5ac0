"""Dead letters: the rejected events kept per project, listed, submitted again or dropped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from ..auth.model import Principal
from ..events.decoding import DecodedItem
from ..events.model import EventIn
from .report import IngestReport, RejectedEvent
from .service import Ingestor

if TYPE_CHECKING:
    from ..stores import Stores


class RejectedRecord(msgspec.Struct):
    """A dead letter. `event` is the rejected event as read; one larger than 8 KiB (as compact
    JSON) is kept only as `excerpt`, its first 8 KiB (`truncated`, `event` null), and cannot
    be replayed: post the fixed event again. `size` and `sha256` are those of the whole event
    as compact JSON (absent on records stored by versions before they were kept)."""

    id: str
    project: str
    reason: str
    field: str | None
    rejected_at: str
    event: Any
    size: int | None = None
    sha256: str | None = None
    truncated: bool = False
    excerpt: str | None = None


class RejectedPage(msgspec.Struct):
    """Answer of `GET /v1/events/rejected`: a page of rejected events and where the next page
    starts."""

    project: str
    items: list[RejectedRecord]
    offset: int
    limit: int
    total: int
    next_offset: int | None
    # `after` for the next page: unlike `next_offset`, it keeps its place when the oldest
    # dead letters are dropped meanwhile (the project's limit).
    next_cursor: str | None = None


class ReplayIn(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `POST /v1/events/rejected/replay`: the ids of the rejected events to submit again
    (all of them when null)."""

    ids: list[str] | None = None  # None: every stored rejected event of the project


class DeleteRejectedIn(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `DELETE /v1/events/rejected`: the ids of the rejected events to drop."""

    ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10_000)]


# A page's `next_cursor`: "<rejected at, epoch ms>:<event id>".
CURSOR_PATTERN = r"^[0-9]{1,16}:.{1,200}$"

_record_decoder = msgspec.json.Decoder(RejectedRecord)
_event_decoder = msgspec.json.Decoder(EventIn)


async def rejected_page(
    store: Stores, project: str, offset: int, limit: int, after: str | None
) -> RejectedPage:
    """A page of the project's dead letters, oldest first: from `offset`, or after the
    cursor `after` (a page's `next_cursor`) when given."""
    cursor = None
    if after is not None:
        when_ms, _, event_id = after.partition(":")
        cursor = (int(when_ms), event_id)
    raws, total, offset, last = await store.rejected.rejected_listing(
        project, offset, limit, cursor
    )
    items = [_record_decoder.decode(r) for r in raws]
    end = offset + limit
    more = end < total
    return RejectedPage(
        project,
        items,
        offset,
        limit,
        total,
        end if more else None,
        f"{last[0]}:{last[1]}" if more and last is not None else None,
    )


async def replay_rejected(
    store: Stores,
    ingestor: Ingestor,
    project: str,
    ids: list[str] | None,
    principal: Principal,
    max_events: int,
) -> IngestReport:
    """Submit stored dead letters again (`ids` None: the oldest `max_events`). Accepted ones
    leave the store; the others stay with their new reason. One kept only as an excerpt
    cannot be submitted: it is reported rejected, saying so. Raises as `Ingestor.ingest`."""
    if ids is None:
        raws, _ = await store.rejected.rejected_page(project, 0, max_events)
    else:
        raws = [r for r in await store.rejected.rejected_records(project, ids) if r]
    items = []
    excerpts: list[RejectedEvent] = []
    for i, raw in enumerate(raws):
        record = _record_decoder.decode(raw)
        if record.truncated:  # only an excerpt is kept: nothing to submit again
            reason = (
                f"only an excerpt of this event is kept ({record.size} bytes, sha256 "
                f"{record.sha256}): post the fixed event again instead"
            )
            excerpts.append(RejectedEvent(i, record.id, reason, "$", record.project))
            continue
        try:
            event = _event_decoder.decode(msgspec.json.encode(record.event))
            items.append(DecodedItem(i, event))
        except msgspec.ValidationError as exc:
            items.append(DecodedItem(i, None, str(exc), "$", record.event))
    report = await ingestor.ingest(items, principal, True)
    if excerpts:
        report.rejected = sorted(report.rejected + excerpts, key=lambda r: r.index)
    return report


async def drop_rejected(store: Stores, project: str, ids: Sequence[str]) -> int:
    """Drop dead letters by id; how many there were."""
    return await store.rejected.delete_rejected(project, ids)
