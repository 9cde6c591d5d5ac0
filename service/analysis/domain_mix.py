"""`domain-mix`: mid-training domain mixes, expected cost with rework risk, Pareto front.

A mix's expected total is its run cost (runs × cost per run) plus its rework risk
(P(general score < floor) × rework cost). A mix is on the Pareto front unless another mix is at
most as expensive and at least as good (on the weighted score, or on every domain), strictly
better once. Floats are used in one place only: the normal CDF for a derived rework
probability (rounded to 6 decimals before it touches money).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

import msgspec

from .arithmetic import (
    AnalysisError,
    exact,
    money_text,
    number_text,
    quantize,
    revalidate,
)
from .domain_mix_inputs import DomainMixIn, MixIn
from .schema import BreakEven, Line, Savings, savings_versus
from .verdict import Verdict, refuse_scale_tokens

__all__ = [
    "DomainMixIn",
    "DomainMixOption",
    "DomainMixOut",
    "MixIn",
    "analyse_domain_mix",
]

PROBABILITY_PLACES = 6

_ZERO = Decimal(0)
_ONE = Decimal(1)


class DomainMixOption(msgspec.Struct, kw_only=True):
    """One mix: costs in `currency`, scores in the pilot score units, probability in 0..1."""

    name: str
    currency: str
    expected_total_cost: str
    run_cost: str
    expected_rework_cost: str
    runs: int
    cost_per_run: str
    rework_probability: str
    rework_probability_source: str
    general_score: str
    weighted_score: str
    scores: dict[str, str]
    on_pareto_front: bool
    dominated_by: list[str]
    within_budget: bool
    meets_min_score: bool
    breakdown: list[Line]


class DomainMixOut(msgspec.Struct, kw_only=True):
    """Answer of `POST /v1/analysis/domain-mix`; `pareto_front` lists mixes by expected cost.
    `verdict` (mixes named by experiment; null when typed in): which wins on cost per point on
    the target benchmarks, and what scaling it up would take."""

    analysis: str
    currency: str
    options: list[DomainMixOption]
    recommended: str
    savings: Savings
    break_even: BreakEven
    pareto_front: list[str]
    score_weights: dict[str, str]
    assumptions: list[str]
    verdict: Verdict | None = None  # with experiments: cost per point and scale-up


# --------------------------------------------------------------------------------------
# Inputs: the request read into exact numbers and checked beyond its schema
# --------------------------------------------------------------------------------------


@dataclass
class _Inputs:
    domains: list[str]  # in the first mix's order
    weights: dict[str, Decimal]  # normalised to sum 1
    floor: Decimal  # general_floor
    sd: Decimal  # general_score_sd
    rework_cost: Decimal


def _scores(req: DomainMixIn) -> list[dict[str, str]]:
    """Every mix's scores (measured mixes are read into typed-in ones before the analysis)."""
    scores = []
    for i, mix in enumerate(req.mixes):
        if mix.scores is None:
            reason = "give scores, or an experiment and the project"
            raise AnalysisError(f"$.mixes[{i}].scores", reason)
        if mix.cost_per_run is None and req.cost_per_run is None:
            raise AnalysisError("$.cost_per_run", f"required: mix {mix.name!r} has none")
        scores.append(mix.scores)
    return scores


def _check_mixes(req: DomainMixIn) -> list[str]:
    """The domains every mix scores; raises for duplicate names or mismatched domains."""
    scores = _scores(req)
    domains = list(scores[0])
    names: set[str] = set()
    for i, mix in enumerate(req.mixes):
        if mix.name in names:
            raise AnalysisError(f"$.mixes[{i}].name", f"duplicate mix name {mix.name!r}")
        names.add(mix.name)
        if set(scores[i]) != set(domains):
            raise AnalysisError(
                f"$.mixes[{i}].scores",
                f"must name the same domains as the first mix: {sorted(domains)}",
            )
        if mix.proportions is not None and sum(Decimal(v) for v in mix.proportions.values()) != 1:
            raise AnalysisError(f"$.mixes[{i}].proportions", "shares must sum to 1")
    for j, domain in enumerate(req.general_domains):
        if domain not in domains:
            raise AnalysisError(f"$.general_domains[{j}]", f"{domain!r} has no pilot scores")
    return domains


