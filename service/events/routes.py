from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
import msgspec
from litestar import Controller, Litestar, Request, Response, delete, get, post
from litestar.background_tasks import BackgroundTask, BackgroundTasks
from litestar.datastructures import Cookie, MutableScopeHeaders
from litestar.di import NamedDependency
from litestar.enums import MediaType
from litestar.openapi.spec import Operation, RequestBody
from litestar.params import JSONBody, QueryParameter
from litestar.response.base import ASGIResponse
from litestar.serialization import get_serializer
from litestar.status_codes import HTTP_200_OK
from litestar.types import TypeEncodersMap

from ..auth.model import Principal
from ..http.bodies import read_body
from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import authorize, requires
from ..ingest.body import ingest_body
from ..ingest.rejected import (
    CURSOR_PATTERN,
    DeleteRejectedIn,
    RejectedPage,
    ReplayIn,
    rejected_page,
    replay_rejected,
)
from ..ingest.rejected import (
    drop_rejected as drop_dead_letters,
)
from ..ingest.report import IngestReport
from ..ingest.service import CHECK_IN_THREAD_EVENTS
from ..metrics import count_ingest
from .decoding import (
    CLOUDEVENT,
    CLOUDEVENT_BATCH,
    MSGPACK,
    NDJSON,
    media_type_of,
    route_media_type,
)


