"""A cost query: what it asks for, the checks it must pass, and the day keys it ranges over.

Days are kept as `yyyymmdd` keys (`day_key`); answers show them as ISO dates (`iso_day`) or
as the period of the granularity asked for (`period_label`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Literal

from ..errors import Invalid

DIMENSIONS: tuple[str, ...] = ("day", "stage", "experiment", "category", "sku", "owner", "fixed")
HOURLY_DIMENSIONS: tuple[str, ...] = ("stage", "category", "fixed")
Granularity = Literal["hour", "day", "week", "month"]


class QueryError(Invalid, ValueError):
    status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
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


def day_key(d: date) -> str:
    return d.strftime("%Y%m%d")


def iso_day(day: str) -> str:
    return f"{day[:4]}-{day[4:6]}-{day[6:]}"


def period_label(day: str, granularity: str | None) -> str:
    if granularity == "week":
        year, week, _ = date(int(day[:4]), int(day[4:6]), int(day[6:])).isocalendar()
        return f"{year}-W{week:02d}"
    if granularity == "month":
        return f"{day[:4]}-{day[4:6]}"
    return iso_day(day)


def in_range(daily: dict[str, int], query: CostQuery) -> list[str]:
    lo = day_key(query.from_day) if query.from_day else ""
    hi = day_key(query.to_day) if query.to_day else "99999999"
    return sorted(d for d in daily if lo <= d < hi)


def kept_by_filters(value: str, name: str, filters: dict[str, str]) -> bool:
    """Whether a cell's `value` of dimension `name` passes the query's filters."""
    want = filters.get(name)
    if want is None:
        return True
    if name == "fixed":
        return (value == "f") == (want == "fixed")
    return value == want