def _normalised_weights(req: DomainMixIn, domains: list[str]) -> dict[str, Decimal]:
    if req.score_weights is None:
        raw_weights = {d: _ONE for d in domains}
    else:
        if set(req.score_weights) != set(domains):
            raise AnalysisError(
                "$.score_weights", f"must weight exactly the domains {sorted(domains)}"
            )
        raw_weights = {d: Decimal(req.score_weights[d]) for d in domains}
    weight_sum = sum(raw_weights.values(), _ZERO)
    if weight_sum == 0:
        raise AnalysisError("$.score_weights", "weights must not all be 0")
    return {d: w / weight_sum for d, w in raw_weights.items()}


def _read_inputs(req: DomainMixIn) -> _Inputs:
    domains = _check_mixes(req)
    weights = _normalised_weights(req, domains)
    if req.baseline is not None and req.baseline not in {mix.name for mix in req.mixes}:
        raise AnalysisError("$.baseline", f"no mix named {req.baseline!r}")
    return _Inputs(
        domains=domains,
        weights=weights,
        floor=Decimal(req.general_floor),
        sd=Decimal(req.general_score_sd),
        rework_cost=Decimal(req.rework_cost),
    )


# --------------------------------------------------------------------------------------
# Computation: expected cost per mix, Pareto front, recommendation, break-even
# --------------------------------------------------------------------------------------


def _normal_cdf(z: Decimal) -> Decimal:
    """Φ(z) via math.erfc, rounded half-even to 6 decimals."""
    value = 0.5 * math.erfc(-float(z) / math.sqrt(2.0))
    return quantize(Decimal(repr(value)), PROBABILITY_PLACES)


@dataclass
class _Mix:
    index: int
    name: str
    run_cost: Decimal
    cost_per_run: Decimal
    probability: Decimal
    source: str
    rework: Decimal
    total: Decimal
    general: Decimal
    weighted: Decimal
    scores: dict[str, Decimal]


def _rework_probability(mix: MixIn, general: Decimal, inp: _Inputs) -> tuple[Decimal, str]:
    """P(general score < floor), and where it comes from."""
    if mix.rework_probability is not None:
        return Decimal(mix.rework_probability), "given"
    if inp.sd == 0:
        probability = _ONE if general < inp.floor else _ZERO
        source = (
            "derived: general score below floor"
            if general < inp.floor
            else ("derived: general score at or above floor")
        )
        return probability, source
    return _normal_cdf((inp.floor - general) / inp.sd), "derived: Φ((floor − general) / sd)"


def _cost_mix(i: int, mix: MixIn, req: DomainMixIn, inp: _Inputs) -> _Mix:
    domains = inp.domains
    assert mix.scores is not None  # `_check_mixes`
    scores = {d: Decimal(mix.scores[d]) for d in domains}
    general = sum((scores[d] for d in req.general_domains), _ZERO) / len(req.general_domains)
    weighted = sum((inp.weights[d] * scores[d] for d in domains), _ZERO)
    probability, source = _rework_probability(mix, general, inp)
    given = mix.cost_per_run if mix.cost_per_run is not None else req.cost_per_run
    assert given is not None  # `_check_mixes`
    cost_per_run = Decimal(given)
    run_cost = mix.runs * cost_per_run
    rework = probability * inp.rework_cost
    return _Mix(
        index=i,
        name=mix.name,
        run_cost=run_cost,
        cost_per_run=cost_per_run,
        probability=probability,
        source=source,
        rework=rework,
        total=run_cost + rework,
        general=general,
        weighted=weighted,
        scores=scores,
    )


