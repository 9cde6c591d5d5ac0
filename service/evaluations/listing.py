"""`GET /v1/evaluations`: a page of a project's results, in (time, id) order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .model import EvaluationResult

if TYPE_CHECKING:
    from ..stores import Stores

DEFAULT_PAGE = 100
MAX_PAGE = 1000

_result_decoder = msgspec.json.Decoder(EvaluationResult)


class ResultsPage(msgspec.Struct):
    """Answer of `GET /v1/evaluations`: a page of the project's results (of one experiment,
    when named), oldest first (by time, then id), and where the next page starts: `after`
    set to `next_cursor` (it keeps its place when results are added meanwhile, even older
    ones), or `offset` set to `next_offset`. Both are null on the last page."""

    project: str
    experiment: str | None
    items: list[EvaluationResult]
    offset: int
    limit: int
    total: int
    next_offset: int | None
    next_cursor: str | None


async def results_page(
    store: Stores,
    project: str,
    experiment: str | None,
    offset: int,
    limit: int,
    after: str | None,
) -> ResultsPage:
    """A page of the project's results: from `offset`, or after the cursor `after` (a page's
    `next_cursor`) when given."""
    raws, total, position, last = await store.evaluations.result_page(
        project, experiment, offset, limit, after
    )
    items = [_result_decoder.decode(r) for r in raws]
    end = position + len(items)
    more = end < total and len(items) == limit
    return ResultsPage(
        project,
        experiment,
        items,
        position,
        limit,
        total,
        end if more else None,
        last if more else None,
    )
