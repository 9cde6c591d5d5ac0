"""Cost queries: read the per-day totals and group them by any set of dimensions.

Totals are kept at the finest grain (day × stage × experiment × category × SKU ×
owner × fixed/elastic), so every coarser answer is an exact integer sum of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Literal

import msgspec

from costcore.money import format_money, format_quantity
from service.storage.redis_store import FIELD_SEP, Store

Dimension = Literal["day", "stage", "experiment", "category", "sku", "owner", "fixed"]
DIMENSIONS: tuple[str, ...] = ("day", "stage", "experiment", "category", "sku", "owner", "fixed")
_FIELD_POS = {"stage": 0, "experiment": 1, "category": 2, "sku": 3, "owner": 4, "fixed": 5}


class CostRow(msgspec.Struct, omit_defaults=False):
    key: dict[str, str]
    cost: str
    currency: str | None
    events: int
    # Quantity and unit only make sense when the rows are split by SKU.
    quantity: str | None = None
    unit: str | None = None


class CostReport(msgspec.Struct):
    project: str
    currency: str | None
    from_day: str | None
    to_day: str | None
    group_by: list[str]
    total_cost: str
    total_events: int
    rows: list[CostRow]
    offset: int
    limit: int
    total_rows: int
    next_offset: int | None


class Breakdown(msgspec.Struct):
    name: str
    cost: str
    share: str  # of the total, as a decimal fraction with 4 places


class CostSummary(msgspec.Struct):
    project: str
    currency: str | None
    total_cost: str
    total_events: int
    by_category: list[Breakdown]
    by_stage: list[Breakdown]
    fixed_cost: str
    elastic_cost: str


def day_key(d: date) -> str:
    return d.strftime("%Y%m%d")


def _iso(day: str) -> str:
    return f"{day[:4]}-{day[4:6]}-{day[6:]}"


async def _grouped(
    store: Store, project: str, from_day: date | None, to_day: date | None, group_by: Sequence[str]
) -> dict[tuple[str, ...], list[int]]:
    """Sum cost, quantity and events per group over the days in [from_day, to_day)."""
    lo = day_key(from_day) if from_day else ""
    hi = day_key(to_day) if to_day else "99999999"
    days = sorted(d for d in await store.daily_costs(project) if lo <= d < hi)
    sums: dict[tuple[str, ...], list[int]] = {}
    by_field = [(name, _FIELD_POS.get(name)) for name in group_by]
    for day, fields in zip(days, await store.day_totals(project, days), strict=True):
        for raw_field, raw_value in fields.items():
            field = raw_field.decode()
            kind, dims_text = field[0], field[2:]
            dims = dims_text.split(FIELD_SEP)
            key = tuple(day if pos is None else dims[pos] for _, pos in by_field)
            acc = sums.get(key)
            if acc is None:
                acc = sums[key] = [0, 0, 0]
            acc["cqn".index(kind)] += int(raw_value)
    return sums


def _share(part: int, total: int) -> str:
    if total == 0:
        return "0.0000"
    scaled = (part * 10_000 * 2 + total) // (2 * total)  # rounded half up at 4 places
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


async def cost_report(
    store: Store,
    project: str,
    from_day: date | None,
    to_day: date | None,
    group_by: Sequence[str],
    units: dict[str, str],
    offset: int = 0,
    limit: int = 100,
) -> CostReport:
    meta = await store.project_meta(project)
    sums = await _grouped(store, project, from_day, to_day, group_by)
    split_by_sku = "sku" in group_by
    ordered = sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0]))
    rows = []
    for key, (cost, qty, events) in ordered[offset : offset + limit]:
        labels = dict(zip(group_by, key, strict=True))
        if "day" in labels:
            labels["day"] = _iso(labels["day"])
        if "fixed" in labels:
            labels["fixed"] = "fixed" if labels["fixed"] == "f" else "elastic"
        sku = labels.get("sku")
        rows.append(
            CostRow(
                key=labels,
                cost=format_money(cost),
                currency=meta.get("currency"),
                events=events,
                quantity=format_quantity(qty) if split_by_sku else None,
                unit=units.get(sku) if sku is not None else None,
            )
        )
    total_cost = sum(v[0] for v in sums.values())
    total_events = sum(v[2] for v in sums.values())
    end = offset + limit
    return CostReport(
        project=project,
        currency=meta.get("currency"),
        from_day=from_day.isoformat() if from_day else None,
        to_day=to_day.isoformat() if to_day else None,
        group_by=list(group_by),
        total_cost=format_money(total_cost),
        total_events=total_events,
        rows=rows,
        offset=offset,
        limit=limit,
        total_rows=len(ordered),
        next_offset=end if end < len(ordered) else None,
    )


async def cost_summary(
    store: Store, project: str, from_day: date | None, to_day: date | None
) -> CostSummary:
    meta = await store.project_meta(project)
    sums = await _grouped(store, project, from_day, to_day, ("category", "stage", "fixed"))
    total = sum(v[0] for v in sums.values())
    by_category: dict[str, int] = {}
    by_stage: dict[str, int] = {}
    fixed = 0
    for (category, stage, kind), (cost, _, _) in sums.items():
        by_category[category] = by_category.get(category, 0) + cost
        by_stage[stage] = by_stage.get(stage, 0) + cost
        if kind == "f":
            fixed += cost

    def breakdown(parts: dict[str, int]) -> list[Breakdown]:
        return [
            Breakdown(name, format_money(cost), _share(cost, total))
            for name, cost in sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    return CostSummary(
        project=project,
        currency=meta.get("currency"),
        total_cost=format_money(total),
        total_events=sum(v[2] for v in sums.values()),
        by_category=breakdown(by_category),
        by_stage=breakdown(by_stage),
        fixed_cost=format_money(fixed),
        elastic_cost=format_money(total - fixed),
    )
