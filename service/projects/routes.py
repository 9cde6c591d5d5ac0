from __future__ import annotations

import re
from typing import Annotated

import msgspec
from litestar import Controller, Request, delete, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, JSONBody, PathParameter

from ..auth.model import Principal, TokenIn, TokenView, mint, view_of
from ..auth.store import LastUnscopedAdmin
from ..events.model import PROJECT_PATTERN, TagKey
from ..http.deps import Services
from ..http.problems import invalid, problem
from ..http.security import forget_cached_tokens, requires
from ..ingest.service import attribution_tags_of
from ..ledger.rebuild import RebuildError, RebuildReport, rebuild_project
from ..ratecards.model import NAME_PATTERN

_PROJECT_RE = re.compile(PROJECT_PATTERN)
PathProject = Annotated[str, PathParameter(pattern=PROJECT_PATTERN)]


class ProjectIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    rate_card: Annotated[str, msgspec.Meta(pattern=NAME_PATTERN)] | None = None
    # Tags that costs are attributed by (filter and group by them); a rebuild applies a
    # change to events already accepted.
    attribution_tags: Annotated[list[TagKey], msgspec.Meta(max_length=8)] | None = None


class ProjectView(msgspec.Struct):
    project: str
    rate_card: str
    currency: str | None
    accepted_events: int
    duplicate_events: int
    attribution_tags: list[str]


def _view(project: str, meta: dict[str, str]) -> ProjectView:
    return ProjectView(
        project=project,
        rate_card=meta.get("rate_card", "default"),
        currency=meta.get("currency"),
        accepted_events=int(meta.get("accepted", "0")),
        duplicate_events=int(meta.get("duplicates", "0")),
        attribution_tags=sorted(attribution_tags_of(meta)),
    )


class ProjectController(Controller):
    path = "/v1/projects"
    tags = ["projects"]

    @get("/", guards=[requires("read")], summary="Projects this token may see")
    async def list_projects(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> list[str]:
        return [p for p in await services.store.projects.projects() if request.user.can_access(p)]

    @get("/{project:str}", guards=[requires("read")], summary="A project's settings and counters")
    async def get_project(
        self, project: PathProject, services: NamedDependency[Services]
    ) -> ProjectView:
        return _view(project, await services.store.projects.project_meta(project))

    @put("/{project:str}", guards=[requires("admin")], summary="Choose the project's rate card")
    async def put_project(
        self, project: PathProject, data: JSONBody[ProjectIn], services: NamedDependency[Services]
    ) -> ProjectView:
        fields: dict[str, str] = {}
        if data.attribution_tags is not None:
            fields["attribution_tags"] = ",".join(sorted(set(data.attribution_tags)))
        if data.rate_card is not None:
            catalog = await services.rate_cards.catalog(data.rate_card)
            if catalog is None:
                raise invalid("rate_card", f"no rate card named {data.rate_card!r}")
            meta = await services.store.projects.project_meta(project)
            if meta.get("currency") and meta["currency"] != catalog.currency:
                raise problem(
                    409,
                    "Conflict",
                    f"project {project!r} keeps its ledger in {meta['currency']}; rate card "
                    f"{data.rate_card!r} is priced in {catalog.currency}",
                    kind="currency-conflict",
                    field="rate_card",
                )
            fields["rate_card"] = data.rate_card
            if catalog.currency:
                fields["currency"] = catalog.currency
        if not fields:
            raise invalid("$", "give rate_card and/or attribution_tags")
        await services.store.projects.set_project_fields(project, fields)
        return _view(project, await services.store.projects.project_meta(project))

    @post(
        "/{project:str}/rebuild",
        guards=[requires("admin")],
        status_code=200,
        summary="Rebuild the project's totals from its event log",
        description="Prices the accepted-event log again, in order, with the current rate cards.",
    )
    async def rebuild(
        self, project: PathProject, services: NamedDependency[Services]
    ) -> RebuildReport:
        try:
            return await rebuild_project(services.store, services.rate_cards, project)
        except RebuildError as exc:
            raise problem(409, "Cannot rebuild", str(exc), kind="rebuild-failed") from exc


class TokenController(Controller):
    """Tokens. An admin token for every project manages every token. An admin token limited
    to some projects mints tokens limited to some of its projects (any role: none is higher
    than admin), and lists and revokes only tokens limited to its projects. The last admin
    token for every project cannot be revoked (409). See docs/authorization.md."""

    path = "/v1/tokens"
    tags = ["tokens"]
    guards = [requires("admin")]

    @post(
        "/",
        summary="Create a token (shown once)",
        description="An admin token limited to some projects mints only tokens limited to a "
        "subset of them (`projects` must be given); an admin token for every project mints any.",
    )
    async def create(
        self,
        data: JSONBody[TokenIn],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> TokenView:
        if data.projects is not None:
            for i, p in enumerate(data.projects):
                if not _PROJECT_RE.match(p):
                    raise invalid(f"$.projects[{i}]", "not a valid project name")
        principal = request.user
        if not principal.may_grant(data.role):
            raise _forbidden(f"a {principal.role} token may not mint a {data.role} token", "$.role")
        if data.projects is None and not principal.unscoped:
            raise _forbidden(
                "this token is limited to some projects: the token it mints must name a subset "
                "of them in `projects`",
                "$.projects",
            )
        for i, p in enumerate(data.projects or []):
            if not principal.can_access(p):
                raise _forbidden(f"this token may not access project {p!r}", f"$.projects[{i}]")
        token, digest, record = mint(data.role, data.projects, data.name)
        await services.store.tokens.put_token(digest, record["id"], record)
        return view_of(record, token)

    @get(
        "/",
        summary="List tokens (without their secrets)",
        description="An admin token limited to some projects sees only tokens limited to them.",
    )
    async def list_tokens(
        self, request: Request[Principal, str, State], services: NamedDependency[Services]
    ) -> list[TokenView]:
        views = [view_of(r) for r in await services.store.tokens.token_records()]
        return [v for v in views if request.user.covers(v.projects)]

    @delete(
        "/{token_id:str}",
        summary="Revoke a token",
        description="An admin token limited to some projects revokes only tokens limited to "
        "them (others are a 404). The last admin token for every project is never revoked.",
        status_code=204,
        responses={
            409: ResponseSpec(
                None, description="The last admin token for every project: mint another first"
            )
        },
    )
    async def revoke(
        self,
        token_id: FromPath[str],
        request: Request[Principal, str, State],
        services: NamedDependency[Services],
    ) -> None:
        # A token outside this one's projects is answered like one that does not exist.
        found = [r for r in await services.store.tokens.token_records() if r["id"] == token_id]
        if not found or not request.user.covers(view_of(found[0]).projects):
            raise problem(404, "Not found", f"no token with id {token_id!r}", kind="not-found")
        try:
            revoked = await services.store.tokens.revoke_token(token_id)
        except LastUnscopedAdmin as exc:
            raise problem(
                409,
                "Conflict",
                f"token {token_id!r} is the last admin token for every project; mint another "
                "before revoking it",
                kind="last-admin",
                field="token_id",
            ) from exc
        if not revoked:
            raise problem(404, "Not found", f"no token with id {token_id!r}", kind="not-found")
        forget_cached_tokens()


def _forbidden(detail: str, field: str) -> Exception:
    return problem(403, "Forbidden", detail, kind="forbidden", field=field)
