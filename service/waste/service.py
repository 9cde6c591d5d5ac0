"""Reports over a project's event log: waste findings (rules in `service/waste/report.py`)."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated

import msgspec

from costcore.money import BOUND_REASON, decimal_bound_problem

from ..errors import Invalid
from ..events.model import SAFE_TEXT_PATTERN, Label
from ..ledger.eventlog import LoggedEvent, read_log
from ..projects.model import WASTE_POLICY_FIELD
from ..projects.service import project_catalog, project_settings
from ..ratecards.catalog import RateCards
from ..ratecards.model import PricedSku
from .model import ProgressPoint, WastePolicy, WasteReport
from .report import find_waste

if TYPE_CHECKING:
    from ..stores import Stores

POLICY_FIELD = WASTE_POLICY_FIELD
log = logging.getLogger(__name__)
# The exponent's digits are bounded here so that `Decimal` never reads a huge one; the value's
# magnitude and places are then held to the one bound (`decimal_bound_problem`).
PROGRESS_VALUE_PATTERN = r"^-?[0-9]{1,64}(\.[0-9]{1,64})?([eE][-+]?[0-9]{1,3})?$(?!\n)"


class ExperimentProgressIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A progress report of an experiment (e.g. eval loss), for the waste report."""

    experiment: Annotated[Label, msgspec.Meta(min_length=1)]
    metric: Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=SAFE_TEXT_PATTERN)]
    value: Annotated[
        str,
        msgspec.Meta(
            pattern=PROGRESS_VALUE_PATTERN,
            description=f"a decimal, an exponent allowed; {BOUND_REASON}",
            examples=["2.31", "1.5e-3"],
        ),
    ]
    higher_is_better: bool = False
    time: Annotated[datetime, msgspec.Meta(tz=True)] | None = None

    def __post_init__(self) -> None:
        if decimal_bound_problem(Decimal(self.value)) is not None:
            raise ValueError(f"value {BOUND_REASON}")


async def waste_policy(store: Stores, project: str) -> WastePolicy:
    raw = (await project_settings(store, project)).waste_policy
    if not raw:
        return WastePolicy()
    try:
        return msgspec.json.decode(raw, type=WastePolicy)
    except msgspec.ValidationError:
        # Stored before its numbers were bounded (a `min_improvement_pct` of a thousand digits):
        # the report goes on with the documented defaults, and says so in the log.
        log.warning("project %s: its stored waste policy is out of bounds; defaults apply", project)
        return WastePolicy()


async def set_waste_policy(store: Stores, project: str, policy: WastePolicy) -> WastePolicy:
    await store.projects.set_project_fields(
        project, {POLICY_FIELD: msgspec.json.encode(policy).decode()}
    )
    return policy


async def add_progress(store: Stores, project: str, data: ExperimentProgressIn) -> ProgressPoint:
    point = msgspec.convert(
        {
            "time": (data.time or datetime.now(UTC)).isoformat(),
            "metric": data.metric,
            "value": data.value,
            "higher_is_better": data.higher_is_better,
        },
        ProgressPoint,
    )
    await store.waste.add_experiment_progress(project, data.experiment, msgspec.json.encode(point))
    return point


class WasteQueryError(Invalid, ValueError):
    """A waste report that cannot be made for this window (a 400 naming `from`)."""

    status = 400


async def waste_report(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    window_from: date | None,
    window_to: date | None,
    now: datetime | None = None,
) -> WasteReport:
    """`find_waste` over the project's log; any `ValueError` on the way is a
    `WasteQueryError` naming `from` (as the route has always answered it)."""
    try:
        return await _waste_report(store, rate_cards, project, window_from, window_to, now)
    except ValueError as exc:
        raise WasteQueryError("from", str(exc)) from exc


async def _waste_report(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    window_from: date | None,
    window_to: date | None,
    now: datetime | None,
) -> WasteReport:
    """Read the whole log (the rules need history before the window) and find the waste."""
    settings, catalog = await project_catalog(store, rate_cards, project)
    skus: dict[str, PricedSku] = {}
    if catalog is not None:
        for index in range(len(catalog.history.versions)):  # later versions override
            skus.update(catalog.history.priced(index))
    events: list[LoggedEvent] = []
    async for _, rows in read_log(store, project, await store.ledger.last_log_entry(project)):
        events.extend(rows)
    progress = {
        experiment: msgspec.json.decode(raw, type=list[ProgressPoint])
        for experiment, raw in (await store.waste.experiment_progress(project)).items()
    }
    return find_waste(
        project,
        events,
        skus,
        await waste_policy(store, project),
        progress,
        now or datetime.now(UTC),
        window_from,
        window_to,
        settings.currency or "",
    )
