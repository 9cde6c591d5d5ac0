"""The FOCUS export aggregated per charge period, as providers' own exports are: one row per
UTC hour or UTC day × everything else a row shows (SKU, its price and tier, rate-card
version, category, stage, experiment, owner, tags), instead of one row per event.

A group's rows are the per-event rows (focus.py) merged when all their cells but the
quantities and the event's own (``x_EventId``, ``x_EventTime``: null here) are equal; its
BilledCost, EffectiveCost, ConsumedQuantity and PricingQuantity are the exact integer sums
of its events' (nano-currency, micro-units), and its ListCost and ContractedCost the exact
product of its one unit price and the summed quantity, which is the sum of the events' own.
ChargePeriodStart/End span the whole hour or day (an export window that starts or ends
inside one selects events by their time, as the per-event export does); the billing period
is the month that holds it. So each aggregated file's sums equal the per-event file's.

Memory: the periods are read one at a time, in time order, through the log index
(`ranges.event_hours`: the hours holding events; each period's read fetches only the log
entries holding its events), and a period's rows are written before the next is read. An
export holds one period's groups (at most one per distinct SKU, price, tier and
dimensions × tags combination that period), one page of the log, a month of the log
index's fields and, for a graduated price, the tier index's fields of the period's month
(read once per month, `FocusExport.tier_fields`); never the window's rows. A log from
before the index (meta ``logix`` unset until a rebuild) has no hours to name: every period
of the range is then read, each a read of the whole log, so bounded in memory but slow
until a rebuild indexes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from ..ledger.eventlog import LoggedEvent
from ..ledger.ranges import event_hours
from ..ratecards.model import PricedSku, RateCardVersion
from .focus import HEADER, Cell, RowContext, focus_row, format_instant
from .pricing import Segment

if TYPE_CHECKING:
    from ..stores import Stores

Granularity = Literal["event", "hour", "day"]
GRANULARITIES: tuple[Granularity, ...] = ("event", "hour", "day")
PERIOD_HOURS: dict[str, int] = {"hour": 1, "day": 24}
# One priced part of an event: the event, its rate-card version and SKU, and the part.
Part = tuple[LoggedEvent, RateCardVersion, PricedSku, Segment]

_HOUR_US = 3_600_000_000
_START, _END = HEADER.index("ChargePeriodStart"), HEADER.index("ChargePeriodEnd")
_EVENT_ID, _EVENT_TIME = HEADER.index("x_EventId"), HEADER.index("x_EventTime")


@dataclass
class Group:
    """The parts of one period that share every cell but the quantities: the first part,
    and the running sums."""

    first: Part
    quantity_micro: int
    billed_nano: int


def group_key(row: LoggedEvent, seg: Segment) -> tuple[object, ...]:
    """What a row shows besides its quantities, its event and its time: equal keys in one
    period give equal cells (the version and SKU code fix the currency and the SKU)."""
    tags = tuple(sorted(row.tags.items())) if row.tags else ()
    return (
        row.version,
        row.sku,
        row.category,
        row.stage,
        row.experiment or "",
        row.owner or "",
        tags,
        -1 if seg.tier is None else seg.tier,
        seg.unit_price_nano,
        seg.tier_from_micro,
        -1 if seg.tier_upto_micro is None else seg.tier_upto_micro,
    )


def add_part(groups: dict[tuple[object, ...], Group], part: Part) -> None:
    """Sum one part into its group (exact integers)."""
    row, _, _, seg = part
    key = group_key(row, seg)
    group = groups.get(key)
    if group is None:
        groups[key] = Group(part, seg.quantity_micro, seg.billed_nano)
    else:
        group.quantity_micro += seg.quantity_micro
        group.billed_nano += seg.billed_nano


def group_row(ctx: RowContext, group: Group, start_us: int, end_us: int) -> list[Cell]:
    """The cells of one aggregated row, in ``HEADER`` order."""
    row, version, sku, seg = group.first
    summed = replace(seg, quantity_micro=group.quantity_micro, billed_nano=group.billed_nano)
    cells = focus_row(ctx, row, version, sku, summed)
    cells[_START], cells[_END] = format_instant(start_us), format_instant(end_us)
    cells[_EVENT_ID] = cells[_EVENT_TIME] = None
    return cells


async def aggregated_rows(
    store: Stores,
    ctx: RowContext,
    last_entry: str,
    parts: Callable[[int | None, int | None], AsyncIterator[Part]],
    start_us: int | None,
    end_us: int | None,
    granularity: Granularity,
) -> AsyncIterator[list[Cell]]:
    """The rows of [start_us, end_us) per charge period, period by period in time order;
    `parts` reads the priced parts of a window (FocusExport.parts)."""
    period_us = PERIOD_HOURS[granularity] * _HOUR_US
    done: int | None = None
    async for hour in event_hours(store, ctx.project, last_entry, start_us, end_us):
        period = hour * _HOUR_US // period_us
        if period == done:
            continue
        done = period
        p_start, p_end = period * period_us, (period + 1) * period_us
        lo = p_start if start_us is None else max(p_start, start_us)
        hi = p_end if end_us is None else min(p_end, end_us)
        groups: dict[tuple[object, ...], Group] = {}
        async for part in parts(lo, hi):
            add_part(groups, part)
        for group in groups.values():
            yield group_row(ctx, group, p_start, p_end)
