"""Evaluation use cases: report results, read them, keep the settings, the cost-effect report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import TYPE_CHECKING, Any

import msgspec

from ..auth.model import Principal
from ..errors import Invalid, NotFound
from ..events.model import time_window_problem
from ..ledger.eventlog import LoggedEvent, read_log
from ..ledger.fields import dims_of
from ..ledger.folding import settled_state
from ..ledger.ranges import read_log_range
from ..projects.service import project_catalog
from ..ratecards.catalog import RateCards
from .capacity import AUDIT_KEPT, DEFAULT_MAX_RESULTS
from .effect import Cell, CostEffectReport, ReportFilter, _micros, cost_effect, spend_of_cells
from .kept_spend import exact_days, spend_from_effect_sums
from .model import (
    AuditPage,
    EvaluationResult,
    EvaluationSettings,
    ResultAudit,
    ResultIn,
    ResultsAccepted,
    ResultsIn,
)
from .regression import regression_alerts

if TYPE_CHECKING:
    from ..stores import Stores

_result_decoder = msgspec.json.Decoder(EvaluationResult)
_audit_decoder = msgspec.json.Decoder(ResultAudit)
# How often a correction or deletion reads again when the result changed under it.
_RETRIES = 20


class ResultInputError(Invalid, ValueError):
    """A result of a batch that cannot be taken (its time): nothing of the batch is stored."""

    status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


class ResultNotFound(NotFound, LookupError):
    def __init__(self, project: str, result_id: str) -> None:
        super().__init__(result_id)
        self.project = project
        self.result_id = result_id

    def problem_detail(self) -> str:
        return f"no evaluation result {self.result_id!r} in project {self.project!r}"

    def problem_members(self) -> dict[str, Any]:
        return {"field": "result_id"}


@dataclass(frozen=True)
class TimeBounds:
    """The times a result may carry: the events' range (`time_window_problem`)."""

    window_days: int = 35
    future_skew_hours: int = 24


@dataclass(frozen=True)
class Actor:
    """Who changes a stored result (the audit's `token_id`, `token_name`)."""

    token_id: str
    name: str = ""

    @classmethod
    def of(cls, principal: Principal) -> Actor:
        return cls(principal.token_id, principal.name)


class ReportQueryError(Invalid, ValueError):
    status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
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


def _result_time(r: ResultIn, index: int, received: datetime, bounds: TimeBounds) -> datetime:
    """The result's time (when it was received, if it gives none), within the events' range."""
    if r.time is None:
        return received
    field = f"$.results[{index}].time"
    try:
        when = msgspec.convert(r.time, datetime)
    except msgspec.ValidationError as exc:
        raise ResultInputError(field, f"not an RFC 3339 date-time: {exc}") from exc
    problem = time_window_problem(when, received, bounds.window_days, bounds.future_skew_hours)
    if problem is not None:
        raise ResultInputError(field, problem)
    return when.astimezone(UTC)


def _records(data: ResultsIn, received: datetime, bounds: TimeBounds) -> list[EvaluationResult]:
    return [
        EvaluationResult(
            id=r.id,
            experiment=r.experiment,
            benchmark=r.benchmark,
            value=r.value,
            higher_is_better=r.higher_is_better,
            time=_result_time(r, i, received, bounds),
            step=r.step,
            tokens_seen=r.tokens_seen,
            version=r.version,
        )
        for i, r in enumerate(data.results)
    ]