@dataclass
class EventsOperation(Operation):
    """OpenAPI for the ingest routes (`POST /v1/events` and one route per other format): the
    body is read raw so that its format decides how it is decoded; `service/http/openapi.py`
    documents each route's one content type with its schema (`add_wire_schemas`)."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            required=True,
            description="Fields, limits and the CloudEvents mapping: docs/reference/events.md.",
            content={},  # filled by `add_wire_schemas`
        )


class _EncodedJson(ASGIResponse):
    """A 200 JSON answer already encoded: what `ASGIResponse(body=..., media_type=JSON)` holds,
    with its two headers written directly. `ASGIResponse.__init__` (deliberately not called:
    every slot is set here) builds them through `MutableScopeHeaders.setdefault`, ~45k
    instructions of a one-event post's ~1.8M. Sending is Litestar's own `__call__`."""

    def __init__(self, body: bytes, status_code: int) -> None:
        self.background = None
        self.body = body
        self.content_length = len(body)
        self.encoding = "utf-8"
        self.is_head_response = False
        self.status_code = status_code
        self._encoded_cookies = ()
        self.headers = MutableScopeHeaders(
            {
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode("latin-1")),
                ]
            }
        )


class _ReportResponse(Response[IngestReport]):
    """The answer to an ingest: `Response(report)`, rendered by Litestar's own `render` (same
    bytes) into an `_EncodedJson` when nothing but the report and a 200 goes into it;
    anything else (headers, cookies, background tasks, another media type) goes through
    Litestar's `to_asgi_response`."""

    def to_asgi_response(
        self,
        app: Litestar | None,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        plain = (
            app is None
            and background is None
            and self.background is None
            and not cookies
            and not self.cookies
            and encoded_headers is None
            and not headers
            and not self.headers
            and not is_head_response
            and not self.response_type_encoders
            and (self.media_type or media_type or MediaType.JSON) == MediaType.JSON
        )
        status = self.status_code or status_code or HTTP_200_OK
        if plain and status == HTTP_200_OK:
            body = self.render(self.content, MediaType.JSON, get_serializer(type_encoders))
            return _EncodedJson(body, status)
        return super().to_asgi_response(
            app,
            request,
            background=background,
            cookies=cookies,
            encoded_headers=encoded_headers,
            headers=headers,
            is_head_response=is_head_response,
            media_type=media_type,
            status_code=status_code,
            type_encoders=type_encoders,
        )


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
    return _ReportResponse(report, status_code=200)


async def _reported(report: IngestReport) -> Response[Any]:
    if len(report.rejected) > CHECK_IN_THREAD_EVENTS:  # counted and answered in a thread
        return await anyio.to_thread.run_sync(_reported_now, report)
    return _reported_now(report)


def _reported_now(report: IngestReport) -> Response[Any]:
    count_ingest(report.accepted, report.duplicates, (r.field for r in report.rejected))
    return _answer(report)


async def _ingest(request: Request[Principal, str, Any], media: str) -> Response[IngestReport]:
    """The body of an ingest route, read within its limit and ingested as `media`."""
    services: Services = request.app.state.services
    body = await read_body(request, services.settings.max_body_bytes)
    report = await ingest_body(
        services.ingestor, body, media, request.user, services.settings.max_batch_events
    )
    return await _reported(report)


class EventsController(Controller):
    path = "/v1/events"
    tags = ["events"]

    # The hottest route: it checks `requires("ingest")` itself (`authorize`) and takes the
    # services from the app state, not through a guard and a dependency. Litestar copies the
    # handler object for every guard call (~120k instructions) and resolves a dependency
    # through two signature models (~55k): ~10 % of a one-event post. Same answers, same
    # order of checks (the token's role and projects before the body is read).
    @post(
        "/",
        operation_class=EventsOperation,
        status_code=200,
        summary="Post one usage event or a batch",
        description=(
            "The body is JSON: one `EventIn` or an array of them. Answers with the number "
            "accepted, the duplicates (already counted, by id) and each rejected event with "
            "its index, id and reason. Rejected events are kept for `GET /v1/events/rejected`. "
            "422 when every event was rejected. Each other format has its own operation "
            "(`/v1/events/cloudevents`, `/cloudevent`, `/ndjson`, `/msgpack`); this one also "
            "still reads them when the body is sent under their content type."
        ),
        responses={},
        # Its own limit, `max_body_bytes` (read_body); the app's is for the other routes.
        request_max_body_size=None,
        operation_id="postEvents",
    )
    async def post_events(self, request: Request[Principal, str, Any]) -> Response[IngestReport]:
        authorize(request, "ingest")
        return await _ingest(request, media_type_of(request.headers.get("content-type")))

    # One route per other format, each documenting one body: a generated client gets one
    # function per format (openapi-python-client cannot generate an operation with several
    # bodies that works: docs/reference/api.md, "Generating a client"). Same checks, same
    # limit, same service call as `POST /v1/events`; only the format comes from the path.
    @post(
        "/cloudevents",
        operation_class=EventsOperation,
        status_code=200,
        summary="Post a batch of CloudEvents",
        description=(
            "The body is a CloudEvents 1.0 batch (`application/cloudevents-batch+json`): an "
            "array of `CloudEvent` envelopes, each one usage event. Answers as "
            "`POST /v1/events`."
        ),
        responses={},
        request_max_body_size=None,
        operation_id="postCloudEvents",
    )
    async def post_cloud_events(
        self, request: Request[Principal, str, Any]
    ) -> Response[IngestReport]:
        authorize(request, "ingest")
        content_type = request.headers.get("content-type")
        return await _ingest(request, route_media_type(content_type, CLOUDEVENT_BATCH))

    @post(
        "/cloudevent",
        operation_class=EventsOperation,
        status_code=200,
        summary="Post one CloudEvent",
        description=(
            "The body is one CloudEvents 1.0 envelope in structured mode "
            "(`application/cloudevents+json`): one usage event. Answers as `POST /v1/events`."
        ),
        responses={},
        request_max_body_size=None,
        operation_id="postCloudEvent",
    )
    async def post_cloud_event(
        self, request: Request[Principal, str, Any]
    ) -> Response[IngestReport]:
        authorize(request, "ingest")
        content_type = request.headers.get("content-type")
        return await _ingest(request, route_media_type(content_type, CLOUDEVENT))

    @post(
        "/ndjson",
        operation_class=EventsOperation,
        status_code=200,
        summary="Post a batch of events as NDJSON",
        description=(
            "The body is NDJSON (`application/x-ndjson`, or `application/jsonl`): one `EventIn` "
            "JSON object a line, blank lines skipped. Answers as `POST /v1/events`."
        ),
        responses={},
        request_max_body_size=None,
        operation_id="postEventsNdjson",
    )
    async def post_events_ndjson(
        self, request: Request[Principal, str, Any]
    ) -> Response[IngestReport]:
        authorize(request, "ingest")
        content_type = request.headers.get("content-type")
        return await _ingest(request, route_media_type(content_type, NDJSON))

    @post(
        "/msgpack",
        operation_class=EventsOperation,
        status_code=200,
        summary="Post one event or a batch as msgpack",
        description=(
            "The body is msgpack (`application/msgpack`, or `application/vnd.msgpack`, "
            "`application/x-msgpack`): one `EventIn` map or an array of them. Answers as "
            "`POST /v1/events`."
        ),
        responses={},
        request_max_body_size=None,
        operation_id="postEventsMsgpack",
    )
    async def post_events_msgpack(
        self, request: Request[Principal, str, Any]
    ) -> Response[IngestReport]:
        authorize(request, "ingest")
        content_type = request.headers.get("content-type")
        return await _ingest(request, route_media_type(content_type, MSGPACK))

    @get(
        "/rejected",
        guards=[requires("read")],
        summary="List rejected events (dead letters)",
        operation_id="getRejectedEvents",
        description=(
            "A page of the project's rejected events (dead letters): each with its index, id, "
            "reason and the event as sent. Page with `offset` or with `after` (a page's "
            "`next_cursor`)."
        ),
    )
    async def list_rejected(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        offset: Annotated[int, QueryParameter(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        after: Annotated[
            str | None,
            QueryParameter(
                pattern=CURSOR_PATTERN,
                description="a page's `next_cursor`: the page after it (instead of `offset`)",
            ),
        ] = None,
    ) -> RejectedPage:
        return await rejected_page(services.store, project, offset, limit, after)

    @post(
        "/rejected/replay",
        guards=[requires("ingest")],
        status_code=200,
        summary="Submit stored rejected events again",
        description="Use after fixing the cause (for example adding the SKU to the rate card). "
        "Accepted ones leave the dead-letter store; the others stay with their new reason.",
        operation_id="postRejectedEventsReplay",
        request_example={"ids": ["job-4242-step-1"]},
    )
    async def replay(
        self,
        project: ProjectParam,
        data: JSONBody[ReplayIn],
        request: Request[Principal, str, Any],
        services: NamedDependency[Services],
    ) -> Response[IngestReport]:
        report = await replay_rejected(
            services.store,
            services.ingestor,
            project,
            data.ids,
            request.user,
            services.settings.max_batch_events,
        )
        return await _reported(report)

    @delete(
        "/rejected",
        guards=[requires("ingest")],
        summary="Drop rejected events",
        status_code=200,
        operation_id="deleteRejectedEvents",
        description=(
            "Drops the named rejected events from the dead-letter store for good; answers how many"
            " were deleted."
        ),
        request_example={"ids": ["job-4242-step-1"]},
    )
    async def drop_rejected(
        self,
        project: ProjectParam,
        data: JSONBody[DeleteRejectedIn],
        services: NamedDependency[Services],
    ) -> dict[str, int]:
        return {"deleted": await drop_dead_letters(services.store, project, data.ids)}
