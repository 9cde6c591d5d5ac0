from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, Response, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import HeaderParameter, JSONBody, QueryParameter

from ..auth.model import Principal
from ..http.deps import Services
from ..http.params import PathProject
from ..http.security import requires
from ..jobs.model import Job
from ..jobs.service import queue_rebuild, wants_async
from ..rebuild.model import RebuildReport
from ..rebuild.service import rebuild_project
from .model import ProjectIn, ProjectView
from .service import (
    change_settings,
    project_view,
    visible_projects,
)


class ProjectController(Controller):
    path = "/v1/projects"
    tags = ["projects"]

    @get(
        "/",
        guards=[requires("read")],
        summary="Projects this token may see",
        operation_id="getProjects",
        description=(
            "The names of the projects this token may see (every project for an unrestricted "
            "token)."
        ),
    )
    async def list_projects(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> list[str]:
        return await visible_projects(services.store, request.user)

    @get(
        "/{project:str}",
        guards=[requires("read")],
        summary="A project's settings and counters",
        operation_id="getProject",
        description="A project's settings (its rate card, its attribution tags) and its counters.",
    )
    async def get_project(
        self, project: PathProject, services: NamedDependency[Services]
    ) -> ProjectView:
        return await project_view(services.store, project)

    @put(
        "/{project:str}",
        guards=[requires("admin")],
        summary="Choose the project's rate card",
        operation_id="putProject",
        description=(
            "Sets the project's settings: the rate card its events are priced with, and its "
            "attribution tags. Events already counted keep their price until the project is "
            "rebuilt."
        ),
        request_example={"rate_card": "default", "attribution_tags": ["team"]},
    )
    async def put_project(
        self, project: PathProject, data: JSONBody[ProjectIn], services: NamedDependency[Services]
    ) -> ProjectView:
        return await change_settings(services.store, services.rate_cards, project, data)

    @post(
        "/{project:str}/rebuild",
        guards=[requires("admin")],
        status_code=200,
        summary="Rebuild the project's totals from its event log",
        description="Prices the accepted-event log again, in order, with the current rate cards, "
        "and settles the budgets on the rebuilt figures (thresholds reached and not fired fire "
        "once). With `async=true` or `Prefer: respond-async` it runs as a job instead: `202` "
        "with the job to poll (`GET /v1/jobs/{job_id}`), one running per project at a time.",
        operation_id="postProjectRebuild",
        responses={
            200: ResponseSpec(RebuildReport, description="Rebuilt: the report"),
            202: ResponseSpec(Job, description="Queued as a job: poll it at its `href`"),
        },
    )
    async def rebuild(
        self,
        project: PathProject,
        services: NamedDependency[Services],
        run_async: Annotated[
            bool,
            QueryParameter(name="async", description="Run as a job and answer 202 at once"),
        ] = False,
        prefer: Annotated[
            str | None,
            HeaderParameter(
                name="Prefer",
                description="`respond-async`: as `async=true` (RFC 7240)",
                max_length=200,
            ),
        ] = None,
    ) -> Response[RebuildReport | Job]:
        if run_async or wants_async(prefer):
            job = await queue_rebuild(services.store, project)
            return Response(job, status_code=202, headers={"Location": job.href})
        report = await rebuild_project(services.store, services.rate_cards, project)
        return Response(report, status_code=200)
