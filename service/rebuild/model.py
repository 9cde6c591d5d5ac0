"""What a rebuild answers: a plain struct, below the jobs that carry it and the rebuild itself."""

from __future__ import annotations

import msgspec

__all__ = ["RebuildReport"]


class RebuildReport(msgspec.Struct):
    """Answer of `POST /v1/projects/{project}/rebuild`: the events priced again and the total
    before and after."""

    project: str
    events: int
    batches: int
    cost_before: str
    cost_after: str
    changed: bool
    # Budget thresholds the rebuilt spend reached that had not fired: fired once, now.
    alerts_fired: list[str] = msgspec.field(default_factory=list)
