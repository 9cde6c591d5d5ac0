from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from service.domain.costs import DIMENSIONS, CostReport, CostSummary, cost_report, cost_summary
from service.http.deps import Services
from service.http.problems import invalid
from service.http.routes.events import ProjectParam
from service.http.security import requires

GroupBy = Annotated[
    str,
    QueryParameter(
        description=f"comma-separated dimensions: {', '.join(DIMENSIONS)}",
        examples=[],
    ),
]
FromDay = Annotated[date | None, QueryParameter(name="from", description="first day (inclusive)")]
ToDay = Annotated[date | None, QueryParameter(name="to", description="last day (exclusive)")]


def _parse_group_by(raw: str) -> list[str]:
    names = [g.strip() for g in raw.split(",") if g.strip()]
    for name in names:
        if name not in DIMENSIONS:
            raise invalid(
                "group_by", f"unknown dimension {name!r}; use {', '.join(DIMENSIONS)}", status=400
            )
    if len(set(names)) != len(names):
        raise invalid("group_by", "a dimension is named twice", status=400)
    return names


def _check_range(from_day: date | None, to_day: date | None) -> None:
    if from_day and to_day and to_day <= from_day:
        raise invalid("to", "must be after 'from'", status=400)


class CostsController(Controller):
    path = "/v1/costs"
    tags = ["costs"]

    @get("/", guards=[requires("read")], summary="Costs grouped by any dimensions")
    async def costs(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_day: FromDay = None,
        to_day: ToDay = None,
        group_by: GroupBy = "category",
        offset: Annotated[int, QueryParameter(ge=0)] = 0,
        limit: Annotated[int, QueryParameter(ge=1, le=10_000)] = 100,
    ) -> CostReport:
        dims = _parse_group_by(group_by)
        _check_range(from_day, to_day)
        units: dict[str, str] = {}
        if "sku" in dims:
            meta = await services.store.project_meta(project)
            catalog = await services.rate_cards.catalog(meta.get("rate_card", "default"))
            if catalog is not None:
                current = catalog.history.index_at(datetime.now(UTC))
                for vi in range(max(current, len(catalog.history.versions) - 1) + 1):
                    units.update({c: s.unit for c, s in catalog.history.priced(vi).items()})
        return await cost_report(
            services.store, project, from_day, to_day, dims, units, offset, limit
        )

    @get("/summary", guards=[requires("read")], summary="Totals by category and stage")
    async def summary(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_day: FromDay = None,
        to_day: ToDay = None,
    ) -> CostSummary:
        _check_range(from_day, to_day)
        return await cost_summary(services.store, project, from_day, to_day)
