from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.openapi.spec import (
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
)
from litestar.params import JSONBody, QueryParameter

from service.domain.auth import Principal
from service.domain.events import (
    CONTENT_TYPES,
    PROJECT_PATTERN,
    DecodedItem,
    EventIn,
    MalformedBody,
    UnsupportedContentType,
    decode_events,
    media_type_of,
)
from service.domain.ingest import ForbiddenProject, IngestConflict, IngestReport
from service.http.deps import Services
from service.http.problems import invalid, problem
from service.http.security import requires
from service.metrics import count_ingest

ProjectParam = Annotated[str, QueryParameter(pattern=PROJECT_PATTERN, description="project name")]


@dataclass
class EventsOperation(Operation):
    """OpenAPI for `POST /v1/events`: the body is read raw so that every content type works."""

    def __post_init__(self) -> None:
        event = Reference(ref="#/components/schemas/EventIn")
        ref = Schema(one_of=[event, Schema(type=OpenAPIType.ARRAY, items=event)])
        self.request_body = RequestBody(
            required=True,
            description=(
                "One event or a batch. JSON, NDJSON (one event a line), msgpack, or CloudEvents "
                "1.0 (structured or batch); see the README for the CloudEvents mapping."
            ),
            content={media: OpenAPIMediaType(schema=ref) for media in CONTENT_TYPES},
        )


class RejectedRecord(msgspec.Struct):
    id: str
    project: str
    reason: str
    field: str | None
    rejected_at: str
    event: Any


class RejectedPage(msgspec.Struct):
    project: str
    items: list[RejectedRecord]
    offset: int
    limit: int
    total: int
    next_offset: int | None


class ReplayIn(msgspec.Struct, forbid_unknown_fields=True):
    ids: list[str] | None = None  # None: every stored rejected event of the project


class DeleteRejectedIn(msgspec.Struct, forbid_unknown_fields=True):
    ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10_000)]


_record_decoder = msgspec.json.Decoder(RejectedRecord)
_event_decoder = msgspec.json.Decoder(EventIn)


def _answer(report: IngestReport) -> Response[Any]:
    if report.rejected and report.accepted == 0 and report.duplicates == 0:
        body = msgspec.to_builtins(report)
        body.update(
            {
                "type": "https://trainledger.dev/problems/events-rejected",
                "title": "Every event was rejected",
                "status": 422,
                "detail": "; ".join(
                    f"{r.field or r.index}: {r.reason}" for r in report.rejected[:5]
                ),
                "errors": [
                    {"field": r.field or f"$[{r.index}]", "reason": r.reason}
                    for r in report.rejected
                ],
            }
        )
        return Response(body, status_code=422, media_type="application/problem+json")
    return Response(report, status_code=200)


async def run_ingest(
    services: Services, items: list[DecodedItem], principal: Principal, batch: bool = True
) -> Response[Any]:
    try:
        report = await services.ingestor.ingest(items, principal, batch)
    except ForbiddenProject as exc:
        raise problem(
            403,
            "Forbidden",
            f"this token may not write to project {exc.project!r} (event {exc.index})",
            kind="forbidden",
            errors=[{"field": f"$[{exc.index}].project", "reason": "outside the token's projects"}],
        ) from exc
    except IngestConflict as exc:
        raise problem(
            503,
            "Busy",
            "too much contention on this project; retry",
            kind="busy",
            headers={"Retry-After": "1"},
        ) from exc
    count_ingest(report.accepted, report.duplicates, (r.field for r in report.rejected))
    return _answer(report)


class EventsController(Controller):
    path = "/v1/events"
    tags = ["events"]

    @post(
        "/",
        guards=[requires("ingest")],
        operation_class=EventsOperation,
        status_code=200,
        summary="Post one usage event or a batch",
        description=(
            "Answers with the number accepted, the duplicates (already counted, by id) and each "
            "rejected event with its index, id and reason. Rejected events are kept for "
            "`GET /v1/events/rejected`. 422 when every event was rejected."
        ),
        responses={},
    )
    async def post_events(
        self, request: Request[Principal, str, Any], services: NamedDependency[Services]
    ) -> Response[IngestReport]:
        try:
            media = media_type_of(request.headers.get("content-type"))
        except UnsupportedContentType as exc:
            raise problem(
                415,
                "Unsupported media type",
                f"{exc} is not accepted; use one of {', '.join(CONTENT_TYPES)}",
                kind="unsupported-media-type",
            ) from exc
        body = await request.body()
        if len(body) > services.settings.max_body_bytes:
            raise problem(
                413, "Body too large", "the body exceeds the size limit", kind="too-large"
            )
        try:
            items, batch = decode_events(body, media)
        except MalformedBody as exc:
            raise invalid(exc.field, exc.reason, status=400) from exc
        if len(items) > services.settings.max_batch_events:
            raise invalid(
                "$",
                f"a batch holds at most {services.settings.max_batch_events} events",
                status=413,
            )
        return await run_ingest(services, items, request.user, batch)

    @get("/rejected", guards=[requires("read")], summary="List rejected events (dead letters)")
    async def list_rejected(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        offset: Annotated[int, QueryParameter(ge=0)] = 0,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
    ) -> RejectedPage:
        raws, total = await services.store.rejected_page(project, offset, limit)
        items = [_record_decoder.decode(r) for r in raws]
        end = offset + limit
        return RejectedPage(project, items, offset, limit, total, end if end < total else None)

    @post(
        "/rejected/replay",
        guards=[requires("ingest")],
        status_code=200,
        summary="Submit stored rejected events again",
        description="Use after fixing the cause (for example adding the SKU to the rate card). "
        "Accepted ones leave the dead-letter store; the others stay with their new reason.",
    )
    async def replay(
        self,
        project: ProjectParam,
        data: JSONBody[ReplayIn],
        request: Request[Principal, str, Any],
        services: NamedDependency[Services],
    ) -> Response[IngestReport]:
        if data.ids is None:
            raws, _ = await services.store.rejected_page(
                project, 0, services.settings.max_batch_events
            )
        else:
            raws = [r for r in await services.store.rejected_records(project, data.ids) if r]
        items = []
        for i, raw in enumerate(raws):
            record = _record_decoder.decode(raw)
            try:
                event = _event_decoder.decode(msgspec.json.encode(record.event))
                items.append(DecodedItem(i, event))
            except msgspec.ValidationError as exc:
                items.append(DecodedItem(i, None, str(exc), "$", record.event))
        return await run_ingest(services, items, request.user)

    @delete(
        "/rejected", guards=[requires("ingest")], summary="Drop rejected events", status_code=200
    )
    async def drop_rejected(
        self,
        project: ProjectParam,
        data: JSONBody[DeleteRejectedIn],
        services: NamedDependency[Services],
    ) -> dict[str, int]:
        return {"deleted": await services.store.delete_rejected(project, data.ids)}
