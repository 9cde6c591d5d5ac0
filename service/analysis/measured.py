"""Analyses from measurements: experiment names read into the figures a caller would type in.

A domain-mix `mixes[i].experiment` becomes that mix's `scores` (the experiment's latest result
on each benchmark the project's evaluation settings declare, general or target) and, unless
given, its `cost_per_run` (its cost in the ledger, all of it). Data-strategy
`pilot_experiments` become `pilot_results` (per experiment, its results on `pilot_benchmark`
that report tokens seen: at each token count the latest) and, unless given,
`training_cost_per_token` = the pilot experiments' summed ledger cost ÷ their summed tokens
seen (the most each reports), rounded half-even to 24 decimals. The request so completed is
the typed-in request the same analysis then answers: the same figures give the same answer.
The answer to a request that named experiments also carries their `verdict` (`verdict.py`),
from the same report the figures were read from (the project is read once per request).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING

import msgspec

from ..evaluations.effect import CostEffectReport, ExperimentRow, ReportFilter
from ..evaluations.model import EvaluationResult, EvaluationSettings
from ..evaluations.service import cost_effect_report, evaluation_settings, list_results
from ..ratecards.catalog import RateCards
from .arithmetic import AnalysisError
from .data_strategy import DataStrategyIn, DataStrategyOut, analyse_data_strategy
from .data_strategy_inputs import PilotPoint
from .domain_mix import DomainMixIn, DomainMixOut, MixIn, analyse_domain_mix
from .verdict import Scale, Verdict, cost_per_point_verdict

if TYPE_CHECKING:
    from ..stores import Stores

__all__ = ["data_strategy_answer", "domain_mix_answer"]

_DOMAIN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_RATE_PLACES = Decimal(1).scaleb(-24)


@dataclass(frozen=True)
class _Measured:
    """What one request reads of its project, once: the cost-effect report and the settings."""

    report: CostEffectReport
    settings: EvaluationSettings

    @property
    def rows(self) -> dict[str, ExperimentRow]:
        return {row.experiment: row for row in self.report.rows}


async def _measure(store: Stores, rate_cards: RateCards, project: str | None) -> _Measured:
    if project is None:
        raise AnalysisError("$.project", "required to read figures from experiments")
    report = await cost_effect_report(store, rate_cards, project, ReportFilter())
    return _Measured(report=report, settings=await evaluation_settings(store, project))


def _cost(row: ExperimentRow, field: str) -> str:
    if row.cost.startswith("-"):
        raise AnalysisError(field, f"{row.experiment!r} has a negative cost ({row.cost})")
    return row.cost


def measured_domain_mix(measured: _Measured, req: DomainMixIn) -> DomainMixIn:
    """`req` with every measured mix read into scores and cost_per_run."""
    rows = measured.rows
    declared = measured.settings.benchmarks
    mixes: list[MixIn] = []
    for i, mix in enumerate(req.mixes):
        field = f"$.mixes[{i}].experiment"
        if mix.experiment is None:
            mixes.append(mix)
            continue
        if mix.scores is not None:
            raise AnalysisError(field, "give scores or an experiment, not both")
        row = rows.get(mix.experiment)
        if row is None:
            raise AnalysisError(field, f"no cost or result of {mix.experiment!r} in the project")
        scores = {c.benchmark: c.value for c in row.benchmarks if c.benchmark in declared}
        if not scores:
            raise AnalysisError(field, "it has no result on a benchmark the settings declare")
        for name in scores:
            if not _DOMAIN.match(name):
                raise AnalysisError(
                    field, f"benchmark {name!r} is no domain name ([a-z][a-z0-9_]*)"
                )
        cost = mix.cost_per_run if mix.cost_per_run is not None else _cost(row, field)
        mixes.append(
            msgspec.structs.replace(mix, scores=scores, cost_per_run=cost, experiment=None)
        )
    return msgspec.structs.replace(req, mixes=mixes, scale_tokens=None)


def _pilot_points(
    strategy: str, results: list[EvaluationResult], field: str
) -> tuple[list[PilotPoint], int]:
    """The pilot points of one experiment's results (latest per token count), and the most
    tokens it saw."""
    latest: dict[int, EvaluationResult] = {}
    for r in results:  # by time, then id
        if r.tokens_seen:
            latest[r.tokens_seen] = r
    if not latest:
        raise AnalysisError(field, "no result on pilot_benchmark reports tokens_seen")
    points = [
        msgspec.convert({"strategy": strategy, "tokens": t, "score": r.value}, PilotPoint)
        for t, r in sorted(latest.items())
    ]
    return points, max(latest)


def measured_data_strategy(
    measured: _Measured, results: list[EvaluationResult], req: DataStrategyIn
) -> DataStrategyIn:
    """`req` with its pilot experiments read into pilot_results (and the training rate)."""
    rows = measured.rows
    pilots = list(req.pilot_results)
    cost, tokens = Decimal(0), 0
    for strategy, experiment in req.pilot_experiments.items():
        field = f"$.pilot_experiments.{strategy}"
        mine = [
            r for r in results if r.experiment == experiment and r.benchmark == req.pilot_benchmark
        ]
        points, seen = _pilot_points(strategy, mine, field)
        pilots += points
        tokens += seen
        if experiment in rows:
            cost += Decimal(_cost(rows[experiment], field))
    rate = req.training_cost_per_token
    if rate is None:
        exact = (cost / tokens).quantize(_RATE_PLACES, rounding=ROUND_HALF_EVEN)
        rate = format(exact, "f").rstrip("0").rstrip(".") or "0"
    return msgspec.structs.replace(
        req,
        pilot_results=pilots,
        training_cost_per_token=rate,
        pilot_experiments={},
        scale_tokens=None,
    )


def _verdict(
    measured: _Measured,
    options: Sequence[tuple[str, str]],
    targets: list[str] | None,
    scale_tokens: int | None,
) -> Verdict:
    """The verdict over the measured options (option name, experiment); `targets` None: the
    target benchmarks the evaluation settings declare."""
    rows, settings, report = measured.rows, measured.settings, measured.report
    if targets is None:
        targets = [b for b, kind in settings.benchmarks.items() if kind == "target"]
    return cost_per_point_verdict(
        [(name, rows[experiment]) for name, experiment in options],
        targets,
        Scale(tokens=scale_tokens, planned=settings.planned_tokens),
        report.currency,
        report.baseline,
        report.tolerance,
    )


async def domain_mix_answer(store: Stores, rate_cards: RateCards, req: DomainMixIn) -> DomainMixOut:
    """The analysis of the request with its measured mixes read in (the project read once),
    and, when a mix names an experiment, the verdict over those mixes."""
    options = [(m.name, m.experiment) for m in req.mixes if m.experiment is not None]
    if not options:
        return analyse_domain_mix(req)
    measured = await _measure(store, rate_cards, req.project)
    answer = analyse_domain_mix(measured_domain_mix(measured, req))
    verdict = _verdict(measured, options, None, req.scale_tokens)
    return msgspec.structs.replace(answer, verdict=verdict)


async def data_strategy_answer(
    store: Stores, rate_cards: RateCards, req: DataStrategyIn
) -> DataStrategyOut:
    """The analysis of the request with its pilot experiments read in (the project read once),
    and, when it names some, the verdict over them on pilot_benchmark."""
    if not req.pilot_experiments:
        return analyse_data_strategy(req)
    measured = await _measure(store, rate_cards, req.project)
    if req.pilot_benchmark is None:
        raise AnalysisError("$.pilot_benchmark", "required with pilot_experiments")
    assert req.project is not None  # `_measure`
    results = await list_results(store, req.project)
    answer = analyse_data_strategy(measured_data_strategy(measured, results, req))
    options = list(req.pilot_experiments.items())
    verdict = _verdict(measured, options, [req.pilot_benchmark], req.scale_tokens)
    return msgspec.structs.replace(answer, verdict=verdict)
