"""The cost-effect report: what each experiment cost, against what it scored (pure rules).

Over the project's accepted events (the ledger's log, priced when accepted) and its reported
evaluation results, one row per experiment:

* **Events counted**: those with an experiment label, passing the filters (stage, owner, tags:
  all must match; time: `from` <= event time < `to`). **Results counted**: those with a time in
  the same range (stage, owner and tags do not apply to results).
* **Rows**: every experiment with a counted event; with no stage, owner or tag filter, also
  every experiment with a counted result (its cost then 0).
* **cost**: the exact sum of its counted events' costs (nano), also split by category and
  stage. **accelerator_hours**: the summed quantity of its events on accelerator SKUs (those
  whose rate card declares `power_watts`, as in plans). **tokens_seen**: the most tokens seen
  any of its counted results reports.
* **Latest value** of a benchmark: its result with the latest time (ties: the greatest id).
  **change** = value − the baseline's latest value; **gain** = change when higher is better,
  −change otherwise (a positive gain is an improvement).
* **cost_per_point** (target benchmarks, gain > 0): cost ÷ gain, rounded half-even to the nano.
* **Regression** (general benchmarks): gain < −tolerance.
* **Rework exposure** (an experiment with regressions): the cost of its counted events from
  its last good checkpoint on: those whose time (when their usage began) is at or after it.
  For each regressed benchmark, the last good time is that of its latest result within
  tolerance (gain >= −tolerance, measured against the baseline's latest value); the restart
  point is the earliest of these, and no restart point (all its cost) when a regressed
  benchmark never had a result within tolerance. The runs from the restart point on are the
  ones that would have to be redone.
* **Pareto front** per target benchmark, over the rows with a latest value of it: a row is on
  the front unless another costs no more and scores no worse, and is strictly better in one.
* **Forecast at completion** (experiments with `planned_tokens`): running while tokens_seen <
  planned; forecast = cost × planned ÷ tokens_seen, rounded half-even to the nano (none
  without a tokens_seen > 0); a finished experiment's forecast is its cost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import NamedTuple

import msgspec

from costcore.money import format_money, format_quantity, round_half_even_div

from ..ledger.eventlog import LoggedEvent
from .model import EvaluationResult, EvaluationSettings

__all__ = [
    "BenchmarkCell",
    "CostEffectReport",
    "ExperimentRow",
    "Front",
    "FrontPoint",
    "ReportFilter",
    "cost_effect",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(t: datetime) -> int:
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True)
class ReportFilter:
    stage: str | None = None
    owner: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    time_from: datetime | None = None
    time_to: datetime | None = None

    @property
    def narrows_events(self) -> bool:
        return bool(self.stage or self.owner or self.tags)

    def keeps_time(self, epoch_us: int) -> bool:
        if self.time_from is not None and epoch_us < _micros(self.time_from):
            return False
        return self.time_to is None or epoch_us < _micros(self.time_to)

    def keeps(self, event: LoggedEvent) -> bool:
        if not event.experiment or not self.keeps_time(event.epoch_us):
            return False
        if self.stage is not None and event.stage != self.stage:
            return False
        if self.owner is not None and event.owner != self.owner:
            return False
        tags = event.tags or {}
        return all(tags.get(k) == v for k, v in self.tags.items())


class BenchmarkCell(msgspec.Struct, kw_only=True):
    """An experiment's latest value of one benchmark, against the baseline's."""

    benchmark: str
    kind: str  # "general", "target" or "other" (not declared in the settings)
    value: str
    higher_is_better: bool
    time: datetime
    step: int | None
    tokens_seen: int | None
    baseline_value: str | None
    change: str | None
    gain: str | None
    cost_per_point: str | None
    regression: bool
    on_front: bool


class ExperimentRow(msgspec.Struct, kw_only=True):
    """One experiment's row of the cost-effect report: its cost, its scores, what they gained."""

    experiment: str
    is_baseline: bool
    cost: str
    cost_by_category: dict[str, str]
    cost_by_stage: dict[str, str]
    events: int
    accelerator_hours: str
    tokens_seen: int | None
    benchmarks: list[BenchmarkCell]
    regressions: list[str]
    rework_exposure: str | None
    rework_since: datetime | None
    planned_tokens: int | None
    running: bool | None
    forecast_cost_at_completion: str | None


class FrontPoint(msgspec.Struct):
    """An experiment on a benchmark's cost/score Pareto front."""

    experiment: str
    cost: str
    value: str


class Front(msgspec.Struct):
    """The cost/score Pareto front of one target benchmark."""

    benchmark: str
    higher_is_better: bool
    experiments: list[FrontPoint]


class CostEffectReport(msgspec.Struct, kw_only=True):
    """`GET /v1/reports/cost-effect`: one row per experiment and the fronts."""

    project: str
    currency: str
    baseline: str | None
    tolerance: str
    total_cost: str
    rows: list[ExperimentRow]
    fronts: list[Front]


@dataclass
class _Spend:
    cost: int = 0
    events: int = 0
    accelerator_micro: int = 0
    by_category: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_stage: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (epoch_us, cost) of each event, for the rework exposure
    timeline: list[tuple[int, int]] = field(default_factory=list)


