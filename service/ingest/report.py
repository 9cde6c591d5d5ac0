"""What an ingest answers: the report of a body, and the two ways it fails as a whole."""

from __future__ import annotations

import msgspec

from ..errors import OUTCOME_UNKNOWN, Forbidden, Unavailable


class RejectedEvent(msgspec.Struct):
    """One rejected event of a body: its index in the body, its id, the reason, and the field at
    fault."""

    index: int
    id: str | None
    reason: str
    field: str | None = None
    project: str | None = None


class IngestReport(msgspec.Struct):
    """Answer of an ingest: how many events were accepted, how many were duplicates (already
    counted, by id), each rejected event, and the cost of the accepted ones by project."""

    accepted: int
    duplicates: int
    rejected: list[RejectedEvent]
    # Cost of the accepted events by project, as exact decimal strings.
    cost_by_project: dict[str, str] = {}


class ForbiddenProject(Forbidden):
    def __init__(self, project: str, index: int) -> None:
        super().__init__(project)
        self.project = project
        self.index = index

    def problem_detail(self) -> str:
        return f"this token may not write to project {self.project!r} (event {self.index})"

    def problem_errors(self) -> list[dict[str, str]] | None:
        return [{"field": f"$[{self.index}].project", "reason": "outside the token's projects"}]


class IngestConflict(Unavailable):
    """The batch could not be applied after many attempts (extreme contention)."""

    def problem_detail(self) -> str:
        return f"too much contention on this project; {OUTCOME_UNKNOWN}"