async def add_results(
    store: Stores,
    data: ResultsIn,
    now: datetime | None = None,
    *,
    limit: int = DEFAULT_MAX_RESULTS,
    bounds: TimeBounds | None = None,
    actor: Actor | None = None,
) -> ResultsAccepted:
    """Store the batch's results. An id not stored is new; an id stored already (or repeated
    in the batch) at the same version or a higher one is a duplicate and changes nothing; a
    higher `version` of a stored id replaces it (a correction, audited as `actor`'s). A time
    outside `bounds` raises `ResultInputError`, and a batch whose new results would take the
    project past `limit` stored results raises `ResultsLimitReached`: nothing is stored."""
    received = now or datetime.now(UTC)
    results = _records(data, received, bounds or TimeBounds())
    project = data.project
    # The ids already stored go to the corrections; the others (and the first versions,
    # which never replace anything) are one batch, refused whole if past the limit.
    versioned = [r.id for r in results if r.version > 1]
    held = dict(zip(versioned, await store.evaluations.stored(project, versioned), strict=True))
    fresh = [r for r in results if r.version == 1 or held.get(r.id) is None]
    added = await store.evaluations.add_results(
        project, [(r.id, msgspec.json.encode(r)) for r in fresh], limit
    )
    duplicates, corrected = [], []
    later = [r for r in results if r.version > 1 and held.get(r.id) is not None]
    for r, new in zip(fresh, added, strict=True):
        if not new and r.version > 1:
            later.append(r)  # stored meanwhile by another batch: a correction of it
        elif not new:
            duplicates.append(r.id)
    for r in later:
        if await _correct(store, project, r, received, actor or Actor("")):
            corrected.append(r.id)
        else:
            duplicates.append(r.id)
    return ResultsAccepted(
        project=project,
        accepted=len(results) - len(duplicates) - len(corrected),
        duplicates=len(duplicates),
        duplicate_ids=duplicates[:100],
        corrected=len(corrected),
        corrected_ids=corrected[:100],
    )


async def _correct(
    store: Stores, project: str, result: EvaluationResult, now: datetime, actor: Actor
) -> bool:
    """Replace the stored result of `result.id` by `result` if it is a higher version: whether
    it did (False: the stored version is as high)."""
    new = msgspec.json.encode(result)
    for _ in range(_RETRIES):
        (raw,) = await store.evaluations.stored(project, [result.id])
        if raw is None:  # deleted meanwhile: the correction stands as a new result
            if (await store.evaluations.add_results(project, [(result.id, new)]))[0]:
                return True
            continue
        before = _result_decoder.decode(raw)
        if before.version >= result.version:
            return False
        audit = _audit("corrected", before, result, now, actor)
        if await store.evaluations.replace_result(project, result.id, raw, new, audit):
            return True
    raise RuntimeError(f"evaluation result {result.id!r} kept changing while being corrected")


def _audit(
    action: str,
    before: EvaluationResult,
    after: EvaluationResult | None,
    now: datetime,
    actor: Actor,
) -> bytes:
    return msgspec.json.encode(
        ResultAudit(
            action="corrected" if action == "corrected" else "deleted",
            id=before.id,
            at=now.astimezone(UTC),
            token_id=actor.token_id,
            token_name=actor.name,
            before=before,
            after=after,
        )
    )


async def delete_result(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    result_id: str,
    actor: Actor,
    now: datetime | None = None,
) -> ResultAudit:
    """`DELETE /v1/evaluations/{id}`: delete the stored result (audited as `actor`'s), then
    fire the regression alerts the remaining results call for. `ResultNotFound` if none."""
    when = now or datetime.now(UTC)
    for _ in range(_RETRIES):
        (raw,) = await store.evaluations.stored(project, [result_id])
        if raw is None:
            raise ResultNotFound(project, result_id)
        audit = _audit("deleted", _result_decoder.decode(raw), None, when, actor)
        if await store.evaluations.replace_result(project, result_id, raw, None, audit):
            await fire_regression_alerts(store, rate_cards, project)
            return _audit_decoder.decode(audit)
    raise RuntimeError(f"evaluation result {result_id!r} kept changing while being deleted")


async def result_audit(store: Stores, project: str, limit: int) -> AuditPage:
    """`GET /v1/evaluations/audit`: the newest corrections and deletions first."""
    items = [_audit_decoder.decode(raw) for raw in await store.evaluations.audit(project, limit)]
    return AuditPage(project=project, items=items, limit=limit, kept=AUDIT_KEPT)