def _dominates(a: _Mix, b: _Mix, per_domain: bool) -> bool:
    """True if `a` is at most as expensive and at least as good as `b`, strictly better once."""
    if a.total > b.total:
        return False
    if per_domain:
        if any(a.scores[d] < b.scores[d] for d in b.scores):
            return False
        strictly = a.total < b.total or any(a.scores[d] > b.scores[d] for d in b.scores)
    else:
        if a.weighted < b.weighted:
            return False
        strictly = a.total < b.total or a.weighted > b.weighted
    return strictly


@dataclass(frozen=True)
class _Limits:
    """The request's budget and minimum weighted score (None: no limit)."""

    budget: Decimal | None
    min_score: Decimal | None

    def within(self, m: _Mix) -> bool:
        return self.budget is None or m.total <= self.budget

    def meets(self, m: _Mix) -> bool:
        return self.min_score is None or m.weighted >= self.min_score


def _recommend(mixes: list[_Mix], limits: _Limits, on_front: dict[str, bool]) -> tuple[_Mix, str]:
    """The recommended mix and the rule that chose it (for the assumptions)."""
    candidates = [m for m in mixes if limits.within(m) and limits.meets(m)]
    if not candidates:
        raise AnalysisError(
            "$.budget" if limits.budget is not None else "$.min_weighted_score",
            "no mix is within the budget and reaches min_weighted_score",
        )
    if limits.min_score is not None:
        best = min(candidates, key=lambda m: (m.total, -m.weighted, not on_front[m.name], m.index))
        rule = "the cheapest expected total among mixes reaching min_weighted_score"
    else:
        best = min(candidates, key=lambda m: (-m.weighted, m.total, not on_front[m.name], m.index))
        rule = "the highest weighted score"
    if limits.budget is not None:
        rule += " within the budget"
    return best, rule


def _rework_break_even(best: _Mix, baseline: _Mix, cur: str) -> BreakEven:
    """The rework cost at which the recommended and the baseline mix cost the same."""
    definition = (
        "rework cost at which the recommended and the baseline mix have the same expected total: "
        "(run_cost_baseline − run_cost_recommended) / (P_recommended − P_baseline); above it the "
        "mix with the lower rework probability is cheaper"
    )

    def none(note: str) -> BreakEven:
        return BreakEven(
            quantity="rework_cost", value=None, unit=cur, definition=definition, note=note
        )

    if best is baseline:
        return none("the recommended mix is the baseline")
    if best.probability == baseline.probability:
        return none(
            "equal rework probabilities: the difference is run cost only, at any rework cost"
        )
    value = (baseline.run_cost - best.run_cost) / (best.probability - baseline.probability)
    if value < 0:
        cheaper = best if best.total < baseline.total else baseline
        return none(
            f"no non-negative rework cost equalises them: {cheaper.name} is cheaper at "
            "every rework cost"
        )
    return BreakEven(
        quantity="rework_cost", value=money_text(value), unit=cur, definition=definition
    )


def _breakdown(m: _Mix, req: DomainMixIn, inp: _Inputs) -> list[Line]:
    cur = req.currency
    return [
        Line(
            item="run_cost",
            value=money_text(m.run_cost),
            unit=cur,
            formula=f"runs × cost_per_run = {req.mixes[m.index].runs} × "
            f"{money_text(m.cost_per_run)}",
        ),
        Line(
            item="expected_rework_cost",
            value=money_text(m.rework),
            unit=cur,
            formula=f"P(general < floor) × rework_cost = {number_text(m.probability, 6)} × "
            f"{money_text(inp.rework_cost)}",
        ),
        Line(
            item="general_score",
            value=number_text(m.general),
            unit="score",
            formula=f"mean of {', '.join(req.general_domains)}",
        ),
        Line(
            item="weighted_score",
            value=number_text(m.weighted),
            unit="score",
            formula="Σ weight × score, weights normalised to sum 1",
        ),
    ]


