from __future__ import annotations

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .model import PlanEstimate, PlanIn
from .service import (
    PlanRecord,
    PlanStatus,
    ProgressIn,
    ProgressRecord,
    estimate,
    list_plans,
    load,
    register,
    report_plan_progress,
    status_of_plan,
)


class PlanController(Controller):
    path = "/v1/plans"
    tags = ["plans"]

    @post(
        "/estimate",
        guards=[requires("read")],
        status_code=200,
        summary="Price a plan without saving it (dry run)",
        operation_id="postPlanEstimate",
        description=(
            "Prices a plan (6·N·D compute, energy, emissions, storage) against the project's rate "
            "card without saving it."
        ),
        request_example={
            "project": "llm-7b",
            "name": "7b-pretrain",
            "rate_card": "default",
            "currency": "USD",
            "window_start": "2026-03-01T00:00:00Z",
            "window_end": "2026-04-01T00:00:00Z",
            "stages": [
                {"stage": "pretrain", "resources": [{"sku": "gpu.h100.hour", "quantity": "40000"}]}
            ],
        },
    )
    async def estimate_only(
        self,
        data: JSONBody[PlanIn],
        services: NamedDependency[Services],
    ) -> PlanEstimate:
        # The guard checked the body's project (`service.http.security`).
        return await estimate(services.rate_cards, data)

    @post(
        "/",
        guards=[requires("admin")],
        summary="Register a plan and create its budgets",
        description="Creates a budget for the whole plan (with a forecast alert) and one per "
        "stage, each over the plan's window.",
        operation_id="postPlan",
        request_example={
            "project": "llm-7b",
            "name": "7b-pretrain",
            "rate_card": "default",
            "currency": "USD",
            "window_start": "2026-03-01T00:00:00Z",
            "window_end": "2026-04-01T00:00:00Z",
            "stages": [
                {"stage": "pretrain", "resources": [{"sku": "gpu.h100.hour", "quantity": "40000"}]}
            ],
        },
    )
    async def create(
        self,
        data: JSONBody[PlanIn],
        services: NamedDependency[Services],
    ) -> PlanRecord:
        # The guard checked the body's project (`service.http.security`).
        return await register(services.store, services.rate_cards, data)

    @get(
        "/",
        guards=[requires("read")],
        summary="A project's plans",
        operation_id="getPlans",
        description="Every plan registered for a project.",
    )
    async def list_all(
        self, project: ProjectParam, services: NamedDependency[Services]
    ) -> list[PlanRecord]:
        return await list_plans(services.store, project)

    @get(
        "/{plan_id:str}",
        guards=[requires("read")],
        summary="A plan and its estimate",
        operation_id="getPlan",
        description="A registered plan with the estimate made when it was registered.",
    )
    async def get_one(
        self, plan_id: FromPath[str], project: ProjectParam, services: NamedDependency[Services]
    ) -> PlanRecord:
        return await load(services.store, project, plan_id)

    @get(
        "/{plan_id:str}/status",
        guards=[requires("read")],
        summary="Plan against actual",
        operation_id="getPlanStatus",
        description=(
            "Plan against actual: planned and actual cost, the burn rate, the forecast at "
            "completion and the variance, by stage, from the reported progress."
        ),
    )
    async def status(
        self, plan_id: FromPath[str], project: ProjectParam, services: NamedDependency[Services]
    ) -> PlanStatus:
        return await status_of_plan(services.store, project, plan_id)

    @post(
        "/{plan_id:str}/progress",
        guards=[requires("ingest")],
        status_code=200,
        summary="Report a stage's progress (tokens done or fraction done)",
        operation_id="postPlanProgress",
        description=(
            "Records how far a stage of the plan has got, in tokens done or as a fraction; plan-"
            "against-actual reads it to compute earned value."
        ),
        request_example={"stage": "pretrain", "fraction_done": "0.25"},
    )
    async def progress(
        self,
        plan_id: FromPath[str],
        project: ProjectParam,
        data: JSONBody[ProgressIn],
        services: NamedDependency[Services],
    ) -> ProgressRecord:
        return await report_plan_progress(services.store, project, plan_id, data)
