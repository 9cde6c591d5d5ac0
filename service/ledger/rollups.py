"""Roll-ups: the per-day totals projected onto a few dimensions, per day and per month.

The finest totals (`tot:<day>`: day × stage × experiment × category × SKU × owner ×
fixed/elastic × attributed tags) answer every query, but a 90-day query over them reads
~36,000 fields a day. A roll-up keeps the same sums projected onto a subset of those
dimensions, so a query that groups and filters only by that subset reads a few hundred
fields instead. Every roll-up cell is an exact integer sum of finest cells.

How they stay exact and re-derivable: `rollup_increments` turns the increments of one
priced batch (already aggregated per finest cell by `price_events`) into the roll-up
increments of that batch. Both ingestion and rebuild go through `price_events`, so a
rebuild writes roll-ups equal to the incrementally kept ones
(tests/integration/rebuild/test_rebuild.py).
The roll-up increments ride in the same ingest script as the finest ones, so a batch
lands in both at once or in neither.

Coverage: every batch also adds its event count to `ru:events` (field `ROLLUP_VERSION`). A
query uses roll-ups only when that count equals the project's `accepted` counter, i.e. when
every accepted event is in them; otherwise (data written before roll-ups existed, or by an
older worker during an upgrade) it reads the finest totals, and a rebuild brings the roll-ups
up to date. Changing `ROLLUPS` means bumping `ROLLUP_VERSION`, for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .fields import dims_of, joined_dims
from .hashes import ROLLUP_EVENTS, SumsHash, rollup_hash

# Positions of the dimensions inside a finest cell's dims (see `ingest._dims`).
FINE_DIMS: tuple[str, ...] = ("stage", "experiment", "category", "sku", "owner", "fixed", "tags")
ROLLUP_VERSION = "v1"


@dataclass(frozen=True)
class Rollup:
    name: str  # key segment: tl:{p:P}:ru:<name>:<yyyymmdd | yyyymm>
    dims: tuple[str, ...]  # a subset of FINE_DIMS, in their order
    kinds: str  # which sums it keeps: c(ost), q(uantity: only with sku), n (events)
    monthly: bool  # kept per month as well as per day
    positions: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", tuple(FINE_DIMS.index(d) for d in self.dims))


# Smallest first: the planner takes the first roll-up that covers a query. Cells per day in
# the workload (100 experiments × 20 SKUs × 6 stages, 10 owners, no tags) in brackets;
# what a roll-up costs at ingestion is one increment per cell a batch touches, kind and grain.
ROLLUPS: tuple[Rollup, ...] = (
    # Totals by day, week or month (group_by=day, granularity with no dimension) [1].
    Rollup("all", (), "cn", True),
    # Any mix of stage, category, SKU and fixed/elastic (category and fixed follow the SKU) [120].
    Rollup("sku", ("stage", "category", "sku", "fixed"), "cqn", True),
    # The summary (category, stage, fixed, tag.rework) and tag breakdowns by stage [~30 × tags].
    Rollup("tag", ("stage", "category", "fixed", "tags"), "cn", True),
    # Experiments and owners [100].
    Rollup("exp", ("experiment", "owner"), "cn", True),
    # Experiment or owner × SKU, per day only: per month it would double the largest roll-up's
    # writes, for queries its day grain already answers in a fraction of a second [2,000].
    Rollup("xsku", ("experiment", "category", "sku", "owner", "fixed"), "cqn", False),
)
BY_NAME = {r.name: r for r in ROLLUPS}
_KIND_INDEX = {r.name: tuple("cqn".index(k) for k in r.kinds) for r in ROLLUPS}

# How the sums are formed per batch: each grouping from the smallest one already formed that
# holds its dimensions (finest cells only when none does), so few dict updates happen per
# finest cell. "mid" is an intermediate grouping, not stored. Derived from `ROLLUPS`, so a
# roll-up can be added or dropped there alone.
_DIMS: dict[str, tuple[str, ...]] = {
    "fine": FINE_DIMS,
    "mid": ("stage", "category", "sku", "fixed", "tags"),
    **{r.name: r.dims for r in ROLLUPS},
}


def _derivation() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    from_fine = ["mid"]
    derived: list[tuple[str, str]] = []
    formed = ["mid"]
    for r in sorted(ROLLUPS, key=lambda r: -len(r.dims)):
        sources = [g for g in formed if set(r.dims) <= set(_DIMS[g])]
        if sources:
            derived.append((min(sources, key=lambda g: len(_DIMS[g])), r.name))
        else:
            from_fine.append(r.name)
        formed.append(r.name)
    return tuple(from_fine), tuple(derived)


_FROM_FINE, _DERIVED = _derivation()

_MEMO_LIMIT = 50_000
# Dims text of a grouping -> its projection's dims text (shared strings: few distinct), so a
# recurring cell is split and joined once per process, not once per batch.
_fine_memo: dict[str, tuple[str, ...]] = {}
_memos: dict[tuple[str, str], dict[str, str]] = {pair: {} for pair in _DERIVED}
_canonical: dict[str, str] = {}


def _project(text: str, source: str, target: str) -> str:
    parts = dims_of(text)
    names = _DIMS[source]
    if len(parts) < len(names):  # finest dims written before tags existed
        parts += [""] * (len(names) - len(parts))
    out = joined_dims(parts[names.index(d)] for d in _DIMS[target])
    return _canonical.setdefault(out, out)


def _from_fine(dims: str) -> tuple[str, ...]:
    if len(_fine_memo) >= _MEMO_LIMIT:
        _fine_memo.clear()
        _canonical.clear()
    projected = _fine_memo[dims] = tuple(_project(dims, "fine", t) for t in _FROM_FINE)
    return projected


def _add(into: dict[str, list[int]], text: str, sums: list[int]) -> None:
    have = into.get(text)
    if have is None:
        into[text] = list(sums)
    else:
        have[0] += sums[0]
        have[1] += sums[1]
        have[2] += sums[2]


def covering(needed: Iterable[str], quantity: bool) -> Rollup | None:
    """The smallest roll-up holding every dimension in `needed` (and quantities if asked)."""
    want = set(needed)
    for r in ROLLUPS:
        if want.issubset(r.dims) and (not quantity or "q" in r.kinds):
            return r
    return None


def rollup_increments(
    cells: Sequence[tuple[str, str]],
    costs: Sequence[int],
    quantities: Sequence[int],
    counts: Sequence[int],
) -> list[tuple[SumsHash, str, int]]:
    """The roll-up increments of one priced batch, from its finest cells.

    `cells[g]` is (day, dims) of finest cell g, with its sums `costs[g]`, `quantities[g]`,
    `counts[g]` (as `price_events` aggregates them); cells without events are skipped, as
    they are for the finest totals. Sums per roll-up cell are formed here, so the script gets
    one increment per roll-up cell, kind and grain.
    """
    # day -> grouping name -> dims text -> [cost, quantity, events]
    by_day: dict[str, dict[str, dict[str, list[int]]]] = {}
    last_day = ""
    accs: list[dict[str, list[int]]] = []
    events = 0
    for g, (day, dims) in enumerate(cells):
        count = counts[g]
        if count == 0:
            continue
        if day != last_day:
            groupings = by_day.get(day)
            if groupings is None:
                groupings = by_day[day] = {name: {} for name in _DIMS if name != "fine"}
            accs, last_day = [groupings[name] for name in _FROM_FINE], day
        projected = _fine_memo.get(dims)
        if projected is None:
            projected = _from_fine(dims)
        cost = costs[g]
        qty = quantities[g]
        events += count
        for acc, text in zip(accs, projected, strict=True):
            sums = acc.get(text)
            if sums is None:
                acc[text] = [cost, qty, count]
            else:
                sums[0] += cost
                sums[1] += qty
                sums[2] += count
    if not by_day:
        return []
    for groupings in by_day.values():
        for source, target in _DERIVED:
            memo = _memos[(source, target)]
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            into = groupings[target]
            for text, sums in groupings[source].items():
                projected_text = memo.get(text)
                if projected_text is None:
                    projected_text = memo[text] = _project(text, source, target)
                _add(into, projected_text, sums)
    # Sum the days of one month for the month grain (a batch usually spans one day).
    by_month: dict[str, dict[str, dict[str, list[int]]]] = {}
    out: list[tuple[SumsHash, str, int]] = []
    for day, groupings in by_day.items():
        for r in ROLLUPS:
            _emit(out, rollup_hash(r.name, day), r, groupings[r.name])
        month = by_month.get(day[:6])
        if month is None:
            # The first day's sums serve as the month's: later days of the month add into
            # them only after this day's increments were emitted just above.
            by_month[day[:6]] = groupings
            continue
        for r in ROLLUPS:
            if r.monthly:
                into = month[r.name]
                for text, sums in groupings[r.name].items():
                    _add(into, text, sums)
    for month_name, groupings in by_month.items():
        for r in ROLLUPS:
            if r.monthly:
                _emit(out, rollup_hash(r.name, month_name), r, groupings[r.name])
    out.append((SumsHash(ROLLUP_EVENTS), ROLLUP_VERSION, events))
    return out


def _emit(
    out: list[tuple[SumsHash, str, int]], key: SumsHash, r: Rollup, acc: dict[str, list[int]]
) -> None:
    for i in _KIND_INDEX[r.name]:
        head = "cqn"[i] + "|"
        out += [(key, head + text, sums[i]) for text, sums in acc.items()]


def live_rollups(days: Iterable[str]) -> list[SumsHash]:
    """Every roll-up hash of a project whose finest totals hold these days (for a rebuild)."""
    days = sorted(days)
    months = sorted({d[:6] for d in days})
    hashes = [rollup_hash(r.name, d) for r in ROLLUPS for d in days]
    hashes += [rollup_hash(r.name, m) for r in ROLLUPS if r.monthly for m in months]
    return [*hashes, SumsHash(ROLLUP_EVENTS)]