def _option(
    m: _Mix, req: DomainMixIn, inp: _Inputs, dominated_by: dict[str, list[str]], limits: _Limits
) -> DomainMixOption:
    return DomainMixOption(
        name=m.name,
        currency=req.currency,
        expected_total_cost=money_text(m.total),
        run_cost=money_text(m.run_cost),
        expected_rework_cost=money_text(m.rework),
        runs=req.mixes[m.index].runs,
        cost_per_run=money_text(m.cost_per_run),
        rework_probability=number_text(m.probability, 6),
        rework_probability_source=m.source,
        general_score=number_text(m.general),
        weighted_score=number_text(m.weighted),
        scores={d: number_text(v) for d, v in m.scores.items()},
        on_pareto_front=not dominated_by[m.name],
        dominated_by=dominated_by[m.name],
        within_budget=limits.within(m),
        meets_min_score=limits.meets(m),
        breakdown=_breakdown(m, req, inp),
    )


def _assumptions(req: DomainMixIn, per_domain: bool, rule: str, baseline: _Mix) -> list[str]:
    return [
        "Money: exact decimal arithmetic (50 significant digits), rounded half-even to "
        f"0.01 {req.currency}.",
        "Expected total (currency) = runs × cost_per_run + P(general score < general_floor) × "
        "rework_cost.",
        f"General score = unweighted mean of the pilot scores of {', '.join(req.general_domains)}.",
        "Weighted score = Σ weight_d × score_d with weights normalised to sum 1 "
        f"({'equal weights' if req.score_weights is None else 'weights as given'}).",
        "P(general < floor) is the mix's rework_probability when given; otherwise, with "
        "general_score_sd = 0, 1 if the pilot general score is below the floor else 0; with "
        "sd > 0, "
        "Φ((floor − general) / sd), the full-run general score taken as normal around the pilot "
        "score (computed in floating point, rounded to 6 decimals).",
        "Pareto front: a mix is on it unless another mix has an expected total at most as high and "
        + (
            "a weighted score at least as high"
            if not per_domain
            else "every domain score at least as high"
        )
        + ", with at least one strictly better.",
        f"Recommended: {rule}; ties go to the lower expected total, then the Pareto front, then "
        "input order.",
        f"Savings compare with the baseline mix {baseline.name!r}.",
    ]


@exact
def analyse_domain_mix(req: DomainMixIn) -> DomainMixOut:
    """Expected cost (runs × cost + P(general < floor) × rework) and the cost/score Pareto front."""
    req = revalidate(req)
    cur = req.currency
    refuse_scale_tokens(req.scale_tokens)
    inp = _read_inputs(req)
    mixes = [_cost_mix(i, mix, req, inp) for i, mix in enumerate(req.mixes)]
    per_domain = req.pareto_on == "per_domain"
    dominated_by = {
        m.name: [o.name for o in mixes if o is not m and _dominates(o, m, per_domain)]
        for m in mixes
    }
    on_front = {m.name: not dominated_by[m.name] for m in mixes}
    limits = _Limits(
        budget=None if req.budget is None else Decimal(req.budget),
        min_score=None if req.min_weighted_score is None else Decimal(req.min_weighted_score),
    )
    best, rule = _recommend(mixes, limits, on_front)
    baseline = next(m for m in mixes if m.name == (req.baseline or mixes[0].name))
    savings = savings_versus(
        best.name,
        best.total,
        baseline.name,
        baseline.total,
        cur,
        "expected total of the baseline mix − expected total of the recommended mix "
        "(negative: the recommended mix costs more)",
    )
    front = sorted((m for m in mixes if on_front[m.name]), key=lambda m: (m.total, -m.weighted))
    return DomainMixOut(
        analysis="domain-mix",
        currency=cur,
        options=[_option(m, req, inp, dominated_by, limits) for m in mixes],
        recommended=best.name,
        savings=savings,
        break_even=_rework_break_even(best, baseline, cur),
        pareto_front=[m.name for m in front],
        score_weights={d: number_text(w, 6) for d, w in inp.weights.items()},
        assumptions=_assumptions(req, per_domain, rule, baseline),
    )
