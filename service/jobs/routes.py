from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import PathParameter
from litestar.response import Stream

from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .model import JOB_ID_PATTERN, Job, JobList
from .service import cancel_job, find_job, job_file, project_jobs

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
        description="The project's jobs (repricings, rebuilds, exports), newest first, at most "
        "100.",
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
        "progress (events priced again of the project's events; an export: events written "
        "of its window's); once it succeeded, its result (the rebuild's report and the budget "
        "alerts it settled; an export: `download`, its file's link), once it failed, the "
        "reason. A job of another project is a 404.",
    )
    async def get_job(
        self, job_id: JobIdParam, project: ProjectParam, services: NamedDependency[Services]
    ) -> Job:
        return await find_job(services.store, project, job_id)

    @get(
        "/{job_id:str}/file",
        guards=[requires("read")],
        summary="Download an export job's file",
        operation_id="getJobFile",
        description="The CSV a succeeded export job (`POST /v1/export/focus/jobs`) wrote, "
        "streamed as `GET /v1/export/focus` streams it, byte for byte the same file. Kept 24 "
        "hours after the job ended (`download.expires_at`); a job that has no file (not an "
        "export, not succeeded, or its file expired) is a 404.",
        media_type="text/csv",
        response_description="CSV (RFC 4180, UTF-8, header row first)",
    )
    async def get_file(
        self, job_id: JobIdParam, project: ProjectParam, services: NamedDependency[Services]
    ) -> Stream:
        filename, chunks = await job_file(services.store, project, job_id)
        return Stream(
            chunks,
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

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
