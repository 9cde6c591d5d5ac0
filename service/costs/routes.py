from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from ..events.model import LABEL_PATTERN
from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.problems import invalid
from ..http.security import requires
from .query import DIMENSIONS
from .report import CostReport
from .service import project_costs
from .summary import CostSummary, cost_summary

GroupBy = Annotated[
    str,
    QueryParameter(
        description=f"comma-separated: {', '.join(DIMENSIONS)}, or tag.<key> for an "
        "attribution tag",
    ),
]
FromDay = Annotated[date | None, QueryParameter(name="from", description="first day (inclusive)")]
ToDay = Annotated[date | None, QueryParameter(name="to", description="last day (exclusive)")]
Filter = Annotated[
    str | None, QueryParameter(pattern=LABEL_PATTERN, description="keep only rows with this value")
]


def _parse_group_by(raw: str) -> list[str]:
    return [g.strip() for g in raw.split(",") if g.strip()]


def _parse_tags(raw: list[str] | None) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in raw or []:
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise invalid("tag", f"use tag=<key>:<value>, got {item!r}", status=400)
        tags[key] = value
    return tags


class CostsController(Controller):
    path = "/v1/costs"
    tags = ["costs"]

    @get(
        "/",
        guards=[requires("read")],
        summary="Costs grouped by any dimensions",
        description="Filter by any dimension or attribution tag, split by hour, day, week or "
        "month, sort, keep the top N (the rest summed as '(other)'), and page.",
        operation_id="getCosts",
    )
    async def costs(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_day: FromDay = None,
        to_day: ToDay = None,
        group_by: GroupBy = "category",
        granularity: Annotated[
            Literal["hour", "day", "week", "month"] | None, QueryParameter()
        ] = None,
        stage: Filter = None,
        experiment: Filter = None,
        category: Filter = None,
        sku: Filter = None,
        owner: Filter = None,
        fixed: Annotated[Literal["fixed", "elastic"] | None, QueryParameter()] = None,
        tag: Annotated[
            list[str] | None, QueryParameter(description="<key>:<value>, repeatable")
        ] = None,
        sort: Annotated[
            str, QueryParameter(description="cost, key or events; '-' = descending")
        ] = "-cost",
        top: Annotated[int | None, QueryParameter(ge=1, le=10_000)] = None,
        offset: Annotated[int, QueryParameter(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, QueryParameter(ge=1, le=10_000)] = 100,
    ) -> CostReport:
        dims = _parse_group_by(group_by)
        filters = {
            k: v
            for k, v in (
                ("stage", stage),
                ("experiment", experiment),
                ("category", category),
                ("sku", sku),
                ("owner", owner),
                ("fixed", fixed),
            )
            if v is not None
        }
        return await project_costs(
            services.store,
            services.rate_cards,
            project,
            from_day,
            to_day,
            dims,
            offset,
            limit,
            granularity=granularity,
            filters=filters,
            tag_filters=_parse_tags(tag),
            sort=sort,
            top=top,
        )

    @get(
        "/summary",
        guards=[requires("read")],
        summary="Totals by category and stage, fixed vs elastic, peaks, rework",
        operation_id="getCostSummary",
        description=(
            "A project's totals over a time range: by category and stage, fixed against elastic "
            "spend, the peak hours and the cost of rework."
        ),
    )
    async def summary(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_day: FromDay = None,
        to_day: ToDay = None,
    ) -> CostSummary:
        return await cost_summary(services.store, project, from_day, to_day)
