"""`data-strategy`: flat quality filtering vs quality-aware upsampling (vs no scoring).

Every strategy costs scoring (corpus tokens × scoring rate; none when unfiltered) plus training
(tokens needed × training cost per token); a strategy that would show a token more often than
`max_token_repetitions` is infeasible. The answer recommends the cheapest feasible strategy and
gives the scoring rate at which the scored strategies (and not scoring at all) break even.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import msgspec

from .arithmetic import (
    AnalysisError,
    exact,
    money_text,
    number_text,
    rate_text,
    revalidate,
)
from .data_strategy_inputs import (
    STRATEGIES,
    DataStrategyIn,
    UpsampleBucket,
    scoring_rate_of,
    tokens_needed,
)
from .schema import BreakEven, Line, Savings, savings_versus
from .verdict import Verdict, refuse_scale_tokens

__all__ = [
    "DataStrategyIn",
    "DataStrategyOption",
    "DataStrategyOut",
    "UpsampleBucket",
    "analyse_data_strategy",
]

_ZERO = Decimal(0)


class DataStrategyOption(msgspec.Struct, kw_only=True):
    """One strategy: costs in `currency`, tokens in tokens, repetitions in times a token is seen."""

    name: str
    currency: str
    total_cost: str
    scoring_cost: str
    training_cost: str
    training_tokens: int
    tokens_needed_source: str
    max_token_repetitions: str
    feasible: bool
    breakdown: list[Line]
    notes: list[str]


class DataStrategyOut(msgspec.Struct, kw_only=True):
    """Answer of `POST /v1/analysis/data-strategy`; rates in currency/token. `verdict`
    (pilot_experiments; null when typed in): which pilot wins on cost per point on
    pilot_benchmark, and what scaling it up would take."""

    analysis: str
    currency: str
    options: list[DataStrategyOption]
    recommended: str
    savings: Savings | None
    break_even: BreakEven
    break_even_vs_unfiltered: BreakEven | None
    scoring_cost_per_token: str
    affordable_scoring_overhead_per_token: str | None
    affordable_scoring_overhead_total: str | None
    assumptions: list[str]
    verdict: Verdict | None = None  # with experiments: cost per point and scale-up


# --------------------------------------------------------------------------------------
# Inputs: the request read into exact numbers and checked beyond its schema
# --------------------------------------------------------------------------------------


@dataclass
class _Inputs:
    corpus: Decimal  # corpus tokens
    scoring_rate: Decimal  # currency / corpus token
    scoring_note: str  # how the scoring rate was found, for the assumptions
    keep: Decimal  # flat_keep_share
    shares: list[Decimal]  # upsampling curve
    repeats: list[Decimal]
    limit: Decimal | None  # max_token_repetitions
    train_rate: Decimal  # currency / training token
    needed: dict[str, tuple[int, str]]  # strategy -> (tokens needed, source)


def _read_inputs(req: DataStrategyIn) -> _Inputs:
    """The request's numbers; raises `AnalysisError` for what the schema cannot express."""
    corpus = Decimal(req.corpus_tokens)
    scoring_rate, scoring_note = scoring_rate_of(
        req.scoring_cost_per_token, req.scoring_sku, req.currency
    )
    keep = Decimal(req.flat_keep_share)
    if keep == 0:
        raise AnalysisError("$.flat_keep_share", "must be greater than 0")
    shares = [Decimal(b.share) for b in req.upsampling_curve]
    repeats = [Decimal(b.repeats) for b in req.upsampling_curve]
    if sum(shares) != 1:
        raise AnalysisError("$.upsampling_curve", f"bucket shares must sum to 1, not {sum(shares)}")
    if max(repeats) == 0:
        raise AnalysisError("$.upsampling_curve", "at least one bucket needs repeats > 0")
    limit = None if req.max_token_repetitions is None else Decimal(req.max_token_repetitions)
    if limit is not None and limit == 0:
        raise AnalysisError("$.max_token_repetitions", "must be greater than 0")
    if req.training_cost_per_token is None:
        reason = "required: give it, or pilot_experiments with the project"
        raise AnalysisError("$.training_cost_per_token", reason)
    train_rate = Decimal(req.training_cost_per_token)
    explicit = {
        "flat": req.flat_tokens_needed,
        "upsampled": req.upsampled_tokens_needed,
        "unfiltered": req.unfiltered_tokens_needed,
    }
    needed = tokens_needed(explicit, req.pilot_results, req.target_score, req.pilot_token_scale)
    return _Inputs(
        corpus=corpus,
        scoring_rate=scoring_rate,
        scoring_note=scoring_note,
        keep=keep,
        shares=shares,
        repeats=repeats,
        limit=limit,
        train_rate=train_rate,
        needed=needed,
    )


# --------------------------------------------------------------------------------------
# Computation: price each strategy, recommend, break even
# --------------------------------------------------------------------------------------


@dataclass
class _Priced:
    name: str
    total: Decimal
    training: Decimal
    feasible: bool
    view: DataStrategyOption


