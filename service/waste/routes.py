from __future__ import annotations

from datetime import date
from typing import Annotated

from litestar import Controller, get, post, put
from litestar.di import NamedDependency
from litestar.params import JSONBody, QueryParameter

from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .model import ProgressPoint, WastePolicy, WasteReport
from .service import (
    ExperimentProgressIn,
    add_progress,
    set_waste_policy,
    waste_policy,
    waste_report,
)


class ReportController(Controller):
    path = "/v1/reports"
    tags = ["reports"]

    @get(
        "/waste",
        guards=[requires("read")],
        summary="Waste findings",
        description="Idle reserved capacity, experiments without progress, storage and logs "
        "past retention, checkpoint growth, repeated cross-region pulls; each with its cost so "
        "far, its cost per day if left alone, the evidence and what to do. The rules and the "
        "tags they read: docs/guides/waste.md.",
        operation_id="getWasteReport",
    )
    async def waste(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_day: Annotated[date | None, QueryParameter(name="from")] = None,
        to_day: Annotated[
            date | None, QueryParameter(name="to", description="last day (inclusive)")
        ] = None,
    ) -> WasteReport:
        return await waste_report(services.store, services.rate_cards, project, from_day, to_day)

    @get(
        "/waste/policy",
        guards=[requires("read")],
        summary="The project's waste policy",
        operation_id="getWastePolicy",
        description="The thresholds the waste report applies to this project.",
    )
    async def get_policy(
        self, project: ProjectParam, services: NamedDependency[Services]
    ) -> WastePolicy:
        return await waste_policy(services.store, project)

    @put(
        "/waste/policy",
        guards=[requires("admin")],
        status_code=200,
        summary="Set the project's waste policy",
        operation_id="putWastePolicy",
        description="Replaces the thresholds the waste report applies to this project.",
        request_example={"idle_days": 2, "stall_days": 3, "min_improvement_pct": "0.5"},
    )
    async def put_policy(
        self,
        project: ProjectParam,
        data: JSONBody[WastePolicy],
        services: NamedDependency[Services],
    ) -> WastePolicy:
        return await set_waste_policy(services.store, project, data)


class ExperimentController(Controller):
    path = "/v1/experiments"
    tags = ["reports"]

    @post(
        "/progress",
        guards=[requires("ingest")],
        status_code=200,
        summary="Report an experiment's progress (a metric value)",
        operation_id="postExperimentProgress",
        description=(
            "Records one value of an experiment's metric at a time; the waste report reads them to"
            " find experiments that stopped improving."
        ),
        request_example={
            "experiment": "baseline",
            "metric": "eval_loss",
            "value": "2.31",
            "time": "2026-03-01T12:00:00Z",
        },
    )
    async def progress(
        self,
        project: ProjectParam,
        data: JSONBody[ExperimentProgressIn],
        services: NamedDependency[Services],
    ) -> ProgressPoint:
        return await add_progress(services.store, project, data)
