"""Which kept totals a cost query reads (`plan_reads`).

Totals are kept at two grains, both exact integer sums of the events:

* per day × stage × experiment × category × SKU × owner × fixed/elastic × attributed tags —
  every coarser answer by day, week (ISO, Monday first) or month is a sum of these;
* per hour × stage × category × fixed/elastic — for hour granularity and hourly peaks;

plus roll-ups of the first onto a few dimensions, per day and per month (rollups.py). A
query reads the smallest roll-up holding its group_by and filters — whole months from the
month roll-ups, the other days from the day ones — and the finest totals only when none does
or when the roll-ups do not yet hold every accepted event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from ..ledger.rollups import FINE_DIMS, covering
from .query import CostQuery

# Sources whose hashes hold thousands of cells a day: there, fields a query does not need are
# left on the server (HSCAN MATCH), and quantities (and event counts, when the rows are not
# ranked by them) are read for the rows of the page only.
BIG_SOURCES = frozenset({"tot", "xsku"})


@dataclass(frozen=True)
class ReadPlan:
    """What a query reads: one source (a roll-up, or the finest totals `tot`), at day grain
    for `days` and at month grain for `months` (months the range covers whole)."""

    source: str
    dims: tuple[str, ...]  # the dimensions of the source's fields, in their order
    days: list[str]  # yyyymmdd
    months: list[str]  # yyyymm


def _needed(query: CostQuery) -> set[str]:
    needed = {"tags" if n.startswith("tag.") else n for n in query.group_by if n != "day"}
    needed.update(query.filters)
    if query.tag_filters:
        needed.add("tags")
    return needed


def _whole_month(month: str, query: CostQuery) -> bool:
    first = date(int(month[:4]), int(month[4:]), 1)
    nxt = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return (query.from_day is None or query.from_day <= first) and (
        query.to_day is None or query.to_day >= nxt
    )


def plan_reads(query: CostQuery, days: Sequence[str], rollups_complete: bool) -> ReadPlan:
    """The smallest source that covers the query's group_by and filters, and the periods to
    read from it: whole months from month roll-ups, the other days from day roll-ups."""
    rollup = covering(_needed(query), "sku" in query.group_by) if rollups_complete else None
    if rollup is None:
        return ReadPlan("tot", FINE_DIMS, list(days), [])
    if not rollup.monthly or "day" in query.group_by or query.granularity in ("day", "week"):
        return ReadPlan(rollup.name, rollup.dims, list(days), [])
    whole = {m for m in {d[:6] for d in days} if _whole_month(m, query)}
    return ReadPlan(
        rollup.name, rollup.dims, [d for d in days if d[:6] not in whole], sorted(whole)
    )
