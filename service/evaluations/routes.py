from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal, cast

from litestar import Controller, Request, delete, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody, PathParameter, QueryParameter
from litestar.response import Response

from ..auth.model import Principal
from ..events.model import LABEL_PATTERN
from ..export.cost_effect import cost_effect_csv, cost_effect_filename
from ..http.deps import Services
from ..http.params import ProjectParam
from ..http.security import requires
from .capacity import CURSOR_PATTERN
from .effect import CostEffectReport
from .listing import DEFAULT_PAGE, MAX_PAGE, ResultsPage, results_page
from .model import AuditPage, EvaluationSettings, ResultAudit, ResultsAccepted, ResultsIn
from .service import (
    Actor,
    TimeBounds,
    cost_effect_report,
    delete_result,
    evaluation_settings,
    report_filter,
    report_results,
    result_audit,
    update_evaluation_settings,
)

JSON, CSV = "application/json", "text/csv"
Filter = Annotated[
    str | None,
    QueryParameter(pattern=LABEL_PATTERN, description="keep only events with this value"),
]


class EvaluationController(Controller):
    path = "/v1/evaluations"
    tags = ["evaluations"]

    @post(
        "/",
        guards=[requires("ingest")],
        status_code=200,
        summary="Report evaluation results (a batch, idempotent by id)",
        operation_id="postEvaluations",
        description="Each result: an experiment's value on a benchmark at a step or tokens "
        "seen, at a `time` in RFC 3339 within the events' range (not older than the "
        "deduplication window, not further ahead than the future skew). A result whose id is "
        "already stored is counted as a duplicate and changes nothing, unless it carries a "
        "higher `version`: then it replaces the stored one (a correction, audited: "
        "`GET /v1/evaluations/audit`). Then each running experiment's general benchmark "
        "now regressed past the tolerance fires an `evaluation_regression` alert to the "
        "webhooks, once per (experiment, benchmark, baseline) (docs/guides/cost-effect.md). "
        "A project keeps at most `TRAINLEDGER_MAX_EVALUATION_RESULTS` results "
        "(100,000 by default; duplicates do not count): a batch whose new results would pass "
        "it is refused whole (409) and stores nothing.",
        responses={
            409: ResponseSpec(
                None,
                description="The batch's new results would take the project past the results "
                "it may keep: nothing was stored",
            )
        },
        request_example={
            "project": "llm-7b",
            "results": [
                {
                    "id": "mix-a.gsm8k.step-20000",
                    "experiment": "mix-a",
                    "benchmark": "gsm8k",
                    "value": "41.5",
                    "higher_is_better": True,
                    "step": 20000,
                    "tokens_seen": 84000000000,
                }
            ],
        },
    )
    async def report(
        self,
        data: JSONBody[ResultsIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> ResultsAccepted:
        # The guard checked the body's project (`service.http.security`).
        settings = services.settings
        bounds = TimeBounds(settings.dedup_window_days, settings.max_future_skew_hours)
        return await report_results(
            services.store,
            services.rate_cards,
            data,
            limit=settings.max_evaluation_results,
            bounds=bounds,
            actor=Actor.of(request.user),
        )

    @get(
        "/",
        guards=[requires("read")],
        summary="A page of a project's evaluation results",
        operation_id="getEvaluations",
        description="The project's stored results (or one experiment's), oldest first (by "
        "time, then id), a page at a time: `limit` results (100 by default, at most 1000), "
        "from `offset` or after `after` (a page's `next_cursor`, which keeps its place when "
        "results are added meanwhile). `next_cursor` and `next_offset` are null on the last "
        "page.",
    )
    async def results(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        experiment: Filter = None,
        offset: Annotated[int, QueryParameter(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
        after: Annotated[
            str | None,
            QueryParameter(
                pattern=CURSOR_PATTERN,
                description="a page's `next_cursor`: the page after it (instead of `offset`)",
            ),
        ] = None,
    ) -> ResultsPage:
        return await results_page(services.store, project, experiment, offset, limit, after)

    @delete(
        "/{result_id:str}",
        guards=[requires("ingest")],
        status_code=200,
        summary="Delete an evaluation result (audited)",
        operation_id="deleteEvaluation",
        description="Deletes the stored result of this id; the answer is its audit record "
        "(who, when, the result deleted), also listed by `GET /v1/evaluations/audit`. The "
        "cost-effect report and the regression state follow at once: the regression alerts "
        "the remaining results call for fire (each once). Posting the id again (any version) "
        "stores it anew. 404 when no result of this id is stored.",
        responses={404: ResponseSpec(None, description="No result of this id is stored")},
    )
    async def delete_one(
        self,
        result_id: Annotated[str, PathParameter(pattern=LABEL_PATTERN, max_length=128)],
        project: ProjectParam,
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> ResultAudit:
        actor = Actor.of(request.user)
        return await delete_result(services.store, services.rate_cards, project, result_id, actor)

    @get(
        "/audit",
        guards=[requires("read")],
        summary="The project's corrections and deletions of evaluation results",
        operation_id="getEvaluationAudit",
        description="Each correction (a higher `version` of a stored id) and deletion: the "
        "token that made it (id and name), when, and the result before and after. Newest "
        "first; the project keeps its last 10,000.",
    )
    async def audit(
        self,
        project: ProjectParam,
        services: NamedDependency[Services],
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    ) -> AuditPage:
        return await result_audit(services.store, project, limit)

    @get(
        "/settings",
        guards=[requires("read")],
        summary="The project's evaluation settings",
        operation_id="getEvaluationSettings",
        description="The baseline experiment, each benchmark's kind, the regression tolerance "
        "and experiments' planned tokens.",
    )
    async def get_settings(
        self, project: ProjectParam, services: NamedDependency[Services]
    ) -> EvaluationSettings:
        return await evaluation_settings(services.store, project)

    @put(
        "/settings",
        guards=[requires("admin")],
        status_code=200,
        summary="Set the project's evaluation settings",
        operation_id="putEvaluationSettings",
        description="The baseline experiment, each benchmark's kind (general or target), the "
        "regression tolerance and experiments' planned tokens. Regressions the new settings "
        "reveal fire their `evaluation_regression` alerts (once each).",
        request_example={
            "baseline": "flat",
            "benchmarks": {"general_qa": "general", "gsm8k": "target"},
            "tolerance": "1.5",
            "planned_tokens": {"mix-a": 200000000000},
        },
    )
    async def put_settings(
        self,
        project: ProjectParam,
        data: JSONBody[EvaluationSettings],
        services: NamedDependency[Services],
    ) -> EvaluationSettings:
        return await update_evaluation_settings(services.store, services.rate_cards, project, data)


class CostEffectController(Controller):
    path = "/v1/reports"
    tags = ["reports"]

    @get(
        "/cost-effect",
        guards=[requires("read")],
        summary="Cost and effect per experiment, in one table",
        operation_id="getCostEffectReport",
        description="Per experiment: its cost from the ledger (by category and stage), "
        "accelerator-hours, tokens seen, the latest value of each benchmark against the "
        "baseline, cost per point gained on target benchmarks, regressions on general "
        "benchmarks with their rework exposure, the cost/score Pareto front, and the forecast "
        "cost at completion. The rules: docs/guides/cost-effect.md. As CSV (one row per "
        "experiment, money exact) with `format=csv` or `Accept: text/csv`.",
        opt={"csv_alternative": True},
    )
    async def cost_effect(
        self,
        request: Request[Any, Any, Any],
        project: ProjectParam,
        services: NamedDependency[Services],
        stage: Filter = None,
        owner: Filter = None,
        tag: Annotated[
            list[str] | None, QueryParameter(description="<key>:<value>, repeatable")
        ] = None,
        from_day: Annotated[
            date | None, QueryParameter(name="from", description="first day (inclusive, UTC)")
        ] = None,
        to_day: Annotated[
            date | None, QueryParameter(name="to", description="last day (exclusive, UTC)")
        ] = None,
        answer_format: Annotated[
            Literal["json", "csv"] | None,
            QueryParameter(name="format", description="csv, or json (default: by Accept)"),
        ] = None,
    ) -> Response[CostEffectReport]:
        filters = report_filter(stage, owner, tag or [], from_day, to_day)
        report = await cost_effect_report(services.store, services.rate_cards, project, filters)
        wanted = answer_format or (
            "csv" if request.accept.best_match([JSON, CSV]) == CSV else "json"
        )
        if wanted == "json":
            return Response(report)
        disposition = f'attachment; filename="{cost_effect_filename(project)}"'
        # The same 200 answer as text/csv (documented by `http.openapi.document_csv_answers`).
        return cast(
            "Response[CostEffectReport]",
            Response(
                cost_effect_csv(report),
                media_type=CSV,
                headers={"Content-Disposition": disposition},
            ),
        )
