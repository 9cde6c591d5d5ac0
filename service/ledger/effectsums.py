"""The cost-effect sums: what the cost-effect report needs of each experiment, kept at fold time.

The report (service/evaluations/effect.py) sums, per experiment, the events that carry one,
under optional stage and owner filters: the cost, split by category and stage, the events, the
quantity of the accelerator SKUs (those the rate card gives `power_watts`, decided when the
report is read), and the cost over time (the rework exposure: the cost from a restart point
on). The finest totals hold all of it, at ~cells of a day × days fields; these sums keep it
projected onto the few dimensions the report reads, per day and per month, in two roll-up
hashes (keys ``ru:eff:<period>`` and ``ru:effq:<period>``, service/storage/keys.py):

* `EFFECT` (``eff``): ``c|`` cost and ``n|`` events of each experiment × stage × owner ×
  category (the events' field makes a category or stage whose events cost nothing appear, as
  it does in the report);
* `EFFECT_QUANTITY` (``effq``): ``q|`` quantity of each experiment × stage × owner × SKU,
  read only for the accelerator SKUs (by field, HMGET), so the report reads few of them.

Events without an experiment are not kept (the report leaves them out). Like the roll-ups
(rollups.py) they are summed from a fold's finest cells, so ingestion and a rebuild
(`CellSums.increments`, both) write the same sums; their coverage is the field
`EFFECT_VERSION` of the roll-ups' event count (``ru:events``): a read uses them only when it
equals the events the totals hold (data folded before these sums existed: the finest totals,
until the project's next rebuild). Changing the fields means a new `EFFECT_VERSION`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .fields import dims_of, joined_dims
from .hashes import ROLLUP_EVENTS, SumsHash, rollup_hash

EFFECT = "eff"
EFFECT_QUANTITY = "effq"
EFFECT_VERSION = "eff1"

# Positions in a finest cell's dims (rollups.FINE_DIMS): stage, experiment, category, SKU,
# owner (then fixed and tags, not kept here).
_STAGE, _EXPERIMENT, _CATEGORY, _SKU, _OWNER = range(5)
_GLOB = re.compile(r"[*?\[\]\\]")


def cost_dims(experiment: str, stage: str, owner: str, category: str) -> str:
    """The dims of an `EFFECT` field (after ``c|`` or ``n|``)."""
    return joined_dims((experiment, stage, owner, category))


def quantity_field(experiment: str, stage: str, owner: str, sku: str) -> str:
    """An `EFFECT_QUANTITY` field."""
    return "q|" + joined_dims((experiment, stage, owner, sku))


def experiment_costs_match(experiment: str) -> str:
    """The glob matching the ``c|`` fields of one experiment in an `EFFECT` hash."""
    return "c|" + joined_dims((_GLOB.sub(r"\\\g<0>", experiment), "*"))


def parse_cost_dims(text: str) -> tuple[str, str, str, str]:
    """(experiment, stage, owner, category) of an `EFFECT` field's dims (`cost_dims`)."""
    experiment, stage, owner, category = dims_of(text)
    return experiment, stage, owner, category


_MEMO_LIMIT = 50_000
# A finest cell's dims -> its three fields here (() without an experiment): cells recur fold
# after fold, so each is split and joined once per process.
_memo: dict[str, tuple[str, ...]] = {}


def _spelled(dims: str) -> tuple[str, ...]:
    if len(_memo) >= _MEMO_LIMIT:
        _memo.clear()
    parts = dims_of(dims)
    if len(parts) <= _OWNER:  # short dims (as rollups.py reads them): the rest empty
        parts += [""] * (_OWNER + 1 - len(parts))
    experiment = parts[_EXPERIMENT]
    if not experiment:
        spelled: tuple[str, ...] = ()
    else:
        stage, owner = parts[_STAGE], parts[_OWNER]
        text = cost_dims(experiment, stage, owner, parts[_CATEGORY])
        spelled = ("c|" + text, "n|" + text, quantity_field(experiment, stage, owner, parts[_SKU]))
    _memo[dims] = spelled
    return spelled


def effect_increments(
    cells: Sequence[tuple[str, str]],
    costs: Sequence[int],
    quantities: Sequence[int],
    counts: Sequence[int],
) -> list[tuple[SumsHash, str, int]]:
    """The cost-effect sums of one fold's finest cells (`cells[g]` = (yyyymmdd, dims) with its
    sums `costs[g]`, `quantities[g]`, `counts[g]`), per day and per month, and their event
    count (every event of the cells, with an experiment or not)."""
    # period -> ({c| and n| field: delta}, {q| field: delta}): days first, then their months
    by_day: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    events = 0
    last_day = ""
    sums: dict[str, int] = {}
    quantity_sums: dict[str, int] = {}
    for (day, dims), cost, quantity, count in zip(cells, costs, quantities, counts, strict=True):
        if not count:
            continue
        events += count
        spelled = _memo.get(dims)
        if spelled is None:
            spelled = _spelled(dims)
        if not spelled:  # no experiment
            continue
        if day != last_day:
            sums, quantity_sums = by_day.setdefault(day, ({}, {}))
            last_day = day
        c_field, n_field, q_field = spelled
        sums[c_field] = sums.get(c_field, 0) + cost
        sums[n_field] = sums.get(n_field, 0) + count
        quantity_sums[q_field] = quantity_sums.get(q_field, 0) + quantity
    by_period = dict(by_day)
    for day, (day_sums, day_quantities) in by_day.items():
        month = by_period.get(day[:6])
        if month is None:
            by_period[day[:6]] = (dict(day_sums), dict(day_quantities))
            continue
        for into, source in zip(month, (day_sums, day_quantities), strict=True):
            for field, delta in source.items():
                into[field] = into.get(field, 0) + delta
    out: list[tuple[SumsHash, str, int]] = []
    for period, (period_sums, period_quantities) in by_period.items():
        key, quantity_key = rollup_hash(EFFECT, period), rollup_hash(EFFECT_QUANTITY, period)
        out += [(key, field, delta) for field, delta in period_sums.items()]
        out += [(quantity_key, field, delta) for field, delta in period_quantities.items()]
    if events:
        out.append((SumsHash(ROLLUP_EVENTS), EFFECT_VERSION, events))
    return out


def live_effect_sums(days: Iterable[str]) -> list[SumsHash]:
    """Every cost-effect hash of a project whose totals hold these days (for a rebuild)."""
    days = sorted(days)
    periods = days + sorted({d[:6] for d in days})
    return [rollup_hash(name, p) for name in (EFFECT, EFFECT_QUANTITY) for p in periods]