def _spend_by_experiment(
    events: Sequence[LoggedEvent], accelerators: set[str], filters: ReportFilter
) -> dict[str, _Spend]:
    spend: dict[str, _Spend] = defaultdict(_Spend)
    for ev in events:
        if not filters.keeps(ev):
            continue
        s = spend[ev.experiment]
        s.cost += ev.cost_nano
        s.events += 1
        s.by_category[ev.category] += ev.cost_nano
        s.by_stage[ev.stage] += ev.cost_nano
        if ev.sku in accelerators:
            s.accelerator_micro += ev.quantity_micro
        s.timeline.append((ev.epoch_us, ev.cost_nano))
    return spend


class Cell(NamedTuple):
    """One cell of the kept totals: a whole UTC day (its start, µs) of one stage, experiment,
    category, SKU and owner, with its cost (nano), quantity (micro) and events."""

    day_us: int
    stage: str
    experiment: str
    category: str
    sku: str
    owner: str
    cost: int
    quantity: int
    events: int


def spend_of_cells(
    cells: Iterable[Cell],
    events: Sequence[LoggedEvent],
    accelerators: set[str],
    filters: ReportFilter,
) -> dict[str, _Spend]:
    """`_spend_by_experiment` of a project's events given as whole-day cells of the totals
    (the days where no time the report reads falls inside: whole days in or out of the time
    range, no rework restart) and the `events` of the other days. A cell stands in the
    timeline as one point at its day's start: a restart point inside a day is on a day of
    `events`, so the rework exposure sums the same costs. Filters by stage and owner (not
    tags: cells hold only attributed tags) apply to cells; the time range must hold whole
    days of cells."""
    spend = _spend_by_experiment(events, accelerators, filters)
    for c in cells:
        if not c.experiment or not c.events or not filters.keeps_time(c.day_us):
            continue
        if (filters.stage is not None and c.stage != filters.stage) or (
            filters.owner is not None and c.owner != filters.owner
        ):
            continue
        s = spend[c.experiment]
        s.cost += c.cost
        s.events += c.events
        s.by_category[c.category] += c.cost
        s.by_stage[c.stage] += c.cost
        if c.sku in accelerators:
            s.accelerator_micro += c.quantity
        s.timeline.append((c.day_us, c.cost))
    return spend


def _latest(results: Sequence[EvaluationResult]) -> dict[str, dict[str, EvaluationResult]]:
    """experiment -> benchmark -> its latest result (latest time, then greatest id)."""
    latest: dict[str, dict[str, EvaluationResult]] = defaultdict(dict)
    for r in results:
        held = latest[r.experiment].get(r.benchmark)
        if held is None or (r.time, r.id) > (held.time, held.id):
            latest[r.experiment][r.benchmark] = r
    return latest


def _gain(result: EvaluationResult, baseline: EvaluationResult) -> Decimal:
    change = result.decimal - baseline.decimal
    return change if result.higher_is_better else -change


def _cost_per_point(cost_nano: int, gain: Decimal) -> str | None:
    if gain <= 0:
        return None
    return format_money(round(Fraction(cost_nano) / Fraction(gain)))


def _rework(
    spend: _Spend,
    regressed: list[str],
    results: Sequence[EvaluationResult],
    base_latest: Mapping[str, EvaluationResult],
    tolerance: Decimal,
) -> tuple[int, datetime | None]:
    """(cost from the last good checkpoint on, that checkpoint's time; None: from the start).
    An event's time is when its usage began (importers stamp each slice at its start): usage
    that began at the checkpoint's time ran after it, and is counted."""
    restart: datetime | None = None
    for benchmark in regressed:
        base = base_latest[benchmark]
        good = [
            r.time for r in results if r.benchmark == benchmark and _gain(r, base) >= -tolerance
        ]
        if not good:
            return spend.cost, None
        last_good = max(good)
        restart = last_good if restart is None else min(restart, last_good)
    assert restart is not None
    since = _micros(restart)
    return sum(c for t, c in spend.timeline if t >= since), restart


def _front(points: list[tuple[str, int, Decimal]], higher: bool) -> list[tuple[str, int, Decimal]]:
    """The non-dominated (experiment, cost, value) points, cheapest first."""
    sign = 1 if higher else -1

    def dominates(b: tuple[str, int, Decimal], a: tuple[str, int, Decimal]) -> bool:
        no_worse = b[1] <= a[1] and sign * b[2] >= sign * a[2]
        return no_worse and (b[1] < a[1] or sign * b[2] > sign * a[2])

    kept = [a for a in points if not any(dominates(b, a) for b in points)]
    return sorted(kept, key=lambda p: (p[1], p[0]))


def _forecast(
    cost: int, tokens_seen: int | None, planned: int | None
) -> tuple[bool | None, str | None]:
    if planned is None:
        return None, None
    if tokens_seen is not None and tokens_seen >= planned:
        return False, format_money(cost)
    if not tokens_seen:
        return True, None
    return True, format_money(round_half_even_div(cost * planned, tokens_seen))


