"""The read-only dashboard: `GET /ui` (project picker) and `GET /ui/{project}?from&to`.

It gets the page's figures from `dashboard.service` (the same domain functions the JSON
routes call) and hands them to `dashboard.page` for rendering; no rule is computed here.

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
from datetime import UTC, date, datetime
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
from ..auth.service import resolve_principal
from ..events.model import PROJECT_PATTERN
from ..http.deps import Services
from ..http.problems import invalid, problem
from ..http.ratelimit import TokenRateLimitMiddleware
from ..http.security import requires, unauthorized
from ..projects.service import visible_projects
from .page import render_dashboard, render_picker
from .service import dashboard_data

COOKIE = "trainledger_ui"
COOKIE_MAX_AGE = 12 * 3600  # a dashboard session; sign in again with ?token= after that
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
    then the cookie. A repeated `?token=` is a 400, as every repeated parameter of one value
    is elsewhere (which of two tokens signs in would be a guess)."""
    if len(connection.query_params.getall("token", [])) > 1:
        raise invalid("token", "give this parameter once", status=400)
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
        principal = await resolve_principal(state.store, token, state.settings.token_cache_seconds)
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
        return _html(render_picker(await visible_projects(services.store, request.user)))

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
        data = await dashboard_data(
            services.store, services.rate_cards, project, from_day, to_day, datetime.now(UTC)
        )
        return _html(render_dashboard(data))


@get(
    "/",
    include_in_schema=False,  # a door for people, not part of the JSON API
    opt={"exclude_from_auth": True},  # it shows nothing: the dashboard asks for the token
    status_code=303,
)
async def root() -> Redirect:
    """The service's address opened in a browser: the dashboard (its project picker)."""
    return Redirect("/ui", status_code=303)
