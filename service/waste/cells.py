"""What the waste rules read of a project's events: units (whole-day cells or single events)
and the facts the rules need from the whole history.

A *cell* sums the events of one UTC day that the rules cannot tell apart: same SKU, category,
experiment, the five tags the rules read (`WASTE_TAGS`) and sign of the cost (so that a cell's
unclaimed cost is above zero exactly when each of its events' is, as long as no finding split
a day's waste among them: see `scan.claim_share`). It holds their summed quantity (micro) and
cost (nano), their count and a sample of their first `MAX_EVIDENCE_IDS` (epoch µs, id) in time
order; the first `MAX_EVIDENCE_IDS` ids of any set of cells are therefore the first of their
events. A *row* unit is one event (count 1, its own time).

The rules compare event times with sub-day instants only on a few days (`report.row_days`:
the day of `as_of`, an experiment's progress point or recent-spend threshold, a dataset's
first transfer in the window): those days are read as rows, every other day as cells, whose
`epoch_us`..`last_us` is the whole day, on the same side of every such instant as each of
their events.

`WasteFacts` are kept over the whole log (service/ledger/wastecells.py folds them): the SKUs
and `reservation` tag values seen, each (experiment, SKU)'s first event time and each
(dataset, dest_region, SKU)'s first transfer (time, id).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from ..ledger.eventlog import LoggedEvent
from ..ledger.wastecells import unpack_sample
from .days import DAY_US
from .model import CROSS_REGION_PREFIX, MAX_EVIDENCE_IDS

__all__ = [
    "WASTE_TAGS",
    "CellKey",
    "Unit",
    "WasteFacts",
    "cell_key",
    "cells_of_rows",
    "facts_of_rows",
    "merge_sample",
    "row_unit",
    "sample_of",
    "unit_of_cell",
]

WASTE_TAGS: Final = ("dataset", "dest_region", "created", "reservation", "data_class")

# (day, sku, category, experiment, dataset, dest_region, created, reservation, data_class,
# sign of the cost: -1, 0, 1); an absent tag is "" (the rules read "" and absent alike).
CellKey = tuple[int, str, str, str, str, str, str, str, str, int]
Sample = tuple[tuple[int, str], ...]


class Unit(NamedTuple):
    """A cell or an event, as the rules read it (the fields a `LoggedEvent` shares with it)."""

    id: str  # the event's id ("" for a cell)
    epoch_us: int  # the event's time; a cell: its day's first µs
    last_us: int  # the event's time; a cell: its day's last µs
    day: int
    sku: str
    category: str
    experiment: str
    tags: dict[str, str] | None  # the waste tags present (non-empty)
    quantity_micro: int
    cost_nano: int
    events: int
    # the first MAX_EVIDENCE_IDS (epoch µs, id) in time order, or as stored (msgpack, read
    # only for the units of a finding: `sample_of`)
    sample: Sample | bytes


def sample_of(unit: Unit) -> Sample:
    """The unit's sample, read from its stored form if need be."""
    if isinstance(unit.sample, bytes):
        return tuple(unpack_sample(unit.sample))
    return unit.sample


def _sign(cost: int) -> int:
    return (cost > 0) - (cost < 0)


def cell_key(row: LoggedEvent) -> CellKey:
    """The cell an event is summed in."""
    tags = row.tags or {}
    return (
        row.epoch_us // DAY_US,
        row.sku,
        row.category,
        row.experiment,
        tags.get("dataset", ""),
        tags.get("dest_region", ""),
        tags.get("created", ""),
        tags.get("reservation", ""),
        tags.get("data_class", ""),
        _sign(row.cost_nano),
    )


def merge_sample(a: Iterable[tuple[int, str]], b: Iterable[tuple[int, str]]) -> Sample:
    """The first MAX_EVIDENCE_IDS of two samples, in time order."""
    return tuple(sorted({*a, *b})[:MAX_EVIDENCE_IDS])


def _waste_tags(key: CellKey) -> dict[str, str] | None:
    tags = {name: value for name, value in zip(WASTE_TAGS, key[4:9], strict=True) if value}
    return tags or None


def unit_of_cell(
    key: CellKey, quantity: int, cost: int, count: int, sample: Sample | bytes
) -> Unit:
    day = key[0]
    return Unit(
        "",
        day * DAY_US,
        (day + 1) * DAY_US - 1,
        day,
        key[1],
        key[2],
        key[3],
        _waste_tags(key),
        quantity,
        cost,
        count,
        sample,
    )


def row_unit(row: LoggedEvent) -> Unit:
    """One event as a unit of its own."""
    key = cell_key(row)
    return Unit(
        row.id,
        row.epoch_us,
        row.epoch_us,
        key[0],
        row.sku,
        row.category,
        row.experiment,
        _waste_tags(key),
        row.quantity_micro,
        row.cost_nano,
        1,
        ((row.epoch_us, row.id),),
    )


class CellSum:
    """One cell's sums while folding: quantity, cost, count, sample."""

    __slots__ = ("cost", "count", "quantity", "sample")

    def __init__(self) -> None:
        self.quantity = self.cost = self.count = 0
        self.sample: Sample = ()


def cells_of_rows(rows: Iterable[LoggedEvent]) -> dict[CellKey, CellSum]:
    """The cells of these events."""
    cells: dict[CellKey, CellSum] = {}
    for row in rows:
        key = cell_key(row)
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = CellSum()
        cell.quantity += row.quantity_micro
        cell.cost += row.cost_nano
        cell.count += 1
        if len(cell.sample) < MAX_EVIDENCE_IDS or (row.epoch_us, row.id) < cell.sample[-1]:
            cell.sample = merge_sample(cell.sample, ((row.epoch_us, row.id),))
    return cells


@dataclass
class WasteFacts:
    """What the rules need of the whole history (see the module doc)."""

    skus: set[str] = field(default_factory=set)
    reservations: set[str] = field(default_factory=set)
    experiment_first: dict[tuple[str, str], int] = field(default_factory=dict)
    transfer_first: dict[tuple[str, str, str], tuple[int, str]] = field(default_factory=dict)

    def add(self, row: LoggedEvent) -> None:
        self.skus.add(row.sku)
        tags = row.tags or {}
        reservation = tags.get("reservation")
        if reservation:  # (an empty one names no fixed SKU)
            self.reservations.add(reservation)
        if row.experiment:
            key = (row.experiment, row.sku)
            have = self.experiment_first.get(key)
            if have is None or row.epoch_us < have:
                self.experiment_first[key] = row.epoch_us
        dataset = tags.get("dataset")
        if dataset and row.sku.startswith(CROSS_REGION_PREFIX):
            transfer = (dataset, tags.get("dest_region", ""), row.sku)
            first = self.transfer_first.get(transfer)
            if first is None or (row.epoch_us, row.id) < first:
                self.transfer_first[transfer] = (row.epoch_us, row.id)


def facts_of_rows(rows: Iterable[LoggedEvent]) -> WasteFacts:
    facts = WasteFacts()
    for row in rows:
        facts.add(row)
    return facts
