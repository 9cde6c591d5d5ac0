"""Cost use cases the routes call: a project's costs, with the units of its SKUs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from ..projects.service import project_catalog
from ..ratecards.catalog import RateCards
from .query import Granularity
from .report import CostReport, cost_report

if TYPE_CHECKING:
    from ..stores import Stores


async def sku_units(store: Stores, rate_cards: RateCards, project: str) -> dict[str, str]:
    """SKU -> unit, from every version of the project's rate card up to the current one
    (and the latest, when a later one is scheduled): later versions override."""
    _, catalog = await project_catalog(store, rate_cards, project)
    units: dict[str, str] = {}
    if catalog is not None:
        current = catalog.history.index_at(datetime.now(UTC))
        for vi in range(max(current, len(catalog.history.versions) - 1) + 1):
            units.update({c: s.unit for c, s in catalog.history.priced(vi).items()})
    return units


async def project_costs(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    from_day: date | None,
    to_day: date | None,
    group_by: Sequence[str],
    offset: int,
    limit: int,
    *,
    granularity: Granularity | None,
    filters: dict[str, str],
    tag_filters: dict[str, str],
    sort: str,
    top: int | None,
) -> CostReport:
    """`cost_report`; grouped by SKU, its rows carry their SKU's unit. Raises QueryError."""
    units = await sku_units(store, rate_cards, project) if "sku" in group_by else {}
    return await cost_report(
        store,
        project,
        from_day,
        to_day,
        group_by,
        units,
        offset,
        limit,
        granularity=granularity,
        filters=filters,
        tag_filters=tag_filters,
        sort=sort,
        top=top,
    )
