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

import heapq
from collections.abc import Iterable
from typing import Final

import msgspec

from ..storage.keys import FIELD_SEP
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

SAMPLE: Final = 20  # = service/waste/model.py MAX_EVIDENCE_IDS (tests hold them equal)
_TAGS: Final = ("dataset", "dest_region", "created", "reservation", "data_class")
_CROSS_REGION: Final = "network.cross_region"
_DAY_US: Final = 86_400_000_000
_NO_TAGS: Final = ("", "", "", "", "")
_ids_decoder = msgspec.msgpack.Decoder(list[str])
_tags_decoder = msgspec.msgpack.Decoder(list[dict[str, str] | None])

Pair = tuple[int, str]


def pack_sample(pairs: Iterable[Pair]) -> bytes:
    return msgspec.msgpack.encode([x for pair in pairs for x in pair])


def unpack_sample(raw: bytes) -> list[Pair]:
    flat: list[int | str] = msgspec.msgpack.decode(raw)
    return list(zip(flat[::2], flat[1::2], strict=True))  # type: ignore[arg-type]


class WasteSums:
    """The waste cells and facts of some log entries: sums, and samples to merge."""

    __slots__ = ("samples", "sums")

    def __init__(self) -> None:
        self.sums: dict[tuple[SumsHash, str], int] = {}
        self.samples: dict[tuple[SumsHash, str], tuple[int, list[Pair]]] = {}

    def _add(self, address: SumsHash, field: str, delta: int) -> None:
        key = (address, field)
        self.sums[key] = self.sums.get(key, 0) + delta

    def add_entry(self, entry: CodedLog) -> None:
        """Add one log entry's events (as stored): grouped by their codes first, so that the
        per-event work is one tuple and one dict lookup (the fold's cost per event)."""
        ids = _ids_decoder.decode(entry.ids)
        tags_of = _tags_decoder.decode(entry.tags)
        costs, epochs = entry.cost_nano, entry.epoch_us
        groups: dict[tuple[int, int, int, tuple[str, ...], int], list[int]] = {}
        get, no_tags, day_us = groups.get, _NO_TAGS, _DAY_US
        # zip without strict: the columns are one length by construction (the hot loop)
        for i, (epoch_us, rate, coded_experiment, cost, tags) in enumerate(
            zip(epochs, entry.rate_codes, entry.experiment_codes, costs, tags_of)  # noqa: B905
        ):
            key = (
                epoch_us // day_us,
                rate,
                coded_experiment,
                tuple([tags.get(t, "") for t in _TAGS]) if tags else no_tags,
                (cost > 0) - (cost < 0),
            )
            members = get(key)
            if members is None:
                groups[key] = [i]
            else:
                members.append(i)
        facts = SumsHash(WASTE_FACTS)
        quantities = entry.quantity_micro
        for (day, rate, experiment_code, waste_tags, sign), members in groups.items():
            _, sku, category, _ = entry.rates[rate]
            experiment = entry.experiments[experiment_code]
            address = SumsHash(WASTE_CELLS, day_name(day))
            cell = FIELD_SEP.join((sku, category, experiment, *waste_tags, str(sign)))
            self._add(address, "c|" + cell, sum(costs[i] for i in members))
            self._add(address, "q|" + cell, sum(quantities[i] for i in members))
            self._add(address, "n|" + cell, len(members))
            pairs = [(epochs[i], ids[i]) for i in members]
            first = sorted(pairs) if len(pairs) <= SAMPLE else heapq.nsmallest(SAMPLE, pairs)
            self._samples(address, "s|" + cell, first, SAMPLE)
            self._add(facts, "sku|" + sku, len(members))
            dataset, region, _, reservation, _ = waste_tags
            if reservation:  # (an empty one names no fixed SKU)
                self._add(facts, "res|" + reservation, len(members))
            if experiment:
                self._samples(facts, "xf|" + experiment + FIELD_SEP + sku, first[:1], 1)
            if dataset and sku.startswith(_CROSS_REGION):
                field = FIELD_SEP.join((dataset, region, sku))
                self._samples(facts, "tf|" + field, first[:1], 1)

    def _samples(self, address: SumsHash, field: str, pairs: list[Pair], keep: int) -> None:
        have = self.samples.get((address, field))
        if have is None:
            self.samples[(address, field)] = (keep, pairs[:keep])
        else:
            self.samples[(address, field)] = (keep, sorted({*have[1], *pairs})[:keep])

    def add(self, other: WasteSums) -> None:
        for (address, field), delta in other.sums.items():
            self._add(address, field, delta)
        for (address, field), (keep, pairs) in other.samples.items():
            self._samples(address, field, pairs, keep)

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