async def report_results(
    store: Stores,
    rate_cards: RateCards,
    data: ResultsIn,
    now: datetime | None = None,
    *,
    limit: int = DEFAULT_MAX_RESULTS,
    bounds: TimeBounds | None = None,
    actor: Actor | None = None,
) -> ResultsAccepted:
    """`POST /v1/evaluations`: store the batch (`add_results`), then fire the regression
    alerts the project's results now call for (`fire_regression_alerts`). The check runs
    whether or not anything was new: a batch sent again after a crash between the two steps
    fires what is missing. A batch refused for the project's `limit` (`ResultsLimitReached`)
    stores nothing and fires nothing."""
    accepted = await add_results(store, data, now, limit=limit, bounds=bounds, actor=actor)
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
    """The report over every accepted event and every result (the rules: `effect.py`): the
    events summed from the cost-effect sums kept at fold time (`spend_from_effect_sums`),
    else from the finest totals where whole days do (`_spend_from_totals`), else from every
    logged event."""
    settings, catalog = await project_catalog(store, rate_cards, project)
    accelerators: set[str] = set()
    if catalog is not None:
        for index in range(len(catalog.history.versions)):
            priced = catalog.history.priced(index)
            accelerators |= {code for code, sku in priced.items() if sku.power_watts is not None}
    settings_now = await evaluation_settings(store, project)
    results = await list_results(store, project)
    spend: Mapping[str, Any] | None = await spend_from_effect_sums(
        store, project, settings_now, results, accelerators, filters
    )
    if spend is None:  # sums folded before the cost-effect sums existed: the finest totals
        spend = await _spend_from_totals(
            store, project, settings_now, results, accelerators, filters
        )
    events: list[LoggedEvent] = []
    if spend is None:  # tags filter, or a log from before its index: every event
        async for _, rows in read_log(store, project, await store.ledger.last_log_entry(project)):
            events.extend(rows)
    return cost_effect(
        project,
        settings.ledger_currency(catalog.currency if catalog else None),
        settings_now,
        events,
        accelerators,
        results,
        filters,
        spend,
    )


_DAY_US = 86_400_000_000
# A day is read from the log rather than its totals when it has fewer events than this many
# times its totals fields (decoding an event and parsing a field cost about the same).
SPARSE_EVENTS_PER_FIELD = 1.0


async def _spend_from_totals(
    store: Stores,
    project: str,
    settings: EvaluationSettings,
    results: list[EvaluationResult],
    accelerators: set[str],
    filters: ReportFilter,
) -> Mapping[str, Any] | None:
    """The spend per experiment of the report from the kept totals, whole days at a time,
    and from the log (its index) for the days where a time the report reads falls inside:
    a day the range starts or ends within, and each regressed experiment's restart day.
    None when only the log can tell (a tags filter: the totals hold only attributed tags; a
    log from before its index)."""
    if filters.tags:
        return None
    daily, complete = await settled_state(store, project)
    last = await store.ledger.last_log_entry(project)
    indexed, _ = await store.ledger.log_index_state(project)
    if not indexed:
        return None
    exact = exact_days(project, settings, results, filters)
    whole = [d for d in sorted(daily) if _day_us(d) // _DAY_US not in exact]
    whole = [d for d in whole if filters.keeps_time(_day_us(d))]
    if complete and whole:
        # A day with fewer events than totals fields is read from the log instead: each
        # read then costs the lesser of the day's events and its cells.
        sizes = await store.ledger.totals_sizes(project, whole)
        counts = await store.ledger.totals_fields(project, "all", [(d, [b"n|"]) for d in whole])
        sparse = {
            d
            for d, size, (n,) in zip(whole, sizes, counts, strict=True)
            if int(n or 0) < size * SPARSE_EVENTS_PER_FIELD
        }
        exact |= {_day_us(d) // _DAY_US for d in sparse}
        whole = [d for d in whole if d not in sparse]
    cells = []
    for day, fields in zip(
        whole, await store.ledger.totals_hashes(project, "tot", whole), strict=True
    ):
        sums: dict[bytes, list[int]] = {}
        for raw, value in fields.items():
            sums.setdefault(raw[2:], [0, 0, 0])["cqn".index(chr(raw[0]))] += int(value)
        for dims_raw, (cost, quantity, count) in sums.items():
            stage, experiment, category, sku, owner = dims_of(dims_raw.decode())[:5]
            cells.append(
                Cell(_day_us(day), stage, experiment, category, sku, owner, cost, quantity, count)
            )
    events: list[LoggedEvent] = []
    for day_number in sorted(exact):
        lo, hi = day_number * _DAY_US, (day_number + 1) * _DAY_US
        async for _, rows in read_log_range(store, project, last, lo, hi):
            events.extend(row for row in rows if lo <= row.epoch_us < hi)
    return spend_of_cells(cells, events, accelerators, filters)


def _day_us(day: str) -> int:
    return _micros(datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC))
