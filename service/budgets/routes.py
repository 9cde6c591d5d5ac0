from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .model import AlertKind, Budget, BudgetIn
from .service import (
    AlertView,
    BudgetStatus,
    create_project_budget,
    delete_budget,
    list_alerts,
    list_budgets,
    project_budget_status,
)


class BudgetController(Controller):
    path = "/v1/budgets"
    tags = ["budgets"]

    @post(
        "/",
        guards=[requires("admin")],
        summary="Create a budget",
        description="Its counters start from everything already accepted in its scope; "
        "thresholds already passed are recorded as alerts at once.",
        operation_id="postBudget",
        request_example={
            "project": "llm-7b",
            "name": "monthly compute",
            "amount": "50000",
            "period": "monthly",
            "thresholds": [50, 80, 100],
        },
    )
    async def create(
        self,
        data: JSONBody[BudgetIn],
        services: NamedDependency[Services],
    ) -> Budget:
        # The guard checked the body's project (`service.http.security`).
        return await create_project_budget(services.store, services.rate_cards, data)

    @get(
        "/",
        guards=[requires("read")],
        summary="A project's budgets",
        operation_id="getBudgets",
        description="Every budget of a project, with its scope, period and alert thresholds.",
    )
    async def list_all(
        self, project: ProjectParam, services: NamedDependency[Services]
    ) -> list[Budget]:
        return await list_budgets(services.store, project)

    @get(
        "/{budget_id:str}",
        guards=[requires("read")],
        summary="Spend against a budget now",
        operation_id="getBudget",
        description=(
            "The budget with its spend in the current period, the share of the amount spent and "
            "the forecast to the period's end."
        ),
    )
    async def status(
        self, budget_id: FromPath[str], project: ProjectParam, services: NamedDependency[Services]
    ) -> BudgetStatus:
        return await project_budget_status(services.store, services.rate_cards, project, budget_id)

    @delete(
        "/{budget_id:str}",
        guards=[requires("admin")],
        summary="Delete a budget",
        status_code=204,
        operation_id="deleteBudget",
        description="Deletes the budget; its past alerts stay in the history.",
    )
    async def remove(
        self, budget_id: FromPath[str], project: ProjectParam, services: NamedDependency[Services]
    ) -> None:
        await delete_budget(services.store, project, budget_id)


class AlertController(Controller):
    path = "/v1/alerts"
    tags = ["alerts"]

    @get(
        "/",
        guards=[requires("read")],
        summary="Alert history, oldest first",
        operation_id="getAlerts",
        description=(
            "The alerts of a project that fired, oldest first: budget alerts (threshold, "
            "forecast or growth) and evaluation regressions (evaluation_regression: a running "
            "experiment's general benchmark fell past the tolerance below the baseline), "
            "filtered by kind and time range. Page with `after`: the `cursor` of the last "
            "alert seen."
        ),
    )
    async def history(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        kind: Annotated[AlertKind | None, QueryParameter()] = None,
        since: Annotated[datetime | None, QueryParameter(name="from")] = None,
        until: Annotated[datetime | None, QueryParameter(name="to")] = None,
        after: Annotated[
            str | None,
            QueryParameter(
                description="cursor of the last alert seen", pattern=r"^[0-9]+-[0-9]+$(?!\n)"
            ),
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
    ) -> list[AlertView]:
        return await list_alerts(services.store, project, kind, since, until, after, limit)
