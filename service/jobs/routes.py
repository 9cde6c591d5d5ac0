from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import PathParameter

from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .model import JOB_ID_PATTERN, Job, JobList
from .service import cancel_job, find_job, project_jobs

JobIdParam = Annotated[str, PathParameter(pattern=JOB_ID_PATTERN, description="job id")]


CANCEL_DESCRIPTION = (
    "A queued job is cancelled at once; a running one stops at its next step, before it "
    "writes anything, and ends `cancelled` (`cancel_requested` shows the ask meanwhile). "
    "A job that already ended is a 409."
)


class JobController(Controller):
    path = "/v1/jobs"
    tags = ["jobs"]

    @get(
        "/",
        guards=[requires("read")],
        summary="The project's jobs",
        operation_id="getJobs",
        description="The project's jobs (repricings, rebuilds), newest first, at most 100.",
    )
    async def list_jobs(
        self, project: ProjectParam, services: NamedDependency[Services]
    ) -> JobList:
        return JobList(await project_jobs(services.store, project))

    @get(
        "/{job_id:str}",
        guards=[requires("read")],
        summary="A job: its state, progress and result",
        operation_id="getJob",
        description="State `queued`, `running`, `succeeded`, `failed` or `cancelled`; the "
        "progress (events priced again of the project's events); once it succeeded, its "
        "result (the rebuild's report and the budget alerts it settled), once it failed, the "
        "reason. A job of another project is a 404.",
    )
    async def get_job(
        self, job_id: JobIdParam, project: ProjectParam, services: NamedDependency[Services]
    ) -> Job:
        return await find_job(services.store, project, job_id)

    @delete(
        "/{job_id:str}",
        guards=[requires("admin")],
        status_code=200,
        summary="Cancel a job",
        operation_id="deleteJob",
        description=CANCEL_DESCRIPTION,
    )
    async def delete_job(
        self, job_id: JobIdParam, project: ProjectParam, services: NamedDependency[Services]
    ) -> Job:
        return await self._cancel(services, project, job_id)

    @post(
        "/{job_id:str}/cancel",
        guards=[requires("admin")],
        status_code=200,
        summary="Cancel a job",
        operation_id="postJobCancel",
        description=CANCEL_DESCRIPTION,
    )
    async def post_cancel(
        self, job_id: JobIdParam, project: ProjectParam, services: NamedDependency[Services]
    ) -> Job:
        return await self._cancel(services, project, job_id)

    async def _cancel(self, services: Services, project: str, job_id: str) -> Job:
        return await cancel_job(services.store, services.rate_cards, project, job_id)
