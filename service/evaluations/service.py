"""Evaluation use cases: report results, read them, keep the settings, the cost-effect report."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import TYPE_CHECKING

import msgspec

from ..ledger.eventlog import LoggedEvent, read_log
from ..projects.service import project_catalog
from ..ratecards.catalog import RateCards
from .capacity import DEFAULT_MAX_RESULTS
from .effect import CostEffectReport, ReportFilter, cost_effect
from .model import EvaluationResult, EvaluationSettings, ResultsAccepted, ResultsIn
from .regression import regression_alerts

if TYPE_CHECKING:
    from ..stores import Stores

_result_decoder = msgspec.json.Decoder(EvaluationResult)


class ReportQueryError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def report_filter(
    stage: str | None,
    owner: str | None,
    tags: list[str],
    from_day: date | None,
    to_day: date | None,
) -> ReportFilter:
    """The report's filters from its query: tags as `<key>:<value>`, days as UTC midnights."""
    wanted: dict[str, str] = {}
    for item in tags:
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise ReportQueryError("tag", f"use tag=<key>:<value>, got {item!r}")
        wanted[key] = value
    if from_day and to_day and to_day <= from_day:
        raise ReportQueryError("to", "must be after 'from'")

    def midnight(day: date | None) -> datetime | None:
        return None if day is None else datetime.combine(day, time(), tzinfo=UTC)

    return ReportFilter(stage, owner, wanted, midnight(from_day), midnight(to_day))


async def add_results(
    store: Stores,
    data: ResultsIn,
    now: datetime | None = None,
    *,
    limit: int = DEFAULT_MAX_RESULTS,
) -> ResultsAccepted:
    """Store the batch's results; an id already stored (or repeated in the batch) is a
    duplicate and changes nothing. A batch whose new results would take the project past
    `limit` stored results raises `ResultsLimitReached` and stores nothing."""
    received = now or datetime.now(UTC)
    records = [
        (
            r.id,
            msgspec.json.encode(
                EvaluationResult(
                    id=r.id,
                    experiment=r.experiment,
                    benchmark=r.benchmark,
                    value=r.value,
                    higher_is_better=r.higher_is_better,
                    time=(r.time or received).astimezone(UTC),
                    step=r.step,
                    tokens_seen=r.tokens_seen,
                )
            ),
        )
        for r in data.results
    ]
    added = await store.evaluations.add_results(data.project, records, limit)
    duplicates = [rid for (rid, _), new in zip(records, added, strict=True) if not new]
    return ResultsAccepted(
        project=data.project,
        accepted=len(records) - len(duplicates),
        duplicates=len(duplicates),
        duplicate_ids=duplicates[:100],
    )


async def report_results(
    store: Stores,
    rate_cards: RateCards,
    data: ResultsIn,
    now: datetime | None = None,
    *,
    limit: int = DEFAULT_MAX_RESULTS,
) -> ResultsAccepted:
    """`POST /v1/evaluations`: store the batch (`add_results`), then fire the regression
    alerts the project's results now call for (`fire_regression_alerts`). The check runs
    whether or not anything was new: a batch sent again after a crash between the two steps
    fires what is missing. A batch refused for the project's `limit` (`ResultsLimitReached`)
    stores nothing and fires nothing."""
    accepted = await add_results(store, data, now, limit=limit)
    await fire_regression_alerts(store, rate_cards, data.project)
    return accepted


async def fire_regression_alerts(store: Stores, rate_cards: RateCards, project: str) -> list[str]:
    """Fire each regression alert of the project not fired yet (the rules:
    `regression.py`); returns the ids fired now. Without a baseline or a general benchmark
    nothing is read; the event log (for the rework exposure) is read only when some running
    experiment is regressed and its alert not yet fired."""
    settings = await evaluation_settings(store, project)
    if settings.baseline is None or "general" not in settings.benchmarks.values():
        return []
    # Which rows regress depends on the results and settings alone: a report without
    # events tells whether the one over the log (for the costs) is needed at all. Reading
    # the fired ids first only spares that work: the script decides what fires.
    results = await list_results(store, project)
    bare = cost_effect(project, "XXX", settings, [], set(), results, ReportFilter())
    wanted = [a.id for a in regression_alerts(bare)]
    if not wanted or await store.evaluations.regressions_fired(project, wanted) == set(wanted):
        return []
    report = await cost_effect_report(store, rate_cards, project, ReportFilter())
    candidates = [(a.id, msgspec.json.encode(a)) for a in regression_alerts(report)]
    return await store.evaluations.fire_regressions(project, candidates)


async def list_results(
    store: Stores, project: str, experiment: str | None = None
) -> list[EvaluationResult]:
    """Every result of the project (of one experiment, when named), by time then id: the
    reports' path (bounded by the project's limit); `GET /v1/evaluations` pages instead
    (`listing.results_page`)."""
    results = [_result_decoder.decode(raw) for raw in await store.evaluations.results(project)]
    if experiment is not None:
        results = [r for r in results if r.experiment == experiment]
    return sorted(results, key=lambda r: (r.time, r.id))


async def evaluation_settings(store: Stores, project: str) -> EvaluationSettings:
    raw = await store.evaluations.settings(project)
    return msgspec.json.decode(raw, type=EvaluationSettings) if raw else EvaluationSettings()


async def set_evaluation_settings(
    store: Stores, project: str, settings: EvaluationSettings
) -> EvaluationSettings:
    await store.evaluations.put_settings(project, msgspec.json.encode(settings))
    return settings


async def update_evaluation_settings(
    store: Stores, rate_cards: RateCards, project: str, settings: EvaluationSettings
) -> EvaluationSettings:
    """`PUT /v1/evaluations/settings`: keep them, then fire the regression alerts a new
    baseline, tolerance, benchmark kind or plan calls for."""
    await set_evaluation_settings(store, project, settings)
    await fire_regression_alerts(store, rate_cards, project)
    return settings


async def cost_effect_report(
    store: Stores, rate_cards: RateCards, project: str, filters: ReportFilter
) -> CostEffectReport:
    """The report over the whole event log and every result (the rules: `effect.py`)."""
    settings, catalog = await project_catalog(store, rate_cards, project)
    accelerators: set[str] = set()
    if catalog is not None:
        for index in range(len(catalog.history.versions)):
            priced = catalog.history.priced(index)
            accelerators |= {code for code, sku in priced.items() if sku.power_watts is not None}
    events: list[LoggedEvent] = []
    async for _, rows in read_log(store, project, await store.ledger.last_log_entry(project)):
        events.extend(rows)
    return cost_effect(
        project,
        settings.ledger_currency(catalog.currency if catalog else None),
        await evaluation_settings(store, project),
        events,
        accelerators,
        await list_results(store, project),
        filters,
    )
