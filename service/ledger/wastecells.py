"""The waste report's cells and facts, folded with the totals from the log entries as stored
(like the log index: the report reads the log's costs as first priced).

A cell sums a day's events the waste rules cannot tell apart (service/waste/cells.py): its
fields in ``wcell:<yyyymmdd>`` are ``c|``/``q|``/``n|`` + the cell (cost nano, quantity micro,
events: sums) and ``s|`` + the cell: msgpack ``[epoch µs, id, ...]``, the first `SAMPLE` of its
events in time order. The cell is sku, category, experiment, the tags dataset, dest_region,
created, reservation, data_class ("" when absent) and the cost's sign, joined by FIELD_SEP.

The facts in ``wfacts``: ``sku|<sku>`` and ``res|<reservation tag>`` -> events (sums), and the
first (time, id) of each ``xf|<experiment>FSEP<sku>`` and ``tf|<dataset>FSEP<dest>FSEP<sku>``
(transfers on ``network.cross_region*`` SKUs), a sample of one. A sample is kept by the fold
script (fold_log.lua: the smallest pairs of the stored and the new ones), a rebuild writes it
whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from .eventlog import CodedLog
from .hashes import WASTE_CELLS, WASTE_FACTS, SumsHash
from .logindex import day_name

__all__ = [
    "FIELD_SEP",
    "SAMPLE",
    "WasteSums",
    "pack_sample",
    "unpack_sample",
]

FIELD_SEP: Final = "\x1f"
SAMPLE: Final = 20  # = service/waste/model.py MAX_EVIDENCE_IDS (tests hold them equal)
_TAGS: Final = ("dataset", "dest_region", "created", "reservation", "data_class")
_CROSS_REGION: Final = "network.cross_region"
_DAY_US: Final = 86_400_000_000
_ids_decoder = msgspec.msgpack.Decoder(list[str])
_tags_decoder = msgspec.msgpack.Decoder(list[dict[str, str] | None])

Pair = tuple[int, str]


def pack_sample(pairs: Iterable[Pair]) -> bytes:
    return msgspec.msgpack.encode([x for pair in pairs for x in pair])


def unpack_sample(raw: bytes) -> list[Pair]:
    flat: list[int | str] = msgspec.msgpack.decode(raw)
    return [(int(flat[i]), str(flat[i + 1])) for i in range(0, len(flat), 2)]


def _keep(have: list[Pair] | None, pair: Pair, keep: int) -> list[Pair]:
    if have is None:
        return [pair]
    if len(have) >= keep and pair >= have[-1]:
        return have
    return sorted({*have, pair})[:keep]


class WasteSums:
    """The waste cells and facts of some log entries: sums, and samples to merge."""

    __slots__ = ("samples", "sums")

    def __init__(self) -> None:
        self.sums: dict[tuple[SumsHash, str], int] = {}
        self.samples: dict[tuple[SumsHash, str], tuple[int, list[Pair]]] = {}

    def _add(self, address: SumsHash, field: str, delta: int) -> None:
        key = (address, field)
        self.sums[key] = self.sums.get(key, 0) + delta

    def _sample(self, address: SumsHash, field: str, pair: Pair, keep: int) -> None:
        have = self.samples.get((address, field))
        self.samples[(address, field)] = (keep, _keep(have[1] if have else None, pair, keep))

    def add_entry(self, entry: CodedLog) -> None:
        """Add one log entry's events (as stored)."""
        ids = _ids_decoder.decode(entry.ids)
        tags_of = _tags_decoder.decode(entry.tags)
        facts = SumsHash(WASTE_FACTS)
        days: dict[int, SumsHash] = {}
        experiments, rates = entry.experiments, entry.rates
        for i, epoch_us in enumerate(entry.epoch_us):
            _, sku, category, _ = rates[entry.rate_codes[i]]
            experiment = experiments[entry.experiment_codes[i]]
            tags = tags_of[i] or {}
            cost = entry.cost_nano[i]
            day = epoch_us // _DAY_US
            address = days.get(day)
            if address is None:
                address = days[day] = SumsHash(WASTE_CELLS, day_name(day))
            cell = (
                FIELD_SEP.join((sku, category, experiment, *(tags.get(t, "") for t in _TAGS)))
                + FIELD_SEP
                + str((cost > 0) - (cost < 0))
            )
            pair = (epoch_us, ids[i])
            self._add(address, "c|" + cell, cost)
            self._add(address, "q|" + cell, entry.quantity_micro[i])
            self._add(address, "n|" + cell, 1)
            self._sample(address, "s|" + cell, pair, SAMPLE)
            self._add(facts, "sku|" + sku, 1)
            if "reservation" in tags:
                self._add(facts, "res|" + tags["reservation"], 1)
            if experiment:
                self._sample(facts, "xf|" + experiment + FIELD_SEP + sku, pair, 1)
            dataset = tags.get("dataset")
            if dataset and sku.startswith(_CROSS_REGION):
                field = FIELD_SEP.join((dataset, tags.get("dest_region", ""), sku))
                self._sample(facts, "tf|" + field, pair, 1)

    def add(self, other: WasteSums) -> None:
        for (address, field), delta in other.sums.items():
            self._add(address, field, delta)
        for (address, field), (keep, pairs) in other.samples.items():
            for pair in pairs:
                self._sample(address, field, pair, keep)

    def increments(self) -> list[tuple[SumsHash, str, int]]:
        return [(address, field, delta) for (address, field), delta in self.sums.items()]

    def merges(self) -> list[tuple[SumsHash, str, int, list[int | str]]]:
        """The samples to merge into the stored ones: (hash, field, how many to keep, pairs
        flat: [epoch µs, id, ...])."""
        return [
            (address, field, keep, [x for pair in pairs for x in pair])
            for (address, field), (keep, pairs) in self.samples.items()
        ]


def parse_cell(text: str) -> tuple[str, str, str, tuple[str, ...], int]:
    """(sku, category, experiment, the five tags, sign) of a cell's field text (after c| ...)."""
    parts = text.split(FIELD_SEP)
    return parts[0], parts[1], parts[2], tuple(parts[3:8]), int(parts[8])


def parse_fact_key(text: str) -> list[str]:
    return text.split(FIELD_SEP)
