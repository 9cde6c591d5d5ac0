"""Errors by kind: a feature's error subclasses one of a few generic kinds (`NotFound`,
`Invalid`, `Forbidden`, `Conflict`, `Unavailable`, or `Problem` itself for a rarer status), and
one handler (`service.http.problems.from_problem`) answers it as an RFC 9457 problem. A route
does not catch: it parses, makes one service call, and lets the error rise.

A kind carries what the problem body needs: the status, `title` and `kind` (the end of the
problem's `type`) as class attributes; the `detail`, the `errors` list, the extra members (a
`field`, the `affected` projects of a repricing...) and the headers from its methods, which a
subclass overrides. Nothing here knows HTTP libraries: the lowest layers may raise these.
"""

from __future__ import annotations

from typing import Any

# What a 503 for a storage failure can honestly say: the request may have been applied in
# part (a batch spanning several projects is written project by project, on several shards)
# or in full (the answer was lost), or not at all. Event ids make the retry safe.
OUTCOME_UNKNOWN = (
    "the outcome is unknown (all, part or none of the request may have been applied): "
    "retry it as it was, with the same event ids (a retry never counts an event twice)"
)


class Problem(Exception):
    """An error a route answers as a problem; subclass one of the kinds below rather than this
    (unless the status is none of theirs, as a 415 or a 413)."""

    status: int = 500
    title: str = "Internal Server Error"
    kind: str = "internal-server-error"

    def problem_detail(self) -> str:
        return str(self)

    def problem_errors(self) -> list[dict[str, str]] | None:
        """The `errors` member: each offending field and why (none by default)."""
        return None

    def problem_members(self) -> dict[str, Any]:
        """Extra members of the problem body (a top-level `field`, figures...)."""
        return {}

    def problem_headers(self) -> dict[str, str] | None:
        return None


class NotFound(Problem):
    """404: the thing named does not exist (or is not the caller's to see)."""

    status = 404
    title = "Not found"
    kind = "not-found"


class Invalid(Problem):
    """422 (400 for a query parameter: set `status`): the request names something that cannot
    be; `field` (a JSON path or a parameter's name) and `reason` make the `errors` member."""

    status = 422
    title = "Invalid request"
    kind = "invalid-request"
    field: str
    reason: str

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def problem_detail(self) -> str:
        return f"{self.field}: {self.reason}"

    def problem_errors(self) -> list[dict[str, str]] | None:
        return [{"field": self.field, "reason": self.reason}]


class Forbidden(Problem):
    """403: the token may not do this."""

    status = 403
    title = "Forbidden"
    kind = "forbidden"


class Conflict(Problem):
    """409: the request is sound but the state it meets refuses it."""

    status = 409
    title = "Conflict"
    kind = "conflict"


class Unavailable(Problem):
    """503 with `Retry-After`: try again later, the same request."""

    status = 503
    title = "Busy"
    kind = "busy"
    retry_after: int = 1

    def problem_headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(self.retry_after)}
