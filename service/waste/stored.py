"""The waste cells and facts as the fold stored them (service/ledger/wastecells.py), read back
as the rules' units and facts (`cells`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..ledger.wastecells import parse_cell, parse_fact_key, unpack_sample
from ..storage.replies import as_text
from .cells import CellKey, Unit, WasteFacts, unit_of_cell

__all__ = ["facts_of_fields", "units_of_fields"]


def units_of_fields(day: int, fields: Mapping[bytes, bytes]) -> list[Unit]:
    """The cells of one day's ``wcell`` hash."""
    sums: dict[str, list[int]] = {}
    samples: dict[str, bytes] = {}
    for raw, value in fields.items():
        name = as_text(raw)
        kind, cell = name[:2], name[2:]
        if kind == "s|":
            samples[cell] = value  # read only if a finding shows the cell
            continue
        have = sums.setdefault(cell, [0, 0, 0])
        have["cqn".index(kind[0])] = int(value)
    units = []
    for cell, (cost, quantity, count) in sums.items():
        if not count:
            continue
        sku, category, experiment, tags, sign = parse_cell(cell)
        key: CellKey = (day, sku, category, experiment, *tags, sign)  # type: ignore[assignment]
        units.append(unit_of_cell(key, quantity, cost, count, samples.get(cell, ())))
    return units


def facts_of_fields(fields: Mapping[bytes, bytes]) -> WasteFacts:
    facts = WasteFacts()
    for raw, value in fields.items():
        kind, _, rest = as_text(raw).partition("|")
        if kind == "sku":
            facts.skus.add(rest)
        elif kind == "res":
            facts.reservations.add(rest)
        elif kind == "xf":
            experiment, sku = parse_fact_key(rest)
            facts.experiment_first[(experiment, sku)] = unpack_sample(value)[0][0]
        elif kind == "tf":
            dataset, region, sku = parse_fact_key(rest)
            facts.transfer_first[(dataset, region, sku)] = unpack_sample(value)[0]
    return facts
