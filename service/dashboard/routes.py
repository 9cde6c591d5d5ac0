"""The read-only dashboard: `GET /ui` (project picker) and `GET /ui/{project}?from&to`.

It calls the same domain functions as the JSON routes (`cost_summary`, `cost_report`,
`budget_status`, `plan_status`, `waste_report`) and hands their results to
`service.dashboard` for rendering; no rule is computed here.

Authentication. A browser cannot easily send a bearer header, so besides the header the
dashboard accepts the token once as `?token=`: the token is checked like any bearer token, set
as an HttpOnly, SameSite=Strict cookie scoped to `/ui`, and the browser is redirected (303) to
the same page without it, so the token does not stay in the address bar or the history. Later
requests carry the cookie. The cookie is only read under `/ui` (the JSON API still needs the
header), and SameSite=Strict keeps other sites from sending it. The `read` role suffices;
project-scoped tokens see only their projects. The pages load no script, font or URL
(`Content-Security-Policy: default-src 'none'`), so a hostile label cannot run anything even if
it escaped the escaping.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency
from litestar.enums import MediaType
from litestar.middleware import (
    AbstractAuthenticationMiddleware,
    AuthenticationResult,
    DefineMiddleware,
)
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect

from ..auth.model import Principal
from ..budgets.routes import _currency
from ..budgets.service import budget_status, list_budgets
from ..costs.queries import QueryError, cost_report, cost_summary
from ..events.model import PROJECT_PATTERN, EventIn
from ..http.deps import Services
from ..http.problems import invalid, problem
from ..http.ratelimit import TokenRateLimitMiddleware
from ..http.security import _resolve, requires, unauthorized
from ..ledger.eventlog import read_log
from ..plans.service import list_plans, plan_status
from ..waste.service import waste_report
from .page import (
    BudgetPanel,
    DashboardData,
    PlanPanel,
    render_dashboard,
    render_picker,
)
from .series import burn_down_points

COOKIE = "trainledger_ui"
COOKIE_MAX_AGE = 12 * 3600  # a dashboard session; sign in again with ?token= after that
DEFAULT_DAYS = 30
MAX_DAYS = 366
TOP_EXPERIMENTS = 10
MAX_PLANS = 10
_PROJECT_RE = re.compile(PROJECT_PATTERN)

# No script, no external resource, no framing, no referrer: the page is self-contained.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _token_of(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """`?token=` first (it is a sign-in: that token goes into the cookie), then the header,
    then the cookie."""
    if connection.query_params.get("token"):
        return str(connection.query_params["token"])
    scheme, _, value = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return connection.cookies.get(COOKIE) or None


class DashboardAuthMiddleware(AbstractAuthenticationMiddleware):
    """The bearer header, a one-time `?token=`, or the dashboard cookie — checked alike."""

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        token = _token_of(connection)
        if token is None:
            raise unauthorized(
                "open the dashboard once as /ui?token=<token> (a read token suffices), or send "
                "an 'Authorization: Bearer <token>' header"
            )
        state = connection.app.state
        principal = await _resolve(state.store, token, state.settings.token_cache_seconds)
        if principal is None:
            raise unauthorized("the token is unknown or revoked")
        return AuthenticationResult(user=principal, auth=token)


def _html(body: str) -> Response[str]:
    return Response(body, media_type=MediaType.HTML, headers=SECURITY_HEADERS)


def _sign_in(request: Request[Principal, str, State]) -> Redirect | None:
    """A `?token=` request: keep the token in a cookie and drop it from the address."""
    if not request.query_params.get("token"):
        return None
    rest = {k: v for k, v in request.query_params.items() if k != "token"}
    cookie = Cookie(
        key=COOKIE,
        value=str(request.auth),
        path="/ui",
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return Redirect(
        request.url.path,
        query_params=rest or None,  # no bare "?" when the token was the only parameter
        status_code=303,
        cookies=[cookie],
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
    )


def _range(from_day: date | None, to_day: date | None, today: date) -> tuple[date, date]:
    last = to_day or today
    first = from_day or last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise invalid("from", "must not be after 'to'", status=400)
    if (last - first).days + 1 > MAX_DAYS:
        raise invalid("from", f"show at most {MAX_DAYS} days at once", status=400)
    return first, last


async def gather(
    services: Services, project: str, first: date, last: date, now: datetime
) -> DashboardData:
    """The page's figures, from the same domain calls the JSON routes make."""
    store = services.store
    end = last + timedelta(days=1)  # the cost queries take `to` exclusive
    try:
        summary = await cost_summary(store, project, first, end)
        by_stage = await cost_report(
            store, project, first, end, ["stage"], {}, 0, 10_000, granularity="day"
        )
        by_category = await cost_report(
            store, project, first, end, ["category"], {}, 0, 10_000, granularity="day"
        )
        experiments = await cost_report(
            store, project, first, end, ["experiment"], {}, 0, TOP_EXPERIMENTS + 1,
            top=TOP_EXPERIMENTS,
        )  # fmt: skip
    except QueryError as exc:
        raise invalid(exc.field, exc.reason, status=400) from exc
    currency = await _currency(services, project)

    budgets = await list_budgets(store, project)
    panels: list[BudgetPanel] = []
    if budgets:
        # The burn-down needs spend per day within each budget's scope: the log holds every
        # accepted event with its cost, and `budgets.matches` is the rule the counters use.
        priced: list[tuple[EventIn, str, int]] = []
        async for _, rows in read_log(store, project, await store.ledger.last_log_entry(project)):
            priced.extend((row.event(project), row.category, row.cost_nano) for row in rows)
        for budget in budgets:
            status = await budget_status(store, budget, currency, now)
            assert status.period_start is not None and status.period_end is not None
            points = burn_down_points(budget, status.period_start, status.period_end, now, priced)
            panels.append(BudgetPanel(status, points))

    records = sorted(await list_plans(store, project), key=lambda r: r.created_at, reverse=True)
    plans = [
        PlanPanel(record.plan.name, await plan_status(store, record, now))
        for record in records[:MAX_PLANS]
    ]
    try:
        waste = await waste_report(store, services.rate_cards, project, first, last, now)
    except ValueError as exc:
        raise invalid("from", str(exc), status=400) from exc
    return DashboardData(
        project=project,
        currency=summary.currency or currency,
        first_day=first,
        last_day=last,
        now=now,
        summary=summary,
        by_stage=by_stage,
        by_category=by_category,
        experiments=experiments,
        budgets=panels,
        plans=plans,
        waste=waste,
    )