def _repetitions(
    name: str, t: Decimal, inp: _Inputs, pass_tokens: Decimal
) -> tuple[Decimal, str, list[Line]]:
    """How often a strategy shows its most-repeated token: (times, formula, working lines)."""
    if name == "flat":
        kept = inp.keep * inp.corpus
        reps = t / kept
        lines = [
            Line(
                item="kept_tokens",
                value=number_text(kept, 3),
                unit="tokens",
                formula="corpus_tokens × flat_keep_share",
            )
        ]
        return reps, "training_tokens / kept_tokens", lines
    if name == "upsampled":
        passes = t / pass_tokens
        reps = passes * max(inp.repeats)
        lines = [
            Line(
                item="tokens_per_pass",
                value=number_text(pass_tokens, 3),
                unit="tokens",
                formula="corpus_tokens × Σ(share × repeats)",
            ),
            Line(
                item="passes",
                value=number_text(passes),
                unit="passes over the upsampled mixture",
                formula="training_tokens / tokens_per_pass",
            ),
        ]
        return reps, "passes × max(repeats)", lines
    return t / inp.corpus, "training_tokens / corpus_tokens", []


def _price_strategy(
    name: str, req: DataStrategyIn, inp: _Inputs, scoring_total: Decimal, pass_tokens: Decimal
) -> _Priced:
    cur = req.currency
    tokens, source = inp.needed[name]
    t = Decimal(tokens)
    training = t * inp.train_rate
    scoring = _ZERO if name == "unfiltered" else scoring_total
    lines = [
        Line(
            item="scoring",
            value=money_text(scoring),
            unit=cur,
            formula="no scoring"
            if name == "unfiltered"
            else f"corpus_tokens × scoring_cost_per_token = {req.corpus_tokens} × "
            f"{rate_text(inp.scoring_rate)}",
        ),
        Line(
            item="training",
            value=money_text(training),
            unit=cur,
            formula=f"training_tokens × training_cost_per_token = {tokens} × "
            f"{rate_text(inp.train_rate)}",
        ),
    ]
    reps, rep_formula, rep_lines = _repetitions(name, t, inp, pass_tokens)
    lines.extend(rep_lines)
    lines.append(
        Line(
            item="max_token_repetitions", value=number_text(reps), unit="times", formula=rep_formula
        )
    )
    ok = inp.limit is None or reps <= inp.limit
    notes = []
    if not ok:
        notes.append(
            f"infeasible: a token would be seen {number_text(reps)} times, more than "
            f"max_token_repetitions {req.max_token_repetitions}"
        )
    total = scoring + training
    view = DataStrategyOption(
        name=name,
        currency=cur,
        total_cost=money_text(total),
        scoring_cost=money_text(scoring),
        training_cost=money_text(training),
        training_tokens=tokens,
        tokens_needed_source=source,
        max_token_repetitions=number_text(reps),
        feasible=ok,
        breakdown=lines,
        notes=notes,
    )
    return _Priced(name=name, total=total, training=training, feasible=ok, view=view)


def _recommend(
    priced: list[_Priced], req: DataStrategyIn
) -> tuple[list[_Priced], _Priced, Savings | None]:
    """(the feasible options, the cheapest of them, its savings over the runner-up)."""
    feasible = [p for p in priced if p.feasible]
    if not feasible:
        detail = ", ".join(f"{p.name} {p.view.max_token_repetitions}" for p in priced)
        raise AnalysisError(
            "$.max_token_repetitions",
            f"no strategy stays within {req.max_token_repetitions} repetitions ({detail})",
        )
    best = min(feasible, key=lambda p: p.total)  # min keeps the first of equals: flat first
    others = [p for p in feasible if p is not best]
    savings = None
    if others:
        runner_up = min(others, key=lambda p: p.total)
        savings = savings_versus(
            best.name,
            best.total,
            runner_up.name,
            runner_up.total,
            req.currency,
            "total cost of the cheapest other feasible option − total cost of the recommended one",
        )
    return feasible, best, savings


def _scoring_break_even(
    priced: list[_Priced], better: _Priced | None, inp: _Inputs, cur: str
) -> tuple[BreakEven, Decimal | None, Decimal | None]:
    """The scoring rate at which the two scored strategies cost the same, and the scoring
    overhead (per token, in total) the better one can afford."""
    other = (
        next((p for p in priced if p.name not in ("unfiltered", better.name)), None)
        if better
        else None
    )
    definition = (
        "scoring cost per token at which the better scored strategy costs as much as the other "
        "scored strategy, the other's scoring held at the input rate: scoring_cost_per_token + "
        "(total_other − total_better) / corpus_tokens"
    )
    if better is None:
        note = "neither scored strategy is feasible"
        return _no_break_even(cur, definition, note), None, None
    if other is None or not other.feasible:
        note = (
            f"{'upsampled' if better.name == 'flat' else 'flat'} is infeasible: "
            f"{better.name} has no scored competitor"
        )
        return _no_break_even(cur, definition, note), None, None
    overhead_total = other.total - better.total
    per_token = overhead_total / inp.corpus
    break_even = BreakEven(
        quantity="scoring_cost_per_token",
        value=rate_text(inp.scoring_rate + per_token),
        unit=f"{cur}/token",
        definition=definition,
        note=f"{better.name} is cheaper than {other.name} by {money_text(overhead_total)} {cur}: "
        f"it can afford {rate_text(per_token)} {cur}/token more scoring "
        f"({money_text(overhead_total)} {cur} over the corpus) before it stops being cheaper",
    )
    return break_even, per_token, overhead_total


