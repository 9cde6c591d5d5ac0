"""Token use cases: resolve a bearer token (cached per worker), mint, list and revoke tokens."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from ..auth.store import LastUnscopedAdmin
from ..errors import Forbidden, Invalid, NotFound
from ..events.model import PROJECT_PATTERN
from .model import Principal, TokenIn, TokenView, digest, mint, principal_from_record, view_of

if TYPE_CHECKING:
    from ..stores import Stores

__all__ = [
    "LastUnscopedAdmin",
    "TokenForbidden",
    "TokenNotFound",
    "UnfitTokenRequest",
    "create_token",
    "forget_cached_tokens",
    "list_tokens",
    "resolve_principal",
    "revoke_token",
]

_PROJECT_RE = re.compile(PROJECT_PATTERN)
# digest -> (valid until, monotonic; the principal or None for an unknown token)
_cache: dict[str, tuple[float, Principal | None]] = {}


class UnfitTokenRequest(Invalid):
    """The request names something that cannot be (422)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.args = (field, reason)


class TokenForbidden(Forbidden):
    """The caller's token may not mint that token (403)."""

    def __init__(self, detail: str, field: str) -> None:
        super().__init__(detail, field)
        self.detail = detail
        self.field = field

    def problem_detail(self) -> str:
        return self.detail

    def problem_members(self) -> dict[str, Any]:
        return {"field": self.field}


class TokenNotFound(NotFound):
    """No such token, or one outside the caller's projects (answered alike)."""

    def __init__(self, token_id: str) -> None:
        super().__init__(token_id)
        self.token_id = token_id

    def problem_detail(self) -> str:
        return f"no token with id {self.token_id!r}"


async def resolve_principal(store: Stores, token: str, ttl: float) -> Principal | None:
    """The principal of a bearer token (None: unknown or revoked), cached for `ttl` seconds."""
    key = digest(token)
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    record = await store.tokens.token_record(key)
    principal = principal_from_record(record) if record else None
    if len(_cache) > 10_000:
        _cache.clear()
    _cache[key] = (now + ttl, principal)
    return principal


def forget_cached_tokens() -> None:
    _cache.clear()


async def create_token(store: Stores, principal: Principal, request: TokenIn) -> TokenView:
    """Mint a token that may do nothing `principal` may not; shown once, in the answer."""
    if request.projects is not None:
        for i, p in enumerate(request.projects):
            if not _PROJECT_RE.match(p):
                raise UnfitTokenRequest(f"$.projects[{i}]", "not a valid project name")
    if not principal.may_grant(request.role):
        raise TokenForbidden(
            f"a {principal.role} token may not mint a {request.role} token", "$.role"
        )
    if request.projects is None and not principal.unscoped:
        raise TokenForbidden(
            "this token is limited to some projects: the token it mints must name a subset "
            "of them in `projects`",
            "$.projects",
        )
    for i, p in enumerate(request.projects or []):
        if not principal.can_access(p):
            raise TokenForbidden(f"this token may not access project {p!r}", f"$.projects[{i}]")
    token, token_digest, record = mint(request.role, request.projects, request.name)
    await store.tokens.put_token(token_digest, record["id"], record)
    return view_of(record, token)


async def list_tokens(store: Stores, principal: Principal) -> list[TokenView]:
    """The tokens `principal` may manage, without their secrets."""
    views = [view_of(r) for r in await store.tokens.token_records()]
    return [v for v in views if principal.covers(v.projects)]


async def revoke_token(store: Stores, principal: Principal, token_id: str) -> None:
    """Raises TokenNotFound (also for a token outside `principal`'s projects) or
    LastUnscopedAdmin (the last admin token for every project stays)."""
    found = [r for r in await store.tokens.token_records() if r["id"] == token_id]
    if not found or not principal.covers(view_of(found[0]).projects):
        raise TokenNotFound(token_id)
    if not await store.tokens.revoke_token(token_id):
        raise TokenNotFound(token_id)
    forget_cached_tokens()
