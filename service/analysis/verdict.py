"""The verdict of a measured comparison: which option wins on cost per point, and what scaling
it up would take (pure rule over the cost-effect report's rows).

Each option of a data-strategy or domain-mix request that names an experiment is one
experiment's row of the cost-effect report (its exact cost, tokens seen, gains over the
baseline, general regressions, rework exposure):

* **points** = Σ gain over the target benchmarks (domain-mix: the benchmarks the evaluation
  settings declare `target`; data-strategy: `pilot_benchmark`). An option without a gain on
  one of them (no result, or the baseline has none) is `incomplete`.
* **cost_per_point** (points > 0) = cost ÷ points, rounded half-even to the nano; with one
  target benchmark it is the report's cost_per_point. Compared exactly, unrounded.
* **status**: `incomplete`; `no_gain` (points ≤ 0); `no_cost` (points > 0 but a cost ≤ 0 in
  the ledger: no usage recorded under the experiment, or credits above it; a cost per point
  of 0 or less would win on a gap in the data); `regresses` (points > 0 and a general
  benchmark below the baseline by more than the tolerance: the report's regressions);
  `eligible` otherwise.
* **winner**: the eligible option with the lowest cost per point; ties go to the larger
  points, then the lower cost, then request order. None when no option is eligible (no option
  gains, or every option that gains regresses). **runner_up**: the next option of the ranking
  (eligible ones by the same order, then the regressing ones, by the same order) that gains.
* **scale_tokens**: the request's, else the winner's `planned_tokens` in the evaluation
  settings (with no winner: the first ranked option's), else none.
* **cost_at_scale** = cost × scale_tokens ÷ tokens_seen, rounded half-even to the nano (the
  pilot's measured cost per token, unrounded, times the tokens at scale: the report's forecast
  at completion when scale_tokens is the option's planned_tokens). **rework_exposure_at_scale**
  = rework_exposure × scale_tokens ÷ tokens_seen, likewise: the same share of the scaled run
  after its last good checkpoint. None without scale_tokens or tokens_seen. **cost_per_token**
  is shown rounded half-even to 24 decimals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

import msgspec

from costcore.money import format_money, format_money_for_people

from ..evaluations.effect import ExperimentRow
from .arithmetic import AnalysisError

__all__ = [
    "Scale",
    "Verdict",
    "VerdictOption",
    "cost_per_point_verdict",
    "refuse_scale_tokens",
]

_RATE_PLACES = Decimal(1).scaleb(-24)
_NANO = 9
_STATUS_ORDER = {"eligible": 0, "regresses": 1, "no_cost": 2, "no_gain": 3, "incomplete": 4}


class VerdictOption(msgspec.Struct, kw_only=True):
    """One measured option: money exact to the nano in `currency`, gains in score points."""

    name: str
    experiment: str
    status: str
    cost: str
    tokens_seen: int | None
    target_gains: dict[str, str]
    points: str | None
    cost_per_point: str | None
    general_gains: dict[str, str]
    regressions: list[str]
    rework_exposure: str | None
    cost_per_token: str | None
    cost_at_scale: str | None
    rework_exposure_at_scale: str | None


class Verdict(msgspec.Struct, kw_only=True):
    """Which measured option wins on cost per point gained on the target benchmarks, and what
    scaling it up would take; `options` ranked (the rules: docs/guides/cost-effect.md)."""

    currency: str
    baseline: str | None
    tolerance: str
    target_benchmarks: list[str]
    winner: str | None
    runner_up: str | None
    reason: str
    scale_tokens: int | None
    scale_tokens_source: str | None
    options: list[VerdictOption]
    summary: str


@dataclass
class _Ranked:
    index: int
    view: VerdictOption
    cost: int  # nano
    points: Fraction | None
    exposure: int | None  # nano

    @property
    def per_point(self) -> Fraction | None:
        if not self.points or self.points <= 0 or self.cost <= 0:
            return None
        return Fraction(self.cost) / self.points

    def key(self) -> tuple[int, Fraction, Fraction, int, int]:
        per_point, points = self.per_point, self.points
        if per_point is None or points is None:
            return (_STATUS_ORDER[self.view.status], Fraction(0), Fraction(0), 0, self.index)
        return (_STATUS_ORDER[self.view.status], per_point, -points, self.cost, self.index)


def refuse_scale_tokens(scale_tokens: int | None) -> None:
    """A typed-in request has no verdict to scale: its `scale_tokens` is refused (the measured
    answer reads the experiments in, clears it and scales the verdict)."""
    if scale_tokens is not None:
        raise AnalysisError("$.scale_tokens", "only with experiments: it scales their verdict")


def _nano(text: str) -> int:
    """An exact money string of the report (at most 9 decimals) in nano units."""
    return int(Decimal(text).scaleb(_NANO))


def _gains(row: ExperimentRow, kind: str, names: Sequence[str] | None) -> dict[str, Fraction]:
    return {
        c.benchmark: Fraction(Decimal(c.gain))
        for c in row.benchmarks
        if c.gain is not None and (c.kind == kind if names is None else c.benchmark in names)
    }


def _scaled(nano: int | None, scale: int | None, seen: int | None) -> str | None:
    if nano is None or not scale or not seen:
        return None
    return format_money(round(Fraction(nano * scale, seen)))


def _option(i: int, name: str, row: ExperimentRow, targets: Sequence[str]) -> _Ranked:
    cost = _nano(row.cost)
    target = _gains(row, "target", targets)
    points = sum(target.values(), Fraction(0)) if set(target) == set(targets) else None
    if points is None or not targets:
        status = "incomplete"
    elif points <= 0:
        status = "no_gain"
    elif cost <= 0:
        status = "no_cost"
    else:
        status = "regresses" if row.regressions else "eligible"
    exposure = None if row.rework_exposure is None else _nano(row.rework_exposure)
    rate = None
    if row.tokens_seen:
        with localcontext(prec=80):
            exact = Decimal(cost).scaleb(-_NANO) / Decimal(row.tokens_seen)
            rate = format(exact.quantize(_RATE_PLACES, rounding=ROUND_HALF_EVEN), "f")
        rate = rate.rstrip("0").rstrip(".") or "0"
    view = VerdictOption(
        name=name,
        experiment=row.experiment,
        status=status,
        cost=row.cost,
        tokens_seen=row.tokens_seen,
        target_gains={b: _text(g) for b, g in target.items()},
        points=None if points is None else _text(points),
        cost_per_point=None
        if points is None or points <= 0 or cost <= 0
        else format_money(round(Fraction(cost) / points)),
        general_gains={b: _text(g) for b, g in _gains(row, "general", None).items()},
        regressions=list(row.regressions),
        rework_exposure=row.rework_exposure,
        cost_per_token=rate,
        cost_at_scale=None,
        rework_exposure_at_scale=None,
    )
    return _Ranked(index=i, view=view, cost=cost, points=points, exposure=exposure)


def _text(x: Fraction) -> str:
    """A gain, exactly: a sum of decimal strings is a terminating decimal (its denominator
    divides a power of ten), divided out at a precision that holds every digit."""
    with localcontext(prec=200):
        d = Decimal(x.numerator) / Decimal(x.denominator)
        return format(d.normalize(), "f") if d != d.to_integral_value() else str(int(d))


@dataclass(frozen=True)
class Scale:
    """The tokens at full scale: the request's, else the evaluation settings' planned tokens."""

    tokens: int | None
    planned: Mapping[str, int]


def _scale_tokens(scale: Scale, first: _Ranked | None) -> tuple[int | None, str | None]:
    if scale.tokens is not None:
        return scale.tokens, "request: scale_tokens"
    if first is not None and first.view.experiment in scale.planned:
        experiment = first.view.experiment
        return scale.planned[experiment], f"evaluation settings: planned_tokens of {experiment}"
    return None, None


def _reason(winner: _Ranked | None, runner: _Ranked | None, ranked: list[_Ranked], cur: str) -> str:
    def per_point(r: _Ranked) -> str:
        return format_money_for_people(_nano(r.view.cost_per_point or "0"), cur)

    if winner is not None:
        text = (
            f"{winner.view.name} wins: {per_point(winner)} per point over {winner.view.points} "
            "points, the lowest cost per point among options without a general regression"
        )
        if runner is not None:
            tie = runner.per_point == winner.per_point
            text += f"; runner-up {runner.view.name} at {per_point(runner)} per point" + (
                " (a tie on cost per point: the larger gain wins)" if tie else ""
            )
            if runner.view.status == "regresses":
                text += f", but it regresses {', '.join(runner.view.regressions)}"
        return text
    if any(r.view.status == "regresses" for r in ranked):
        best = ranked[0]
        return (
            "no winner: every option that gains regresses a general benchmark beyond the "
            f"tolerance; the cheapest per point, {best.view.name} ({per_point(best)} per "
            f"point), regresses {', '.join(best.view.regressions)}"
        )
    if any(r.view.status == "no_cost" for r in ranked):
        names = ", ".join(r.view.name for r in ranked if r.view.status == "no_cost")
        return (
            f"no winner: {names} gains but has no positive cost in the ledger (record its "
            "usage under its experiment), and no other option gains without a regression"
        )
    if all(r.view.status == "incomplete" for r in ranked):
        return (
            "no winner: no option has a gain on every target benchmark (declare the baseline and "
            "the target benchmarks in the evaluation settings, and report results on them)"
        )
    return "no winner: no option gains over the baseline on the target benchmarks"


def _summary(verdict: Verdict, told: list[_Ranked], cur: str) -> str:
    """The verdict for people: the reason, then each told option at scale (money rounded to
    the currency's minor units); past the winner and the runner-up, the regressing options
    cheaper per point say so."""

    def money(text: str | None) -> str:
        return format_money_for_people(_nano(text or "0"), cur)

    parts = [verdict.reason + "."]
    if not told:
        return parts[0]
    if verdict.scale_tokens is None:
        parts.append("No scale-up figures: give scale_tokens, or declare planned_tokens.")
        return " ".join(parts)
    for i, r in enumerate(told):
        v = r.view
        if v.cost_at_scale is None:
            parts.append(f"{v.name} reports no tokens seen: it cannot be scaled.")
            continue
        text = f"At {verdict.scale_tokens:,} tokens {v.name} would cost {money(v.cost_at_scale)}"
        if i >= 2:
            text += f" (cheaper per point, {money(v.cost_per_point)}, but it regresses "
            text += f"{', '.join(v.regressions)})"
        if v.rework_exposure_at_scale is not None:
            text += f", {money(v.rework_exposure_at_scale)} of it at risk of rework"
        parts.append(text + ".")
    return " ".join(parts)


def _undercuts(r: _Ranked, winner: _Ranked) -> bool:
    """A regressing option cheaper per point than the winner."""
    mine, best = r.per_point, winner.per_point
    return r.view.status == "regresses" and mine is not None and best is not None and mine < best


def _told(ranked: list[_Ranked], winner: _Ranked | None, runner: _Ranked | None) -> list[_Ranked]:
    """The options the summary speaks of: the winner, the runner-up and every regressing option
    cheaper per point than the winner; with no winner, the cheapest regressing one."""
    if winner is None:
        return [r for r in ranked[:1] if r.view.status == "regresses"]
    cheaper = [r for r in ranked if r is not runner and _undercuts(r, winner)]
    return [winner, *([runner] if runner else []), *cheaper]


def cost_per_point_verdict(
    options: Sequence[tuple[str, ExperimentRow]],
    targets: Sequence[str],
    scale: Scale,
    currency: str,
    baseline: str | None,
    tolerance: str,
) -> Verdict:
    """The verdict over the measured `options` (option name, its experiment's report row)."""
    targets = sorted(targets)
    ranked = sorted(
        (_option(i, name, row, targets) for i, (name, row) in enumerate(options)),
        key=_Ranked.key,
    )
    winner = next((r for r in ranked if r.view.status == "eligible"), None)
    gaining = [r for r in ranked if r.view.status in ("eligible", "regresses")]
    runner = gaining[1] if winner is not None and len(gaining) > 1 else None
    tokens, source = _scale_tokens(scale, winner or (ranked[0] if ranked else None))
    for r in ranked:
        r.view.cost_at_scale = _scaled(r.cost, tokens, r.view.tokens_seen)
        r.view.rework_exposure_at_scale = _scaled(r.exposure, tokens, r.view.tokens_seen)
    verdict = Verdict(
        currency=currency,
        baseline=baseline,
        tolerance=tolerance,
        target_benchmarks=list(targets),
        winner=None if winner is None else winner.view.name,
        runner_up=None if runner is None else runner.view.name,
        reason=_reason(winner, runner, ranked, currency),
        scale_tokens=tokens,
        scale_tokens_source=source,
        options=[r.view for r in ranked],
        summary="",
    )
    verdict.summary = _summary(verdict, _told(ranked, winner, runner), currency)
    return verdict