def _no_break_even(cur: str, definition: str, note: str) -> BreakEven:
    return BreakEven(
        quantity="scoring_cost_per_token",
        value=None,
        unit=f"{cur}/token",
        definition=definition,
        note=note,
    )


def _unfiltered_break_even(
    priced: list[_Priced], better: _Priced | None, inp: _Inputs, cur: str
) -> BreakEven | None:
    """The scoring rate at which the better scored strategy costs as much as not scoring."""
    unfiltered = next((p for p in priced if p.name == "unfiltered"), None)
    if unfiltered is None or better is None:
        return None
    value = (unfiltered.training - better.training) / inp.corpus
    definition = (
        f"scoring cost per token at which {better.name} (the better scored strategy) costs as "
        "much as training on the unfiltered corpus: (training_unfiltered − training_"
        f"{better.name}) / corpus_tokens"
    )
    if value < 0:
        note = (
            f"scoring never pays: training {better.name} alone costs more than training unfiltered"
        )
        return _no_break_even(cur, definition, note)
    cheaper = "cheaper" if inp.scoring_rate < value else "not cheaper"
    cheaper = f"{better.name} is {cheaper} than training unfiltered"
    return BreakEven(
        quantity="scoring_cost_per_token",
        value=rate_text(value),
        unit=f"{cur}/token",
        definition=definition,
        note=f"at the input rate {rate_text(inp.scoring_rate)} {cur}/token {cheaper}",
    )


def _assumptions(req: DataStrategyIn, inp: _Inputs) -> list[str]:
    cur = req.currency
    assumptions = [
        "Money: exact decimal arithmetic (50 significant digits); amounts rounded half-even to "
        f"0.01 {cur}, per-token rates to 15 decimals.",
        inp.scoring_note + ".",
        "Both scored strategies score every corpus token once: scoring cost = corpus_tokens × "
        "scoring_cost_per_token (currency).",
        "Training cost = training tokens × training_cost_per_token (currency); the training tokens "
        "are the tokens a strategy needs to reach the target quality.",
        "Total cost of a strategy = scoring cost + training cost.",
        "Flat filter keeps corpus_tokens × flat_keep_share tokens; a token is seen "
        "training_tokens / kept_tokens times.",
        "Quality-aware upsampling: one pass over the upsampled mixture is corpus_tokens × "
        "Σ(share × repeats) tokens; the most-repeated token is seen passes × max(repeats) times.",
        "The unfiltered baseline (when given) trains on the raw corpus with no scoring.",
        "Recommended: the cheapest feasible option; ties go to flat, then upsampled, then "
        "unfiltered.",
    ]
    if req.pilot_results:
        assumptions.append(
            "Tokens needed from pilot runs: runs of a strategy sorted by tokens; at the first run "
            "whose score reaches target_score, tokens are interpolated linearly between it and the "
            "previous run (the first run's tokens if it is the first); never extrapolated; "
            "multiplied by pilot_token_scale and rounded up to a whole token."
        )
    if inp.limit is not None:
        assumptions.append(
            f"Feasible: no token seen more than max_token_repetitions = {req.max_token_repetitions}"
            " times."
        )
    return assumptions


@exact
def analyse_data_strategy(req: DataStrategyIn) -> DataStrategyOut:
    """Compare flat quality filtering with quality-aware upsampling (and optionally no scoring)."""
    req = revalidate(req)
    cur = req.currency
    refuse_scale_tokens(req.scale_tokens)
    inp = _read_inputs(req)
    scoring_total = inp.corpus * inp.scoring_rate
    pass_tokens = inp.corpus * sum(
        (s * r for s, r in zip(inp.shares, inp.repeats, strict=True)), _ZERO
    )
    priced = [
        _price_strategy(name, req, inp, scoring_total, pass_tokens)
        for name in STRATEGIES
        if name in inp.needed
    ]
    feasible, best, savings = _recommend(priced, req)
    scored = [p for p in feasible if p.name != "unfiltered"]
    better = min(scored, key=lambda p: p.total) if scored else None
    break_even, per_token, overhead_total = _scoring_break_even(priced, better, inp, cur)
    return DataStrategyOut(
        analysis="data-strategy",
        currency=cur,
        options=[p.view for p in priced],
        recommended=best.name,
        savings=savings,
        break_even=break_even,
        break_even_vs_unfiltered=_unfiltered_break_even(priced, better, inp, cur),
        scoring_cost_per_token=rate_text(inp.scoring_rate),
        affordable_scoring_overhead_per_token=None if per_token is None else rate_text(per_token),
        affordable_scoring_overhead_total=None
        if overhead_total is None
        else money_text(overhead_total),
        assumptions=_assumptions(req, inp),
    )