def _money(sums: Mapping[str, int]) -> dict[str, str]:
    return {k: format_money(v) for k, v in sorted(sums.items())}


def _cells(
    latest: Mapping[str, EvaluationResult],
    base_latest: Mapping[str, EvaluationResult],
    settings: EvaluationSettings,
    cost: int,
    tolerance: Decimal,
) -> list[BenchmarkCell]:
    cells = []
    for name, r in sorted(latest.items()):
        kind = settings.benchmarks.get(name, "other")
        base = base_latest.get(name)
        change = gain = None
        if base is not None:
            change, gain = r.decimal - base.decimal, _gain(r, base)
        cells.append(
            BenchmarkCell(
                benchmark=name,
                kind=kind,
                value=r.value,
                higher_is_better=r.higher_is_better,
                time=r.time,
                step=r.step,
                tokens_seen=r.tokens_seen,
                baseline_value=base.value if base is not None else None,
                change=None if change is None else str(change),
                gain=None if gain is None else str(gain),
                cost_per_point=(
                    _cost_per_point(cost, gain) if kind == "target" and gain is not None else None
                ),
                regression=kind == "general" and gain is not None and gain < -tolerance,
                on_front=False,
            )
        )
    return cells


def cost_effect(
    project: str,
    currency: str,
    settings: EvaluationSettings,
    events: Sequence[LoggedEvent],
    accelerators: set[str],
    results: Sequence[EvaluationResult],
    filters: ReportFilter,
    spend: Mapping[str, _Spend] | None = None,
) -> CostEffectReport:
    """The report (the rules: this module's docstring). `spend`: the events' spend per
    experiment already summed (`spend_of_cells`), in place of `events`."""
    tolerance = Decimal(settings.tolerance)
    if spend is None:
        spend = _spend_by_experiment(events, accelerators, filters)
    counted = [r for r in results if filters.keeps_time(_micros(r.time))]
    latest = _latest(counted)
    names = set(spend) if filters.narrows_events else set(spend) | set(latest)
    base_latest = latest.get(settings.baseline or "", {}) if settings.baseline else {}
    by_experiment: dict[str, list[EvaluationResult]] = defaultdict(list)
    for r in counted:
        by_experiment[r.experiment].append(r)
    rows = []
    for name in sorted(names):
        s = spend.get(name, _Spend())
        cells = _cells(latest.get(name, {}), base_latest, settings, s.cost, tolerance)
        regressed = [c.benchmark for c in cells if c.regression]
        exposure, since = (
            _rework(s, regressed, by_experiment[name], base_latest, tolerance)
            if regressed
            else (None, None)
        )
        seen = max(
            (r.tokens_seen for r in by_experiment[name] if r.tokens_seen is not None), default=None
        )
        planned = settings.planned_tokens.get(name)
        running, forecast = _forecast(s.cost, seen, planned)
        rows.append(
            ExperimentRow(
                experiment=name,
                is_baseline=name == settings.baseline,
                cost=format_money(s.cost),
                cost_by_category=_money(s.by_category),
                cost_by_stage=_money(s.by_stage),
                events=s.events,
                accelerator_hours=format_quantity(s.accelerator_micro),
                tokens_seen=seen,
                benchmarks=cells,
                regressions=regressed,
                rework_exposure=None if exposure is None else format_money(exposure),
                rework_since=since,
                planned_tokens=planned,
                running=running,
                forecast_cost_at_completion=forecast,
            )
        )
    fronts = _fronts(rows, spend, latest, settings)
    return CostEffectReport(
        project=project,
        currency=currency,
        baseline=settings.baseline,
        tolerance=settings.tolerance,
        total_cost=format_money(
            sum(spend[r.experiment].cost for r in rows if r.experiment in spend)
        ),
        rows=rows,
        fronts=fronts,
    )


def _fronts(
    rows: list[ExperimentRow],
    spend: Mapping[str, _Spend],
    latest: Mapping[str, Mapping[str, EvaluationResult]],
    settings: EvaluationSettings,
) -> list[Front]:
    """One front per target benchmark some row has a value of; marks the rows' cells."""
    fronts = []
    for benchmark in sorted(b for b, kind in settings.benchmarks.items() if kind == "target"):
        points, higher = [], True
        for row in rows:
            r = latest.get(row.experiment, {}).get(benchmark)
            if r is not None:
                cost = spend[row.experiment].cost if row.experiment in spend else 0
                points.append((row.experiment, cost, r.decimal))
                higher = r.higher_is_better
        if not points:
            continue
        front = _front(points, higher)
        on = {p[0] for p in front}
        for row in rows:
            for cell in row.benchmarks:
                if cell.benchmark == benchmark and row.experiment in on:
                    cell.on_front = True
        fronts.append(
            Front(
                benchmark=benchmark,
                higher_is_better=higher,
                experiments=[
                    FrontPoint(
                        experiment=e,
                        cost=format_money(c),
                        value=latest[e][benchmark].value,
                    )
                    for e, c, _ in front
                ],
            )
        )
    return fronts
