"""Bearer tokens: roles, project scopes, and how a token is minted and stored.

A token is shown once, when it is created; only its SHA-256 digest is stored.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec

from ..events.model import SAFE_TEXT_PATTERN, ProjectName

Role = Literal["admin", "ingest", "read"]
ROLES: tuple[str, ...] = ("admin", "ingest", "read")
TOKEN_PREFIX = "tl_"

# What each role may do. Admin may do everything the others may.
_GRANTS: dict[str, frozenset[str]] = {
    "admin": frozenset({"admin", "ingest", "read"}),
    "ingest": frozenset({"ingest"}),
    "read": frozenset({"read"}),
}


@dataclass(frozen=True)
class Principal:
    token_id: str
    role: str
    projects: frozenset[str] | None  # None: every project
    name: str = ""

    def may(self, action: str) -> bool:
        return action in _GRANTS.get(self.role, frozenset())

    def can_access(self, project: str) -> bool:
        return self.projects is None or project in self.projects

    @property
    def unscoped(self) -> bool:
        """A token for every project (an admin one manages tokens and global rate cards)."""
        return self.projects is None

    def covers(self, projects: frozenset[str] | list[str] | None) -> bool:
        """Every project of `projects` (None: every project) is within this token's."""
        if self.projects is None:
            return True
        return projects is not None and all(p in self.projects for p in projects)

    def may_grant(self, role: str) -> bool:
        """A token it mints may do nothing this one may not."""
        return _GRANTS.get(role, frozenset()) <= _GRANTS.get(self.role, frozenset())


class TokenIn(msgspec.Struct, forbid_unknown_fields=True):
    role: Role
    projects: list[ProjectName] | None = None
    name: Annotated[str, msgspec.Meta(max_length=200, pattern=SAFE_TEXT_PATTERN)] = ""


class TokenView(msgspec.Struct, omit_defaults=True):
    id: str
    role: str
    projects: list[str] | None
    name: str
    created_at: int
    token: str | None = None  # only in the answer that creates it


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint(
    role: str, projects: list[str] | None, name: str = "", token: str | None = None
) -> tuple[str, str, dict[str, str]]:
    """A new token: (token, its digest, the record to store). `token` registers one an
    operator made (checked by `supplied_token_problem`) instead of a random one."""
    token = token or TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = secrets.token_hex(6)
    record = {
        "id": token_id,
        "role": role,
        "projects": "*" if projects is None else ",".join(sorted(set(projects))),
        "name": name,
        "created_at": str(int(time.time())),
    }
    return token, digest(token), record


# A token an operator supplies (a Docker or Kubernetes secret): long enough to be unguessable,
# and characters a header carries as they are.
SUPPLIED_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{32,512}$")


def supplied_token_problem(token: str) -> str | None:
    """Why `token` cannot be a bearer token, or None."""
    if SUPPLIED_TOKEN_RE.match(token):
        return None
    return (
        f"must be 32 to 512 characters of A-Z a-z 0-9 . _ ~ + / = - (got {len(token)} "
        f"characters); make one with: python3 -c 'import secrets; "
        f'print("{TOKEN_PREFIX}" + secrets.token_urlsafe(32))\''
    )


def principal_from_record(record: dict[str, str]) -> Principal:
    scope = record.get("projects", "")
    projects = None if scope == "*" else frozenset(p for p in scope.split(",") if p)
    return Principal(record["id"], record["role"], projects, record.get("name", ""))


def view_of(record: dict[str, str], token: str | None = None) -> TokenView:
    p = principal_from_record(record)
    return TokenView(
        id=p.token_id,
        role=p.role,
        projects=None if p.projects is None else sorted(p.projects),
        name=p.name,
        created_at=int(record.get("created_at", "0")),
        token=token,
    )
