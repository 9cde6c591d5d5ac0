from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from ..events.routes import ProjectParam
from ..http.deps import Services
from ..http.problems import invalid, problem
from ..http.security import requires
from .model import Budget, BudgetError, BudgetIn
from .service import (
    AlertView,
    BudgetConflict,
    BudgetStatus,
    budget_status,
    create_budget,
    find_budget,
    list_alerts,
    list_budgets,
)


async def _currency(services: Services, project: str) -> str:
    meta = await services.store.projects.project_meta(project)
    if meta.get("currency"):
        return meta["currency"]
    catalog = await services.rate_cards.catalog(meta.get("rate_card", "default"))
    return (catalog.currency if catalog else None) or ""


class BudgetController(Controller):
    path = "/v1/budgets"
    tags = ["budgets"]

    @post(
        "/",
        guards=[requires("admin")],
        summary="Create a budget",
        description="Its counters start from everything already accepted in its scope; "
        "thresholds already passed are recorded as alerts at once.",
    )
    async def create(
        self,
        data: JSONBody[BudgetIn],
        services: NamedDependency[Services],
    ) -> Budget:
        # The guard checked the body's project (`service.http.security`).
        try:
            return await create_budget(
                services.store, data, await _currency(services, data.project)
            )
        except BudgetError as exc:
            raise invalid(exc.field, exc.reason) from exc
        except BudgetConflict as exc:
            raise problem(503, "Busy", str(exc), kind="busy", headers={"Retry-After": "1"}) from exc

    @get("/", guards=[requires("read")], summary="A project's budgets")
    async def list_all(
        self, project: ProjectParam, services: NamedDependency[Services]
    ) -> list[Budget]:
        return await list_budgets(services.store, project)

    @get("/{budget_id:str}", guards=[requires("read")], summary="Spend against a budget now")
    async def status(
        self, budget_id: FromPath[str], project: ProjectParam, services: NamedDependency[Services]
    ) -> BudgetStatus:
        budget = await find_budget(services.store, project, budget_id)
        if budget is None:
            raise problem(
                404, "Not found", f"no budget {budget_id!r} in {project!r}", kind="not-found"
            )
        return await budget_status(services.store, budget, await _currency(services, project))

    @delete(
        "/{budget_id:str}", guards=[requires("admin")], summary="Delete a budget", status_code=204
    )
    async def remove(
        self, budget_id: FromPath[str], project: ProjectParam, services: NamedDependency[Services]
    ) -> None:
        if not await services.store.budgets.delete_budget(project, budget_id):
            raise problem(
                404, "Not found", f"no budget {budget_id!r} in {project!r}", kind="not-found"
            )


class AlertController(Controller):
    path = "/v1/alerts"
    tags = ["alerts"]

    @get("/", guards=[requires("read")], summary="Alert history, oldest first")
    async def history(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        kind: Annotated[Literal["threshold", "forecast", "growth"] | None, QueryParameter()] = None,
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
