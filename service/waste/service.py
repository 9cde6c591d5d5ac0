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
from ..ledger.folding import settle
from ..ledger.logindex import day_name
from ..ledger.ranges import read_log_range
from ..projects.model import WASTE_POLICY_FIELD
from ..projects.service import project_catalog, project_settings
from ..ratecards.catalog import RateCards
from ..ratecards.model import PricedSku
from .cells import Unit, row_unit
from .days import DAY_US
from .model import ProgressPoint, WastePolicy, WasteReport
from .report import find_waste, find_waste_in_units, plan_report
from .stored import facts_of_fields, units_of_fields

if TYPE_CHECKING:
    from ..stores import Stores

POLICY_FIELD = WASTE_POLICY_FIELD
_DAYS_PER_READ = 31  # days of cells read per round trip
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
    """The waste over the fold's cells and facts (service/ledger/wastecells.py), the few
    `plan_report` row days read as events; a log from before the cells (meta ``wastecells``
    unset until a rebuild) is read whole."""
    settings, catalog = await project_catalog(store, rate_cards, project)
    skus: dict[str, PricedSku] = {}
    if catalog is not None:
        for index in range(len(catalog.history.versions)):  # later versions override
            skus.update(catalog.history.priced(index))
    progress = {
        experiment: msgspec.json.decode(raw, type=list[ProgressPoint])
        for experiment, raw in (await store.waste.experiment_progress(project)).items()
    }
    policy = await waste_policy(store, project)
    when = now or datetime.now(UTC)
    currency = settings.currency or ""
    if not await store.waste.cells_state(project):
        events: list[LoggedEvent] = []
        async for _, rows in read_log(store, project, await store.ledger.last_log_entry(project)):
            events.extend(rows)
        return find_waste(
            project, events, skus, policy, progress, when, window_from, window_to, currency
        )
    await settle(store, project)  # the cells hold every batch accepted before the request
    last = await store.ledger.last_log_entry(project)
    facts = facts_of_fields(await store.waste.facts(project))
    plan = plan_report(facts, skus, policy, progress, when, window_from, window_to)
    cell_days = [d for d in range(plan.read_from, plan.last_day + 1) if d not in plan.row_days]
    units: list[Unit] = []
    for at in range(0, len(cell_days), _DAYS_PER_READ):
        days = cell_days[at : at + _DAYS_PER_READ]
        hashes = await store.waste.cells(project, [day_name(d) for d in days])
        for day, fields in zip(days, hashes, strict=True):
            units += units_of_fields(day, fields)
    for day in sorted(plan.row_days):
        day_rows: dict[str, LoggedEvent] = {}  # an entry folded meanwhile may come twice
        async for _, rows in read_log_range(store, project, last, day * DAY_US, (day + 1) * DAY_US):
            day_rows.update((r.id, r) for r in rows if r.epoch_us // DAY_US == day)
        units += [row_unit(r) for r in day_rows.values()]
    return find_waste_in_units(project, units, facts, plan, skus, policy, progress, currency)