class DashboardController(Controller):
    path = "/ui"
    include_in_schema = False  # HTML for people, not part of the JSON API
    # The app's bearer middleware skips these routes; the dashboard's own one (which also
    # takes the cookie) authenticates them, and the rate limit then counts the token.
    opt = {"exclude_from_auth": True}
    middleware = [
        DefineMiddleware(DashboardAuthMiddleware, exclude_from_auth_key="dashboard_public"),
        TokenRateLimitMiddleware(),
    ]
    guards = [requires("read")]

    @get("/", summary="Dashboard: pick a project")
    async def picker(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> Response[str] | Redirect:
        redirect = _sign_in(request)
        if redirect is not None:
            return redirect
        visible = [
            p for p in await services.store.projects.projects() if request.user.can_access(p)
        ]
        return _html(render_picker(visible))

    @get("/{project:str}", summary="Dashboard of one project")
    async def project_page(
        self,
        project: FromPath[str],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
        from_day: Annotated[
            date | None, QueryParameter(name="from", description="first day (inclusive)")
        ] = None,
        to_day: Annotated[
            date | None, QueryParameter(name="to", description="last day (inclusive)")
        ] = None,
    ) -> Response[str] | Redirect:
        if not _PROJECT_RE.match(project):
            raise problem(404, "Not found", "no such project", kind="not-found")
        redirect = _sign_in(request)
        if redirect is not None:
            return redirect
        now = datetime.now(UTC)
        first, last = _range(from_day, to_day, now.date())
        return _html(render_dashboard(await gather(services, project, first, last, now)))
