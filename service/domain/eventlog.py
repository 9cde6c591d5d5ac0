"""The accepted-event log: one entry per accepted batch, enough to price every event again
and to fold its totals.

An entry is one zlib-compressed msgpack blob. Since the totals are folded from the log
(service/domain/folding.py) it is written in columns:

    [2, ids, epoch_us, stages, experiments, owners, skus, quantity_micro, tags, cost_nano,
     versions, categories, fixed, attributed]

one list per field, each as long as the batch: `tags` holds the event's tags or nil, `fixed`
is "f" (fixed cost) or "e" (elastic) as the rate card said when the batch was priced, and
`attributed` the tags the project attributed costs by then (canonical text, "" for none), so
a fold needs neither the rate card nor the project's settings. Columns of one field compress
better and encode faster than rows of mixed fields.

Entries written before the fold read the log are rows (format 1, still read):

    [[id, epoch_us, stage, experiment, owner, sku, quantity_micro, tags, cost_nano, version,
      category], ...]
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec

from service.domain.events import EventIn
from service.storage.redis_store import Store

COLUMNS_FORMAT = 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_decoder = msgspec.msgpack.Decoder()


class LogColumns(NamedTuple):
    """One log entry as columns (format 2). `fixed` and `attributed` are empty lists for an
    entry of format 1, which did not record them."""

    ids: list[str]
    epoch_us: list[int]
    stages: list[str]
    experiments: list[str]
    owners: list[str]
    skus: list[str]
    quantity_micro: list[int]
    tags: list[dict[str, str] | None]
    cost_nano: list[int]
    versions: list[int]
    categories: list[str]
    fixed: list[str]
    attributed: list[str]

    @property
    def size(self) -> int:
        """Events in the entry (`len()` of a tuple counts its fields)."""
        return len(self.ids)


class LoggedEvent(NamedTuple):
    """One row of the accepted-event log."""

    id: str
    epoch_us: int
    stage: str
    experiment: str
    owner: str
    sku: str
    quantity_micro: int
    tags: dict[str, str] | None
    cost_nano: int
    version: int
    category: str

    def event(self, project: str) -> EventIn:
        """The event as it was accepted (quantity left out: `quantity_micro` is exact)."""
        return EventIn(
            id=self.id,
            time=_EPOCH + timedelta(microseconds=self.epoch_us),
            project=project,
            sku=self.sku,
            quantity=Decimal(0),
            stage=self.stage,  # type: ignore[arg-type]  # as validated when accepted
            experiment=self.experiment,
            owner=self.owner,
            tags=self.tags or {},
        )


def encode_log(
    events: Sequence[EventIn],
    epoch_us: Sequence[int],
    quantity_micro: Sequence[int],
    cost_nano: Sequence[int],
    versions: Sequence[int],
    categories: Sequence[str],
    fixed: Sequence[str],
    attributed: Sequence[str],
) -> bytes:
    """The log entry of an accepted batch (format 2, columns)."""
    columns = [
        COLUMNS_FORMAT,
        [ev.id for ev in events],
        epoch_us,
        [ev.stage for ev in events],
        [ev.experiment for ev in events],
        [ev.owner for ev in events],
        [ev.sku for ev in events],
        quantity_micro,
        [ev.tags or None for ev in events],
        cost_nano if isinstance(cost_nano, list) else list(cost_nano),  # an array.array
        versions,
        categories,
        fixed,
        attributed,
    ]
    return zlib.compress(msgspec.msgpack.encode(columns), 1)


def decode_log_columns(blob: bytes) -> LogColumns:
    """A log entry (either format) as columns."""
    raw: list[Any] = _decoder.decode(zlib.decompress(blob))
    if raw and raw[0] == COLUMNS_FORMAT:
        return LogColumns(*raw[1:])
    if not raw:
        return LogColumns([], [], [], [], [], [], [], [], [], [], [], [], [])
    columns: list[list[Any]] = [list(column) for column in zip(*raw, strict=True)]
    return LogColumns._make([*columns, [], []])


def decode_log(blob: bytes) -> list[LoggedEvent]:
    """A log entry (either format) as rows."""
    raw: list[Any] = _decoder.decode(zlib.decompress(blob))
    if raw and raw[0] == COLUMNS_FORMAT:
        return [LoggedEvent(*row) for row in zip(*raw[1:12], strict=True)]
    return [LoggedEvent(*row) for row in raw]


async def read_log(
    store: Store, project: str, last: str
) -> AsyncIterator[tuple[str, list[LoggedEvent]]]:
    """Every logged batch of the project up to entry `last`, in the order it was applied."""
    after = "-"
    while last:
        page = await store.log_entries(project, after=after, count=200)
        if not page:
            return
        for entry_id, blob in page:
            after = entry_id
            yield entry_id, decode_log(blob)
            if entry_id == last:
                return
