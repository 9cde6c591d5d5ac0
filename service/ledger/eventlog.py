"""The accepted-event log: one entry per accepted batch, enough to price every event again
and to fold its totals.

An entry is one LZ4-compressed msgpack blob (an LZ4 frame). The totals are folded from the
log (service/ledger/folding.py), so it is written in columns, its labels coded (format 2):

    [2, ids, epoch_us, quantity_micro, cost_nano, tags,
     stages, stage codes, experiments, experiment codes, owners, owner codes,
     rates, rate codes, attributed, attributed codes]

`tags` holds each event's tags or nil. A label column is written as its distinct values (in
order of first appearance) and one code per event (the value's index), so an entry is small
and a fold sums events by integers instead of hashing every event's strings. A rate is
[version, sku, category, fixed]: the rate-card version the event was priced with, its SKU,
the SKU's category and "f" (fixed cost) or "e" (elastic), as the card said then; `attributed`
is the tags the project attributed costs by then (canonical text, "" for none). A fold
therefore needs neither the rate card nor the project's settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

import lz4.frame
import msgspec

from costcore import dictionary_encode

from ..events.model import AcceptedEvent, EventIn

if TYPE_CHECKING:
    from ..stores import Stores

COLUMNS_FORMAT = 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_decoder = msgspec.msgpack.Decoder()
# Format 2 with the ids and tags left undecoded (no object per id: a fold reads only sums).
_coded_decoder = msgspec.msgpack.Decoder(
    tuple[
        int,
        msgspec.Raw,
        list[int],
        list[int],
        list[int],
        msgspec.Raw,
        list[str],
        list[int],
        list[str],
        list[int],
        list[str],
        list[int],
        list[tuple[int, str, str, str]],
        list[int],
        list[str],
        list[int],
    ]
)


class CodedLog(NamedTuple):
    """One log entry (format 2) as written: columns, labels coded (see the module's docstring).
    The ids and tags are left encoded (a fold needs neither; `decode_log` reads them)."""

    ids: msgspec.Raw
    epoch_us: list[int]
    quantity_micro: list[int]
    cost_nano: list[int]
    tags: msgspec.Raw
    stages: list[str]
    stage_codes: list[int]
    experiments: list[str]
    experiment_codes: list[int]
    owners: list[str]
    owner_codes: list[int]
    rates: list[tuple[int, str, str, str]]  # (version, sku, category, fixed)
    rate_codes: list[int]
    attributed: list[str]
    attributed_codes: list[int]


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


# LZ4, not zlib: it compresses a 5,000-event entry about eight times faster (~0.03 µs an event
# against ~0.28) for an entry about 1.5 times larger, so a worker compresses it inline.


def compress_log(data: bytes) -> bytes:
    """A log entry of `encode_log(..., compress=False)`'s bytes."""
    compressed: bytes = lz4.frame.compress(data)
    return compressed


def decompress_log(blob: bytes) -> bytes:
    """The msgpack bytes of a log entry."""
    data: bytes = lz4.frame.decompress(blob)
    return data


def encode_log(
    events: Sequence[AcceptedEvent],
    epoch_us: Sequence[int],
    quantity_micro: Sequence[int],
    cost_nano: Sequence[int],
    rates: Sequence[tuple[int, str, str, str]],
    rate_codes: Sequence[int],
    attributed: Sequence[str],
    compress: bool = True,
) -> bytes:
    """The log entry of an accepted batch (format 2): `rates` are the distinct (version, sku,
    category, fixed) of the batch, `rate_codes` each event's index among them, `attributed`
    each event's attributed tags. Not `compress`ed: msgpack only."""
    stages, stage_codes = dictionary_encode([ev.stage for ev in events])
    experiments, experiment_codes = dictionary_encode([ev.experiment for ev in events])
    owners, owner_codes = dictionary_encode([ev.owner for ev in events])
    attributed_values, attributed_codes = dictionary_encode(attributed)
    columns = [
        COLUMNS_FORMAT,
        [ev.id for ev in events],
        epoch_us,
        quantity_micro,
        cost_nano if isinstance(cost_nano, list) else list(cost_nano),  # an array.array
        [ev.tags or None for ev in events],
        stages,
        stage_codes.tolist(),
        experiments,
        experiment_codes.tolist(),
        owners,
        owner_codes.tolist(),
        rates,
        rate_codes if isinstance(rate_codes, list) else list(rate_codes),
        attributed_values,
        attributed_codes.tolist(),
    ]
    data = msgspec.msgpack.encode(columns)
    return compress_log(data) if compress else data


def decode_log_entry(blob: bytes) -> CodedLog | None:
    """A log entry as written, or None for an entry of another format (none is written)."""
    data = decompress_log(blob)
    try:
        raw = _coded_decoder.decode(data)
    except msgspec.ValidationError:  # an unknown format
        return None
    return CodedLog._make(raw[1:]) if raw[0] == COLUMNS_FORMAT else None


def decode_log(blob: bytes) -> list[LoggedEvent]:
    """A log entry as rows."""
    raw: list[Any] = _decoder.decode(decompress_log(blob))
    if not (raw and raw[0] == COLUMNS_FORMAT):
        raise ValueError(f"a log entry of an unknown format: {raw[:1]!r}")
    e = CodedLog._make(raw[1:])
    stages, experiments, owners, rates = e.stages, e.experiments, e.owners, e.rates
    tags: list[dict[str, str] | None] = raw[5]
    rows = []
    for i, event_id in enumerate(raw[1]):
        version, sku, category, _ = rates[e.rate_codes[i]]
        rows.append(
            LoggedEvent(
                event_id,
                e.epoch_us[i],
                stages[e.stage_codes[i]],
                experiments[e.experiment_codes[i]],
                owners[e.owner_codes[i]],
                sku,
                e.quantity_micro[i],
                tags[i],
                e.cost_nano[i],
                version,
                category,
            )
        )
    return rows


async def read_log_entries(
    store: Stores, project: str, last: str
) -> AsyncIterator[tuple[str, bytes]]:
    """Every log entry (id, blob) of the project up to entry `last`, in the order applied."""
    after = "-"
    while last:
        page = await store.ledger.log_entries(project, after=after, count=200)
        if not page:
            return
        for entry_id, blob in page:
            after = entry_id
            yield entry_id, blob
            if entry_id == last:
                return


async def read_log(
    store: Stores, project: str, last: str
) -> AsyncIterator[tuple[str, list[LoggedEvent]]]:
    """Every logged batch of the project up to entry `last`, in the order it was applied."""
    async for entry_id, blob in read_log_entries(store, project, last):
        yield entry_id, decode_log(blob)
