"""The one way into ingestion for a posted body: it picks the path and falls back itself.

The usual batch (one project, every event passing the compiled checks, ids distinct) is read
without a datetime or Decimal per event and applied by `Ingestor.ingest_wire`. Any other body,
or one that path declines before writing anything, is decoded item by item, each rejection
with its reason, and applied by `Ingestor.ingest`.
"""

from __future__ import annotations

import anyio.to_thread

from ..auth.model import Principal
from ..events.decoding import (
    TooManyEvents,
    count_events,
    decode_events,
    decode_wire_batch,
    may_exceed,
)
from .report import IngestReport
from .service import CHECK_IN_THREAD_EVENTS, Ingestor

# Bodies larger than this that take the exact path (`decode_events`: every item decoded on
# its own, with its reason) are decoded in a worker thread; the usual batch (the fast path)
# is not, so its cost per event stays as measured (bench/README).
SLOW_DECODE_IN_THREAD_BYTES = 256 * 1024


async def ingest_body(
    ingestor: Ingestor, body: bytes, media_type: str, principal: Principal, max_events: int
) -> IngestReport:
    """Ingest a posted body of `media_type` (one of `CONTENT_TYPES`).

    Raises, before anything is written: TooManyEvents (more than `max_events`), MalformedBody
    (not a body of events at all), and as `Ingestor.ingest` does, ForbiddenProject and
    IngestConflict."""
    if may_exceed(body, media_type, max_events):  # before any event is decoded
        raise TooManyEvents(max_events)
    events = decode_wire_batch(body, media_type)
    if events is not None:
        if len(events) > max_events:
            raise TooManyEvents(max_events)
        report = await ingestor.ingest_wire(events, principal)
        if report is not None:
            return report
    # Counted before any item is decoded (`TooManyEvents`); a large body is read in a thread,
    # so the loop goes on answering meanwhile (this path decodes item by item).
    if (
        len(body) > SLOW_DECODE_IN_THREAD_BYTES
        or count_events(body, media_type, max_events) > CHECK_IN_THREAD_EVENTS
    ):
        items, batch = await anyio.to_thread.run_sync(decode_events, body, media_type, max_events)
    else:
        items, batch = decode_events(body, media_type, max_events)
    if len(items) > max_events:  # not reached: counted above
        raise TooManyEvents(max_events)
    return await ingestor.ingest(items, principal, batch)
