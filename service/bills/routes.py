from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIFormat,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    RequestBody,
    Schema,
)
from litestar.params import JSONBody, QueryParameter

from ..auth.model import Principal
from ..http.bodies import too_large
from ..http.deps import Services
from ..http.params import PathProject, ProjectParam
from ..http.security import requires
from .drift import DriftReport, drift_report
from .model import BillMapping, BillMappingView
from .service import BillImport, get_mapping, import_bill, put_mapping

# A bill is streamed, never held: this only bounds how long one upload may run.
MAX_BILL_BYTES = 8 << 30
FromDay = Annotated[date | None, QueryParameter(name="from", description="first day (inclusive)")]
ToDay = Annotated[date | None, QueryParameter(name="to", description="last day (exclusive)")]
_CSV = Schema(
    type=OpenAPIType.STRING,
    format=OpenAPIFormat.BINARY,
    description="A FOCUS 1.0 or 1.2 billing export: CSV with a header line, or that CSV "
    "gzip-compressed (told by its first bytes). Columns: docs/guides/reconciliation.md.",
)


@dataclass
class BillUploadOperation(Operation):
    """OpenAPI for `POST /v1/bills/imports`: the body is streamed raw (CSV or gzip CSV)."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            required=True,
            description="The billing export, streamed: read row by row as it arrives.",
            # One documented body (a generated client gets one function per body); the body is
            # told by its first bytes, so `application/gzip` or any other type is read alike.
            content={"text/csv": OpenAPIMediaType(schema=_CSV)},
        )


async def _bounded(request: Request[Any, Any, Any]) -> AsyncIterator[bytes]:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BILL_BYTES:
            raise too_large()
        yield chunk


class BillController(Controller):
    path = "/v1/bills"
    tags = ["bills"]

    @post(
        "/imports",
        operation_class=BillUploadOperation,
        guards=[requires("admin")],
        status_code=201,
        request_max_body_size=None,
        summary="Import a provider's billing export (FOCUS CSV)",
        operation_id="postBillImport",
        description=(
            "Reads a FOCUS 1.0 or 1.2 export (CSV or gzip CSV) as it streams in, stages its "
            "rows and commits them at once: `201` with the import. The same content again "
            "changes nothing: `200` with the earlier import (`status: duplicate`). A file "
            "that cannot be read (a required column missing, a bad number or date) is a `422` "
            "naming the `row` and `column`, and nothing of it is kept. Only an admin token for "
            "every project may import."
        ),
        responses={
            200: ResponseSpec(BillImport, description="Imported before: nothing changed"),
        },
    )
    async def post_import(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> Response[BillImport]:
        record = await import_bill(services.store, request.user, _bounded(request))
        return Response(record, status_code=201 if record.status == "imported" else 200)

    @put(
        "/mappings/{project:str}",
        guards=[requires("admin")],
        summary="Set which bill rows are the project's, and their SKUs",
        operation_id="putBillMapping",
        description=(
            "Which bill rows belong to the project (any of `match`: a tag, a sub-account, a "
            "resource id prefix) and which rate-card SKU each is (the first of `skus` to "
            "match, by SkuId, SkuPriceId, ServiceName and ConsumedUnit). Applied when a drift "
            "report is read, so it re-attributes bills already imported."
        ),
        request_example={
            "match": [{"tag_key": "project", "tag_value": "llm-7b"}],
            "skus": [{"sku": "gpu.h100.hour", "sku_id": "H100-OD"}],
        },
    )
    async def put_mapping(
        self,
        project: PathProject,
        data: JSONBody[BillMapping],
        services: NamedDependency[Services],
    ) -> BillMappingView:
        return await put_mapping(services.store, project, data)

    @get(
        "/mappings/{project:str}",
        guards=[requires("read")],
        summary="The project's bill mapping",
        operation_id="getBillMapping",
        description="The project's bill mapping as set; `404` when it has none.",
    )
    async def get_mapping(
        self, project: PathProject, services: NamedDependency[Services]
    ) -> BillMappingView:
        return await get_mapping(services.store, project)

    @get(
        "/drift",
        guards=[requires("read")],
        summary="The ledger against the bills, per SKU and day",
        operation_id="getBillDrift",
        description=(
            "Per SKU and day: the ledger's quantity and cost beside the bill rows the "
            "project's mapping takes (consumed quantity, BilledCost, EffectiveCost, the "
            "effective unit price beside the rate card's), with a status: `reconciled` "
            "(within the tolerance shown), `over` or `under` (the bill against the ledger), "
            "`billed_not_metered`, `metered_not_billed`, or `pending` (a day the provider may "
            "still change). Unattributed spend (rows no mapping takes) is shown to a token "
            "for every project only."
        ),
    )
    async def get_drift(
        self,
        request: Request[Principal, str, State],
        project: ProjectParam,
        services: NamedDependency[Services],
        from_day: FromDay = None,
        to_day: ToDay = None,
    ) -> DriftReport:
        return await drift_report(
            services.store,
            services.rate_cards,
            project,
            from_day,
            to_day,
            request.user.unscoped,
        )
