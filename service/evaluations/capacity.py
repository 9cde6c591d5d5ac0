"""How many evaluation results a project keeps, and the order they are listed in.

The rule of a batch (``add_evaluations.lua`` applies it inside Redis, atomically with the
write, so two batches sent at once cannot together pass the limit; `store_batch` is its
Python reference, held equal to it by tests/integration/evaluations/test_store_reference.py):

- A result whose id is stored already, or that repeats an id earlier in the batch, is a
  duplicate: it changes nothing and does not count against the limit.
- The other results are new. With ``stored`` results in the project, the batch is stored when
  ``new == 0`` or ``stored + new <= limit``; otherwise it is refused whole (`OVER_LIMIT`) and
  nothing is written. A project already past the limit (it was lowered) still answers a batch
  of duplicates, and refuses any new result.

A stored result is replaced (a correction: a higher `version` of its id) or deleted only if it
is still the one its caller read (``replace_evaluation.lua``, reference `replace_reference`),
with its index members and an audit record in the same step; a caller that read an older
state reads again.

The listing order is (time, id). Each stored result has an index member
``<time, UTC, 27 characters>|<id>`` (`index_member`): the time is fixed-width ISO 8601, so the
members sort, byte by byte, in exactly that order (ids are ASCII labels), and a page is a range
of the index read by rank or after a member (the page's cursor). The per-experiment index
holds ``<experiment>\\x00<member>`` (labels hold no NUL), so one experiment's members are one
contiguous range of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

import msgspec

from ..errors import Conflict

DEFAULT_MAX_RESULTS = 100_000
AUDIT_KEPT = 10_000  # the corrections and deletions a project's audit stream keeps
# A page's `next_cursor` (an index member): "<time: 2026-01-05T10:00:00.000000Z>|<result id>".
CURSOR_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z"
    r"\|[A-Za-z0-9_.@/+=\-]{1,128}$(?!\n)"
)
EXPERIMENT_SEP = "\x00"


class StoreAnswer(IntEnum):
    """The first element of add_evaluations.lua's answer: what became of the batch."""

    STORED = 0  # then one 1/0 per result: whether it was new (stored)
    OVER_LIMIT = 1  # then the results stored and the new ones in the batch; nothing written


class ResultsLimitReached(Conflict):
    """The batch's new results would take the project past its limit: nothing was stored."""

    title = "Too many evaluation results"
    kind = "evaluation-results-limit"

    def __init__(self, limit: int, stored: int, new: int) -> None:
        super().__init__(
            f"the project holds {stored} evaluation results and this batch adds {new} new ones:"
            f" more than the {limit} a project may keep"
        )
        self.limit = limit
        self.stored = stored
        self.new = new

    def problem_errors(self) -> list[dict[str, str]] | None:
        return [{"field": "results", "reason": str(self)}]

    def problem_members(self) -> dict[str, Any]:
        return {"limit": self.limit, "stored": self.stored, "new": self.new}


def store_batch(
    stored: Iterable[str], ids: Sequence[str], limit: int
) -> tuple[StoreAnswer, list[bool], int, int]:
    """The reference of add_evaluations.lua: (answer, whether each id is new, results stored
    before the batch, new results in it). With `OVER_LIMIT` nothing is stored."""
    seen = set(stored)
    count = len(seen)
    new: list[bool] = []
    for result_id in ids:
        new.append(result_id not in seen)
        seen.add(result_id)
    added = sum(new)
    if added and count + added > limit:
        return StoreAnswer.OVER_LIMIT, new, count, added
    return StoreAnswer.STORED, new, count, added


def replace_reference(
    stored: dict[str, bytes], id_: str, expected: bytes, new: bytes | None
) -> tuple[bool, dict[str, bytes]]:
    """The reference of replace_evaluation.lua on the results hash (the indexes follow the
    results: each stored result has its two members, `index_entries`, and no other; the
    audit stream gets one record per change): (done, the hash after). Done when the stored
    result is still `expected`; then it is replaced by `new`, or deleted when `new` is None."""
    if stored.get(id_) != expected:
        return False, stored
    after = dict(stored)
    if new is None:
        del after[id_]
    else:
        after[id_] = new
    return True, after


class _Indexed(msgspec.Struct):
    id: str
    experiment: str
    time: datetime


_indexed = msgspec.json.Decoder(_Indexed)


def index_member(time: datetime, result_id: str) -> str:
    """The result's place in the listing order: its UTC time, fixed width, then its id."""
    utc = time.astimezone(UTC).replace(tzinfo=None)
    return f"{utc.isoformat(timespec='microseconds')}Z|{result_id}"


def experiment_member(experiment: str, member: str) -> str:
    return f"{experiment}{EXPERIMENT_SEP}{member}"


def experiment_range(experiment: str) -> tuple[str, str]:
    """The lexicographic bounds (ZRANGEBYLEX) of one experiment's members, ends excluded."""
    return f"({experiment}{EXPERIMENT_SEP}", f"({experiment}\x01"


def index_entries(stored_json: bytes) -> tuple[str, str]:
    """A stored result's (index member, per-experiment index member)."""
    result = _indexed.decode(stored_json)
    member = index_member(result.time, result.id)
    return member, experiment_member(result.experiment, member)


def member_id(member: str) -> str:
    """The result id of an index member (after its fixed-width time and the `|`)."""
    return member[28:]
