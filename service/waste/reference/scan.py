"""One waste report's scan of a project's events, shared by every waste rule.

`Scan` holds the events in time order with their UTC days, the report window and reference
days, and how much of each event's cost a finding has already claimed: a rule counts only
an event's unclaimed (`net`) cost and claims what it reports, so no cost is counted twice.
`new_finding` turns a rule's waste into a `Finding` with its evidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from costcore.money import format_money, format_quantity

from ...ledger.eventlog import LoggedEvent
from ...ratecards.model import PricedSku
from ..days import date_of
from ..model import (
    CROSS_REGION_PREFIX,
    MAX_EVIDENCE_IDS,
    DayLine,
    Evidence,
    Finding,
    FindingWindow,
    Kind,
    WastePolicy,
)

__all__ = [
    "Found",
    "Scan",
    "allocate",
    "claim_by_day",
    "claim_share",
    "is_logging",
    "is_storage",
    "new_finding",
]


def allocate(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` over `weights` proportionally, exactly (largest remainder, ties first)."""
    whole = sum(weights)
    if whole <= 0 or total <= 0:
        return [0] * len(weights)
    shares = [total * w // whole for w in weights]
    rest = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda k: (-(total * weights[k] % whole), k))
    for k in order[:rest]:
        shares[k] += 1
    return shares


@dataclass
class Scan:
    """One report's events in time order (`rows`, with their UTC `days`), its window and
    reference days, and per event the cost already claimed by a finding."""

    rows: list[LoggedEvent]
    days: list[int]
    skus: Mapping[str, PricedSku]
    policy: WastePolicy
    currency: str
    first_day: int
    last_day: int
    today: int
    last_full_day: int  # last day of the window that is over at `now` (may be < first_day)
    rate_day: int
    as_of_us: int
    claimed: list[int] = field(default_factory=list)
    past_retention: set[int] = field(default_factory=set)  # left out of checkpoint growth

    def fixed(self, sku: str) -> bool:
        s = self.skus.get(sku)
        return s is not None and s.fixed

    def unit(self, sku: str) -> str:
        s = self.skus.get(sku)
        return s.unit if s is not None else "unit"

    def in_window(self, i: int) -> bool:
        return self.first_day <= self.days[i] <= self.last_day

    def net(self, i: int) -> int:
        """The event's cost not yet claimed by a finding."""
        return self.rows[i].cost_nano - self.claimed[i]

    def ids(self, indexes: Iterable[int]) -> tuple[list[str], int]:
        ordered = sorted(indexes)  # rows are in time order
        return [self.rows[i].id for i in ordered[:MAX_EVIDENCE_IDS]], len(ordered)


@dataclass
class Found:
    """A finding with its cost so far and per day (nano), for sorting and the totals."""

    cost: int
    per_day: int
    finding: Finding


def claim_by_day(
    ctx: Scan, indexes: Sequence[int]
) -> tuple[dict[int, int], dict[int, int], list[tuple[int, int, DayLine]]]:
    """Claim the unclaimed cost of these events as waste: quantity and cost per day, and the
    per-day evidence lines."""
    by_day_q: dict[int, int] = defaultdict(int)
    by_day_c: dict[int, int] = defaultdict(int)
    for i in indexes:
        cost = ctx.net(i)
        ctx.claimed[i] += cost
        by_day_q[ctx.days[i]] += ctx.rows[i].quantity_micro
        by_day_c[ctx.days[i]] += cost
    lines = [
        (
            d,
            by_day_c[d],
            DayLine(
                day=date_of(d),
                quantity=format_quantity(by_day_q[d]),
                cost=format_money(by_day_c[d]),
            ),
        )
        for d in by_day_q
    ]
    return by_day_q, by_day_c, lines


def claim_share(
    ctx: Scan,
    indexes: Sequence[int],
    day: int,
    waste: int,
    excess: int,
    expected: int,
    actual: int,
) -> tuple[int, int, DayLine]:
    """Claim `waste` of these events' cost (spread by their unclaimed cost), for a day whose
    quantity `actual` ran `excess` over `expected`; the evidence line of that day."""
    for i, share in zip(indexes, allocate(waste, [ctx.net(i) for i in indexes]), strict=True):
        ctx.claimed[i] += share
    line = DayLine(
        day=date_of(day),
        quantity=format_quantity(excess),
        cost=format_money(waste),
        expected=format_quantity(expected),
        actual=format_quantity(actual),
    )
    return day, waste, line


def new_finding(
    ctx: Scan,
    kind: Kind,
    title: str,
    cost: int,
    per_day: int,
    keys: dict[str, str],
    indexes: Iterable[int],
    days: list[tuple[int, int, DayLine]],  # (day, waste cost, line)
    action: str,
    window: tuple[int, int] | None = None,
) -> Found:
    """A rule's finding with its evidence; `window` defaults to the first and last day with
    waste cost."""
    event_ids, count = ctx.ids(indexes)
    if window is None:
        costly = [d for d, c, _ in days if c > 0]
        window = (min(costly), max(costly))
    return Found(
        cost,
        per_day,
        Finding(
            kind=kind,
            title=title,
            cost_so_far=format_money(cost),
            cost_per_day_if_left=format_money(per_day),
            currency=ctx.currency,
            evidence=Evidence(
                keys=keys,
                event_ids=event_ids,
                event_count=count,
                days=[line for _, _, line in sorted(days, key=lambda x: x[0])],
            ),
            action=action,
            window=FindingWindow(start=date_of(window[0]), end=date_of(window[1])),
        ),
    )


def is_storage(ctx: Scan, i: int) -> bool:
    """Whether the event is storage the storage rules check (not fixed, not a transfer)."""
    row = ctx.rows[i]
    return (
        row.category == "storage"
        and not ctx.fixed(row.sku)
        and not row.sku.startswith(CROSS_REGION_PREFIX)
    )


def is_logging(ctx: Scan, i: int) -> bool:
    """Whether the event is logging the log rules check (not fixed, not a transfer)."""
    row = ctx.rows[i]
    return (
        row.category == "logging"
        and not ctx.fixed(row.sku)
        and not row.sku.startswith(CROSS_REGION_PREFIX)
    )
