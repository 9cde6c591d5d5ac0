"""Cost queries: read the kept totals and group them by any set of dimensions.

Totals are kept at two grains, both exact integer sums of the events:

* per day × stage × experiment × category × SKU × owner × fixed/elastic × attributed tags —
  every coarser answer by day, week (ISO, Monday first) or month is a sum of these;
* per hour × stage × category × fixed/elastic — for hour granularity and hourly peaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Literal

import msgspec

from costcore.money import format_money, format_quantity
from service.storage.redis_store import FIELD_SEP, TAG_SEP, Store

DIMENSIONS: tuple[str, ...] = ("day", "stage", "experiment", "category", "sku", "owner", "fixed")
HOURLY_DIMENSIONS: tuple[str, ...] = ("stage", "category", "fixed")
Granularity = Literal["hour", "day", "week", "month"]
REWORK_VALUES = frozenset({"1", "true", "yes"})
_POS = {"stage": 0, "experiment": 1, "category": 2, "sku": 3, "owner": 4, "fixed": 5}
_HOURLY_POS = {"stage": 0, "category": 1, "fixed": 2}


class QueryError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class CostQuery:
    project: str
    from_day: date | None = None
    to_day: date | None = None
    group_by: Sequence[str] = ("category",)
    granularity: Granularity | None = None
    filters: dict[str, str] = field(default_factory=dict)  # dimension -> value
    tag_filters: dict[str, str] = field(default_factory=dict)  # tag key -> value
    sort: str = "-cost"
    top: int | None = None
    offset: int = 0
    limit: int = 100


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
    granularity: str | None
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


class Peak(msgspec.Struct):
    """Peak against average spend per period (day or hour) over the range, zero periods included."""

    unit: str
    periods: int
    average: str
    peak: str
    peak_at: str | None
    headroom_ratio: str | None  # peak / average: what a budget must absorb above the average


class ReworkShare(msgspec.Struct):
    stage: str
    rework_cost: str
    stage_cost: str
    share: str


class CostSummary(msgspec.Struct):
    project: str
    currency: str | None
    from_day: str | None
    to_day: str | None
    total_cost: str
    total_events: int
    by_category: list[Breakdown]
    by_stage: list[Breakdown]
    fixed_cost: str
    elastic_cost: str
    fixed_share: str
    peak_daily: Peak
    peak_hourly: Peak
    rework_cost: str
    rework_share: str
    rework_by_stage: list[ReworkShare]


def day_key(d: date) -> str:
    return d.strftime("%Y%m%d")


def _iso(day: str) -> str:
    return f"{day[:4]}-{day[4:6]}-{day[6:]}"


def _period(day: str, granularity: str | None) -> str:
    if granularity == "week":
        year, week, _ = date(int(day[:4]), int(day[4:6]), int(day[6:])).isocalendar()
        return f"{year}-W{week:02d}"
    if granularity == "month":
        return f"{day[:4]}-{day[4:6]}"
    return _iso(day)


def _tags(text: str) -> dict[str, str]:
    if not text:
        return {}
    return dict(pair.split("=", 1) for pair in text.split(TAG_SEP))


def _share(part: int, total: int) -> str:
    if total == 0:
        return "0.0000"
    scaled = (part * 10_000 * 2 + total) // (2 * total)  # rounded half up at 4 places
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


def validate(query: CostQuery) -> None:
    hourly = query.granularity == "hour"
    allowed = HOURLY_DIMENSIONS if hourly else DIMENSIONS
    for name in query.group_by:
        if name.startswith("tag.") and not hourly and len(name) > 4:
            continue
        if name not in allowed or (hourly and name == "day"):
            extra = " (hour granularity groups by stage, category and fixed only)" if hourly else ""
            raise QueryError("group_by", f"cannot group by {name!r}{extra}")
    if len(set(query.group_by)) != len(query.group_by):
        raise QueryError("group_by", "a dimension is named twice")
    for name in query.filters:
        if hourly and name not in HOURLY_DIMENSIONS:
            raise QueryError(name, "hour granularity filters by stage, category and fixed only")
    if hourly and query.tag_filters:
        raise QueryError("tag", "hour granularity cannot filter by tag")
    if query.from_day and query.to_day and query.to_day <= query.from_day:
        raise QueryError("to", "must be after 'from'")
    if query.sort.lstrip("-") not in ("cost", "key", "events"):
        raise QueryError("sort", "use cost, key or events, with '-' for descending")


async def _days(store: Store, project: str, query: CostQuery) -> list[str]:
    lo = day_key(query.from_day) if query.from_day else ""
    hi = day_key(query.to_day) if query.to_day else "99999999"
    return sorted(d for d in await store.daily_costs(project) if lo <= d < hi)


def _wanted(value: str, name: str, filters: dict[str, str]) -> bool:
    want = filters.get(name)
    if want is None:
        return True
    if name == "fixed":
        return (value == "f") == (want == "fixed")
    return value == want


async def grouped(store: Store, query: CostQuery) -> dict[tuple[str, ...], list[int]]:
    """Sum cost, quantity and events per group (quantity and events: day grain only)."""
    validate(query)
    days = await _days(store, query.project, query)
    sums: dict[tuple[str, ...], list[int]] = {}
    if query.granularity == "hour":
        for day, fields in zip(days, await store.hour_totals(query.project, days), strict=True):
            for raw_field, raw_value in fields.items():
                _, hour, dims_text = raw_field.decode().split("|", 2)
                dims = dims_text.split(FIELD_SEP)
                if not all(_wanted(dims[_HOURLY_POS[n]], n, query.filters) for n in query.filters):
                    continue
                key = (f"{_iso(day)}T{hour}", *(dims[_HOURLY_POS[n]] for n in query.group_by))
                acc = sums.setdefault(key, [0, 0, 0])
                acc[0] += int(raw_value)
        return sums
    for day, fields in zip(days, await store.day_totals(query.project, days), strict=True):
        period = _period(day, query.granularity)
        for raw_field, raw_value in fields.items():
            text = raw_field.decode()
            kind = text[0]
            dims = text[2:].split(FIELD_SEP)
            if query.filters and not all(
                _wanted(dims[_POS[n]], n, query.filters) for n in query.filters
            ):
                continue
            tags = _tags(dims[6]) if len(dims) > 6 else {}
            if query.tag_filters and any(tags.get(k) != v for k, v in query.tag_filters.items()):
                continue
            key = tuple(
                day
                if name == "day"
                else tags.get(name[4:], "")
                if name.startswith("tag.")
                else dims[_POS[name]]
                for name in query.group_by
            )
            if query.granularity is not None:
                key = (period, *key)
            acc = sums.setdefault(key, [0, 0, 0])
            acc["cqn".index(kind)] += int(raw_value)
    return sums


async def cost_report(
    store: Store,
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
    meta = await store.project_meta(project)
    sums = await grouped(store, query)
    names = (["period"] if granularity else []) + list(group_by)
    by = query.sort.lstrip("-")
    descending = query.sort.startswith("-")
    index = {"cost": 0, "events": 2}.get(by)
    if index is None:
        ordered = sorted(sums.items(), key=lambda kv: kv[0], reverse=descending)
    else:
        ordered = sorted(
            sums.items(), key=lambda kv: ((-1 if descending else 1) * kv[1][index], kv[0])
        )
    if top is not None and len(ordered) > top:
        rest = ordered[top:]
        other = [sum(v[i] for _, v in rest) for i in range(3)]
        ordered = [*ordered[:top], (tuple("(other)" for _ in names), other)]
    split_by_sku = "sku" in group_by and granularity != "hour"
    rows = []
    for key, (cost, qty, events) in ordered[offset : offset + limit]:
        labels = dict(zip(names, key, strict=True))
        if "day" in labels and labels["day"] != "(other)":
            labels["day"] = _iso(labels["day"])
        if "fixed" in labels and labels["fixed"] in ("f", "e"):
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
    end = offset + limit
    return CostReport(
        project=project,
        currency=meta.get("currency"),
        from_day=from_day.isoformat() if from_day else None,
        to_day=to_day.isoformat() if to_day else None,
        group_by=list(group_by),
        granularity=granularity,
        total_cost=format_money(sum(v[0] for v in sums.values())),
        total_events=sum(v[2] for v in sums.values()),
        rows=rows,
        offset=offset,
        limit=limit,
        total_rows=len(ordered),
        next_offset=end if end < len(ordered) else None,
    )


def _peak(values: dict[str, int], periods: int, unit: str) -> Peak:
    total = sum(values.values())
    if periods == 0:
        return Peak(unit, 0, "0.00", "0.00", None, None)
    at, peak = max(values.items(), key=lambda kv: (kv[1], kv[0])) if values else (None, 0)
    average_num = total  # average = total / periods, kept exact for the ratio
    ratio = _ratio(peak * periods, average_num) if average_num else None
    return Peak(
        unit=unit,
        periods=periods,
        average=format_money((total * 2 + periods) // (2 * periods)),
        peak=format_money(peak),
        peak_at=at,
        headroom_ratio=ratio,
    )


def _ratio(num: int, den: int) -> str:
    scaled = (num * 10_000 * 2 + den) // (2 * den)
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


async def cost_summary(
    store: Store, project: str, from_day: date | None, to_day: date | None
) -> CostSummary:
    meta = await store.project_meta(project)
    base = CostQuery(project, from_day, to_day, ("category", "stage", "fixed", "tag.rework"))
    sums = await grouped(store, base)
    total = sum(v[0] for v in sums.values())
    by_category: dict[str, int] = {}
    by_stage: dict[str, int] = {}
    rework_stage: dict[str, int] = {}
    fixed = 0
    for (category, stage, kind, rework_tag), (cost, _, _) in sums.items():
        by_category[category] = by_category.get(category, 0) + cost
        by_stage[stage] = by_stage.get(stage, 0) + cost
        if kind == "f":
            fixed += cost
        if rework_tag.lower() in REWORK_VALUES:
            rework_stage[stage] = rework_stage.get(stage, 0) + cost

    def breakdown(parts: dict[str, int]) -> list[Breakdown]:
        return [
            Breakdown(name, format_money(cost), _share(cost, total))
            for name, cost in sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    # Peaks: over the requested range, or from the first to the last day with spend.
    days = await _days(store, project, base)
    daily_all = await store.daily_costs(project)
    daily = {_iso(d): daily_all[d] for d in days}
    first = from_day or (date.fromisoformat(_iso(days[0])) if days else None)
    last = (
        (to_day - timedelta(days=1))
        if to_day
        else (date.fromisoformat(_iso(days[-1])) if days else None)
    )
    n_days = (last - first).days + 1 if first and last and last >= first else 0
    hours: dict[str, int] = {}
    for day, fields in zip(days, await store.hour_totals(project, days), strict=True):
        for raw_field, raw_value in fields.items():
            hour = raw_field.decode().split("|", 2)[1]
            stamp = f"{_iso(day)}T{hour}:00Z"
            hours[stamp] = hours.get(stamp, 0) + int(raw_value)
    rework = sum(rework_stage.values())
    return CostSummary(
        project=project,
        currency=meta.get("currency"),
        from_day=first.isoformat() if first else None,
        to_day=(last + timedelta(days=1)).isoformat() if last else None,
        total_cost=format_money(total),
        total_events=sum(v[2] for v in sums.values()),
        by_category=breakdown(by_category),
        by_stage=breakdown(by_stage),
        fixed_cost=format_money(fixed),
        elastic_cost=format_money(total - fixed),
        fixed_share=_share(fixed, total),
        peak_daily=_peak(daily, n_days, "day"),
        peak_hourly=_peak(hours, n_days * 24, "hour"),
        rework_cost=format_money(rework),
        rework_share=_share(rework, total),
        rework_by_stage=[
            ReworkShare(
                stage,
                format_money(cost),
                format_money(by_stage[stage]),
                _share(cost, by_stage[stage]),
            )
            for stage, cost in sorted(rework_stage.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    )
