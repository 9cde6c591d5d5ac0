"""Exports: the ledger in the FinOps Foundation's FOCUS format, streamed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import QueryParameter
from litestar.response import Stream

from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.problems import invalid
from ..http.security import requires
from ..jobs.model import Job
from ..jobs.service import queue_export
from .aggregate import Granularity
from .focus import FOCUS_VERSION
from .stream import export_filename, first_chunk_read, prepare_export

# Litestar adds "; charset=utf-8" to a text/* media type: the answer is text/csv; charset=utf-8.
CSV = "text/csv"

FromTime = Annotated[
    datetime | None,
    QueryParameter(
        name="from",
        description="first event time included (RFC 3339; UTC when no offset is given)",
    ),
]
ToTime = Annotated[
    datetime | None,
    QueryParameter(
        name="to",
        description="first event time excluded (RFC 3339; UTC when no offset is given)",
    ),
]

GranularityParam = Annotated[
    Granularity,
    QueryParameter(
        description=(
            "event: one row per event (per tier it touches); hour or day: one row per UTC "
            "charge period × SKU, price, stage, experiment, owner and tags, with the exact "
            "sums of its events' costs and quantities"
        ),
    ),
]


def _utc(when: datetime | None) -> datetime | None:
    if when is None:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _window(
    from_time: datetime | None, to_time: datetime | None
) -> tuple[datetime | None, datetime | None]:
    start, end = _utc(from_time), _utc(to_time)
    if start and end and end <= start:
        raise invalid("to", "must be after 'from'", status=400)
    return start, end


class ExportController(Controller):
    path = "/v1/export"
    tags = ["export"]

    @get(
        "/focus",
        guards=[requires("read")],
        summary=f"Priced usage as a FOCUS {FOCUS_VERSION} cost-and-usage CSV",
        description=(
            f"Streams the project's accepted events as a FinOps FOCUS {FOCUS_VERSION} "
            "CostAndUsage dataset: one row per event (an event that crosses a graduated-tier "
            "boundary gets one row per tier), with trainledger's own dimensions as `x_` "
            "columns. Events are selected by their own time, in [from, to). Money is exact: "
            "BilledCost is the ledger's charge; ListCost and ContractedCost are the exact "
            "products of unit price and quantity. The column mapping is documented in "
            "`service/export/focus.py`. With `granularity=hour` or `day` the rows are "
            "aggregated per UTC charge period instead, as providers' own exports are: the "
            "events of each period merged when every other column is equal, their costs "
            "and quantities summed exactly (`service/export/aggregate.py`)."
        ),
        media_type=CSV,
        response_description="CSV (RFC 4180, UTF-8, header row first)",
        operation_id="getFocusExport",
    )
    async def focus(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_time: FromTime = None,
        to_time: ToTime = None,
        granularity: GranularityParam = "event",
    ) -> Stream:
        start, end = _window(from_time, to_time)
        export = await prepare_export(services.store, services.rate_cards, project)
        filename = export_filename(project, start, end)
        chunks = await first_chunk_read(export.csv_chunks(start, end, granularity=granularity))
        return Stream(
            chunks,
            media_type=CSV,
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

    @post(
        "/focus/jobs",
        guards=[requires("read")],
        status_code=202,
        summary="Export as a job: the same FOCUS CSV, written in the background",
        description=(
            "The export `GET /v1/export/focus` streams, with the same parameters, run as a "
            "job instead: `202` with the job (and its `href` in `Location`) at once; poll "
            "`GET /v1/jobs/{job_id}` for its progress (events written, of the window's), and "
            "once it succeeded download its file at `download.href` "
            "(`GET /v1/jobs/{job_id}/file`, kept 24 hours). The file holds the log as it "
            "stood when the job was asked (a worker's restart runs the job again to the same "
            "file). Cancel it as any job (`DELETE /v1/jobs/{job_id}`). One export job per "
            "project is queued or running at a time: another is a 409 naming it."
        ),
        operation_id="postFocusExportJob",
        responses={
            202: ResponseSpec(Job, description="Queued: poll it at its `href`"),
            409: ResponseSpec(
                None,
                description="An export job of the project is already queued or running, or "
                "the project's rate card no longer exists",
            ),
        },
    )
    async def focus_job(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        from_time: FromTime = None,
        to_time: ToTime = None,
        granularity: GranularityParam = "event",
    ) -> Response[Job]:
        window = _window(from_time, to_time)
        job = await queue_export(services.store, services.rate_cards, project, window, granularity)
        return Response(job, status_code=202, headers={"Location": job.href})
