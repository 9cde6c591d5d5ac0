"""The cost summary: a project's spend over a range by category and stage, fixed against
elastic, its daily and hourly peaks, and the share spent on rework."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING

import msgspec

from costcore.money import format_money

from ..projects.service import project_settings
from .grouping import Sums, group_sums, read_state
from .query import CostQuery, in_range, iso_day, validate

if TYPE_CHECKING:
    from ..stores import Stores

REWORK_VALUES = frozenset({"1", "true", "yes"})


class Breakdown(msgspec.Struct):
    """One part of a project's total (a category or a stage): its cost and share of the total."""

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
    """The cost of rework in one stage, against the stage's whole cost."""

    stage: str
    rework_cost: str
    stage_cost: str
    share: str


class CostSummary(msgspec.Struct):
    """Answer of `GET /v1/costs/summary`: a project's totals by category and stage, fixed against
    elastic, peaks and rework."""

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


def _share(part: int, total: int) -> str:
    if total == 0:
        return "0.0000"
    scaled = (part * 10_000 * 2 + total) // (2 * total)  # rounded half up at 4 places
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


def _ratio(num: int, den: int) -> str:
    scaled = (num * 10_000 * 2 + den) // (2 * den)
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


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


@dataclass
class _Split:
    """The range's cost split by category, by stage, fixed, and rework per stage."""

    total: int
    by_category: dict[str, int] = field(default_factory=dict)
    by_stage: dict[str, int] = field(default_factory=dict)
    rework_stage: dict[str, int] = field(default_factory=dict)
    fixed: int = 0


def _split(sums: Sums) -> _Split:
    """`sums` are grouped by category, stage, fixed and the rework tag, in that order."""
    split = _Split(total=sum(v[0] for v in sums.values()))
    for (category, stage, kind, rework_tag), (cost, _, _) in sums.items():
        split.by_category[category] = split.by_category.get(category, 0) + cost
        split.by_stage[stage] = split.by_stage.get(stage, 0) + cost
        if kind == "f":
            split.fixed += cost
        if rework_tag.lower() in REWORK_VALUES:
            split.rework_stage[stage] = split.rework_stage.get(stage, 0) + cost
    return split


def _breakdown(parts: dict[str, int], total: int) -> list[Breakdown]:
    return [
        Breakdown(name, format_money(cost), _share(cost, total))
        for name, cost in sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def _span(
    from_day: date | None, to_day: date | None, days: list[str]
) -> tuple[date | None, date | None]:
    """The first and last day peaks are over: the requested range, or from the first to the
    last day with spend."""
    first = from_day or (date.fromisoformat(iso_day(days[0])) if days else None)
    last = (
        (to_day - timedelta(days=1))
        if to_day
        else (date.fromisoformat(iso_day(days[-1])) if days else None)
    )
    return first, last


async def _hourly_costs(store: Stores, project: str, days: list[str]) -> dict[str, int]:
    """Cost per hour with spend (`YYYY-MM-DDTHH:00Z`) over the days."""
    hours: dict[str, int] = {}
    for day, fields in zip(days, await store.ledger.hour_totals(project, days), strict=True):
        for raw_field, raw_value in fields.items():
            field_kind, hour, _ = raw_field.decode().split("|", 2)
            if field_kind != "c":
                continue  # the hour's event count
            stamp = f"{iso_day(day)}T{hour}:00Z"
            hours[stamp] = hours.get(stamp, 0) + int(raw_value)
    return hours


async def cost_summary(
    store: Stores, project: str, from_day: date | None, to_day: date | None
) -> CostSummary:
    settings = await project_settings(store, project)
    base = CostQuery(project, from_day, to_day, ("category", "stage", "fixed", "tag.rework"))
    validate(base)
    daily_all, complete = await read_state(store, project)
    days = in_range(daily_all, base)
    sums = await group_sums(store, base, days, complete, "none")
    split = _split(sums)
    total, by_stage, fixed = split.total, split.by_stage, split.fixed
    daily = {iso_day(d): daily_all[d] for d in days}
    first, last = _span(from_day, to_day, days)
    n_days = (last - first).days + 1 if first and last and last >= first else 0
    hours = await _hourly_costs(store, project, days)
    rework = sum(split.rework_stage.values())
    return CostSummary(
        project=project,
        currency=settings.currency,
        from_day=first.isoformat() if first else None,
        to_day=(last + timedelta(days=1)).isoformat() if last else None,
        total_cost=format_money(total),
        total_events=sum(v[2] for v in sums.values()),
        by_category=_breakdown(split.by_category, total),
        by_stage=_breakdown(by_stage, total),
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
            for stage, cost in sorted(split.rework_stage.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    )
