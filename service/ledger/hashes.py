"""Which hash of sums an increment goes to, named by what it holds, not by its key.

A fold and a rebuild address their increments as (kind, period); only the ledger's store
turns an address into a key (the key schema: service/storage/keys.py).
"""

from __future__ import annotations

from typing import NamedTuple

# The kinds of hashes a fold or a rebuild writes (the period each takes in brackets).
TOTALS = "totals"  # the finest totals of a day (yyyymmdd)
HOURLY = "hourly"  # the hourly cells of a day (yyyymmdd)
DAILY = "daily"  # the daily index (none)
ROLLUP_EVENTS = "rollup_events"  # the events the roll-ups hold (none)
TIER = "tier"  # graduated-tier counters of a month (yyyymm)
BUDGET_SPEND = "budget_spend"  # budget spend per period (none)
BUDGET_DAILY = "budget_daily"  # budget spend per day (none)
LOG_INDEX = "log_index"  # the log entries holding events of each hour of a day (yyyymmdd)
TIER_INDEX = "tier_index"  # each log entry's quantity per rate-card version and SKU (yyyymm)
WASTE_CELLS = "waste_cells"  # the waste report's cells of a day (yyyymmdd)
WASTE_FACTS = "waste_facts"  # the waste rules' facts of the whole log (none)
_ROLLUP = "rollup:"  # + the roll-up's name: one roll-up of a day or month (yyyymmdd, yyyymm)


class SumsHash(NamedTuple):
    """The address of one project's hash of sums."""

    kind: str
    period: str = ""


def rollup_hash(name: str, period: str) -> SumsHash:
    """The address of roll-up `name` of a day (yyyymmdd) or month (yyyymm)."""
    return SumsHash(_ROLLUP + name, period)


def rollup_name(kind: str) -> str | None:
    """The roll-up's name if `kind` is a roll-up's, else None."""
    return kind[len(_ROLLUP) :] if kind.startswith(_ROLLUP) else None
