"""Each feature error answers the problem its route built by hand before errors had kinds
(issue 28, item 4): status, title, type, detail, extra members (in order) and headers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from litestar.plugins.problem_details import ProblemDetailsException
from trainledger.auth.service import TokenForbidden, TokenNotFound, UnfitTokenRequest
from trainledger.auth.store import LastUnscopedAdmin
from trainledger.budgets.service import BudgetConflict, BudgetNotFound
from trainledger.costs.query import QueryError
from trainledger.dashboard.service import DashboardQueryError
from trainledger.errors import Problem
from trainledger.evaluations.capacity import ResultsLimitReached
from trainledger.evaluations.service import ResultNotFound
from trainledger.events.decoding import (
    CONTENT_TYPES,
    MalformedBody,
    TooManyEvents,
    UnsupportedContentType,
)
from trainledger.export.pricing import ExportError
from trainledger.http.problems import OUTCOME_UNKNOWN, from_problem, invalid, problem
from trainledger.ingest.report import ForbiddenProject, IngestConflict
from trainledger.jobs.model import AffectedProject, JobFinished, JobNotFound
from trainledger.jobs.reprice import RepricingNeeded
from trainledger.plans.service import PlanNotFound
from trainledger.projects.service import CurrencyConflict, NothingToChange, UnknownRateCard
from trainledger.ratecards.service import RateCardNotFound, SharedCardForbidden
from trainledger.rebuild.service import RebuildError
from trainledger.waste.service import WasteQueryError
from trainledger.webhooks.service import WebhookForbidden, WebhookNotFound


class _Job:
    id = "j1"
    state = "done"


_JOB: Any = _Job()
AFFECTED = [AffectedProject("p", ["2026-01-01"], 3)]
EFFECTIVE = datetime(2026, 1, 1, tzinfo=UTC)
LIMIT = ResultsLimitReached(10, 9, 2)
CASES: list[tuple[Exception, ProblemDetailsException]] = [
    (
        JobFinished(_JOB),
        problem(
            409, "Conflict", "job 'j1' already ended (done)", kind="job-finished", state="done"
        ),
    ),
    (JobNotFound("p", "j1"), problem(404, "Not found", "no job 'j1' in 'p'", kind="not-found")),
    (PlanNotFound("p", "x"), problem(404, "Not found", "no plan 'x' in 'p'", kind="not-found")),
    (
        ResultNotFound("p", "r"),
        problem(
            404,
            "Not found",
            "no evaluation result 'r' in project 'p'",
            kind="not-found",
            field="result_id",
        ),
    ),
    (
        LIMIT,
        problem(
            409,
            "Too many evaluation results",
            str(LIMIT),
            kind="evaluation-results-limit",
            errors=[{"field": "results", "reason": str(LIMIT)}],
            limit=10,
            stored=9,
            new=2,
        ),
    ),
    (
        CurrencyConflict("p", "USD", "c", "EUR"),
        problem(
            409,
            "Conflict",
            "project 'p' keeps its ledger in USD; rate card 'c' is priced in EUR",
            kind="currency-conflict",
            field="rate_card",
        ),
    ),
    (UnknownRateCard("c"), invalid("rate_card", "no rate card named 'c'")),
    (NothingToChange(), invalid("$", "give rate_card and/or attribution_tags")),
    (RebuildError("boom"), problem(409, "Cannot rebuild", "boom", kind="rebuild-failed")),
    (ExportError("gone"), problem(409, "Cannot export", "gone", kind="conflict")),
    (
        RepricingNeeded(AFFECTED, EFFECTIVE),
        problem(
            409,
            "Repricing needed",
            f"version effective {EFFECTIVE.isoformat()} changes figures already priced in 1 "
            "project(s): send it with reprice: true to store it and reprice them",
            kind="repricing-needed",
            field="effective_from",
            affected=[msgspec.to_builtins(a) for a in AFFECTED],
        ),
    ),
    (
        LastUnscopedAdmin("t"),
        problem(
            409,
            "Conflict",
            "token 't' is the last admin token for every project; mint another before revoking it",
            kind="last-admin",
            field="token_id",
        ),
    ),
    (TokenNotFound("t"), problem(404, "Not found", "no token with id 't'", kind="not-found")),
    (
        TokenForbidden("nope", "role"),
        problem(403, "Forbidden", "nope", kind="forbidden", field="role"),
    ),
    (UnfitTokenRequest("f", "r"), invalid("f", "r")),
    (
        ForbiddenProject("p", 2),
        problem(
            403,
            "Forbidden",
            "this token may not write to project 'p' (event 2)",
            kind="forbidden",
            errors=[{"field": "$[2].project", "reason": "outside the token's projects"}],
        ),
    ),
    (
        IngestConflict(),
        problem(
            503,
            "Busy",
            f"too much contention on this project; {OUTCOME_UNKNOWN}",
            kind="busy",
            headers={"Retry-After": "1"},
        ),
    ),
    (TooManyEvents(5), invalid("$", "a batch holds at most 5 events", status=413)),
    (MalformedBody("bad", "$[0]"), invalid("$[0]", "bad", status=400)),
    (
        UnsupportedContentType("text/plain"),
        problem(
            415,
            "Unsupported media type",
            f"text/plain is not accepted; use one of {', '.join(CONTENT_TYPES)}",
            kind="unsupported-media-type",
        ),
    ),
    (
        WebhookForbidden("p", 1),
        problem(
            403,
            "Forbidden",
            "this token may not access project 'p'",
            kind="forbidden",
            field="$.projects[1]",
        ),
    ),
    (WebhookNotFound("w"), problem(404, "Not found", "no webhook 'w'", kind="not-found")),
    (RateCardNotFound("c"), problem(404, "Not found", "no rate card named 'c'", kind="not-found")),
    (
        SharedCardForbidden(),
        problem(
            403,
            "Forbidden",
            "rate cards are global: only an admin token for every project may change one",
            kind="forbidden",
        ),
    ),
    (
        BudgetConflict("busy!"),
        problem(503, "Busy", "busy!", kind="busy", headers={"Retry-After": "1"}),
    ),
    (BudgetNotFound("p", "b"), problem(404, "Not found", "no budget 'b' in 'p'", kind="not-found")),
    (DashboardQueryError("from", "bad"), invalid("from", "bad", status=400)),
    (WasteQueryError("from", "bad"), invalid("from", "bad", status=400)),
    (QueryError("sort", "bad"), invalid("sort", "bad", status=400)),
]


def _shape(exc: ProblemDetailsException) -> tuple[Any, ...]:
    extra = exc.extra if isinstance(exc.extra, dict) else None
    keys = list(extra) if extra else []
    return (exc.status_code, exc.title, exc.detail, exc.type_, exc.headers, extra, keys)


@pytest.mark.parametrize(("error", "before"), CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_a_feature_error_answers_as_its_route_did(
    error: Problem, before: ProblemDetailsException
) -> None:
    assert _shape(from_problem(error)) == _shape(before)
