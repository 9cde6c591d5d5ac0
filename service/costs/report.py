"""The cost report: a query's groups, ranked, cut to a page, with their totals."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING

import msgspec

from costcore.money import format_money, format_quantity

from ..projects.service import project_settings
from .grouping import Events, PageReads, Quantities, Row, Sums, group_sums, read_state
from .query import CostQuery, Granularity, in_range, iso_day, validate

if TYPE_CHECKING:
    from ..stores import Stores


class CostRow(msgspec.Struct, omit_defaults=False):
    """One group of costs: its key (a value per grouping dimension), its cost and event count;
    quantity and unit when grouped by SKU."""

    key: dict[str, str]
    cost: str
    currency: str | None
    events: int
    # Quantity and unit only make sense when the rows are split by SKU.
    quantity: str | None = None
    unit: str | None = None


class CostReport(msgspec.Struct):
    """Answer of `GET /v1/costs`: the rows of costs grouped by the dimensions asked for, and their
    total."""

    project: str
    currency: str | None
    from_day: str | None
    to_day: str | None
    group_by: list[str]
    granularity: str | None
    total_cost: str
    total_events: int
    rows: list[CostRow]
    offset: int
    limit: int
    total_rows: int
    next_offset: int | None


def _order(
    sums: Sums, sort: str, top: int | None, needed: int, width: int
) -> tuple[list[Row], int]:
    """The first `needed` rows in `sort` order (after the `top` cut and its '(other)' row),
    and how many rows there are in all. Only the rows shown are sorted fully."""
    by = sort.lstrip("-")
    descending = sort.startswith("-")
    index = {"cost": 0, "events": 2}.get(by)
    items = list(sums.items())

    def first(n: int) -> list[Row]:
        if index is None:
            pick = heapq.nlargest if descending else heapq.nsmallest
            return (
                pick(n, items, key=lambda kv: kv[0])
                if n < len(items)
                else sorted(items, key=lambda kv: kv[0], reverse=descending)
            )
        sign = -1 if descending else 1
        i = index
        if n < len(items):
            return heapq.nsmallest(n, items, key=lambda kv: (sign * kv[1][i], kv[0]))
        return sorted(items, key=lambda kv: (sign * kv[1][i], kv[0]))

    if top is not None and len(items) > top:
        head = first(top)
        other = [sum(v[k] for v in sums.values()) - sum(v[k] for _, v in head) for k in range(3)]
        ordered = [*head, (tuple("(other)" for _ in range(width)), other)]
        return ordered, len(ordered)
    return first(needed), len(items)


def _cost_row(
    names: list[str],
    key: tuple[str, ...],
    sums: list[int],
    currency: str | None,
    split_by_sku: bool,
    units: dict[str, str],
) -> CostRow:
    """One group of the page as shown: its labels spelt out (ISO days, fixed/elastic)."""
    cost, qty, events = sums
    labels = dict(zip(names, key, strict=True))
    if "day" in labels and labels["day"] != "(other)":
        labels["day"] = iso_day(labels["day"])
    if "fixed" in labels and labels["fixed"] in ("f", "e"):
        labels["fixed"] = "fixed" if labels["fixed"] == "f" else "elastic"
    sku = labels.get("sku")
    return CostRow(
        key=labels,
        cost=format_money(cost),
        currency=currency,
        events=events,
        quantity=format_quantity(qty) if split_by_sku else None,
        unit=units.get(sku) if sku is not None else None,
    )


async def cost_report(
    store: Stores,
    project: str,
    from_day: date | None,
    to_day: date | None,
    group_by: Sequence[str],
    units: dict[str, str],
    offset: int = 0,
    limit: int = 100,
    *,
    granularity: Granularity | None = None,
    filters: dict[str, str] | None = None,
    tag_filters: dict[str, str] | None = None,
    sort: str = "-cost",
    top: int | None = None,
) -> CostReport:
    query = CostQuery(
        project,
        from_day,
        to_day,
        tuple(group_by),
        granularity,
        filters or {},
        tag_filters or {},
        sort,
        top,
        offset,
        limit,
    )
    settings = await project_settings(store, project)
    validate(query)
    daily, complete = await read_state(store, project)
    split_by_sku = "sku" in group_by and granularity != "hour"
    # Quantities are shown per SKU row only: read them for the page's rows, unless the rows
    # left out are summed into '(other)'.
    quantities: Quantities = "none" if not split_by_sku else "later" if top is None else "all"
    # Ranked by cost or key, the rows' event counts are read for the page too.
    events_read: Events = "all" if query.sort.lstrip("-") == "events" else "later"
    later = PageReads()
    sums = await group_sums(
        store, query, in_range(daily, query), complete, quantities, later, events_read
    )
    names = (["period"] if granularity else []) + list(group_by)
    ordered, total_rows = _order(sums, query.sort, top, offset + limit, len(names))
    page = ordered[offset : offset + limit]
    await later.fill(store, project, page)
    rows = [
        _cost_row(names, key, values, settings.currency, split_by_sku, units)
        for key, values in page
    ]
    end = offset + limit
    return CostReport(
        project=project,
        currency=settings.currency,
        from_day=from_day.isoformat() if from_day else None,
        to_day=to_day.isoformat() if to_day else None,
        group_by=list(group_by),
        granularity=granularity,
        total_cost=format_money(sum(v[0] for v in sums.values())),
        total_events=(
            later.events_total
            if later.events_total is not None
            else sum(v[2] for v in sums.values())
        ),
        rows=rows,
        offset=offset,
        limit=limit,
        total_rows=total_rows,
        next_offset=end if end < total_rows else None,
    )
