"""Design-decision analyses: pure cost computations, no I/O.

Each analysis has a request Struct (`...In`), a response Struct (`...Out`) and a
pure function `analyse_<name>(req) -> ...Out`:

- `data-strategy`: flat quality filtering vs quality-aware upsampling.
- `domain-mix`: mid-training domain mixes, expected cost with rework risk and the
  cost/score Pareto front.
- `checkpoint-interval`: the checkpoint interval minimising checkpoint cost plus
  expected rework (Young 1974, Daly 2006), with the cost curve around it.
- `storage-lifecycle`: storage cost with and without tiering and retention rules,
  and the restore-time trade-off.

Every response lists the compared `options` (name, totals, breakdown lines), the
`recommended` option, the `savings`, a `break_even` with its definition, and the
`assumptions` (formulas and units). Money is computed with `decimal.Decimal` at 50
significant digits and returned as decimal strings: amounts rounded half-even to
0.01 of the request currency, per-unit rates (per token) to 15 decimal places.
Floats are used in one place only: the normal CDF for a derived rework
probability in `domain-mix` (rounded to 6 decimals before it touches money).

Errors a schema cannot express raise `AnalysisError` with the offending JSON path.
"""

from __future__ import annotations

import decimal
import functools
import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

import msgspec

from ..events.model import SAFE_TEXT_PATTERN

__all__ = [
    "ANALYSES",
    "AnalysisError",
    "BreakEven",
    "CheckpointIntervalIn",
    "CheckpointIntervalOut",
    "CheckpointOption",
    "CostCurvePoint",
    "DataClassIn",
    "DataStrategyIn",
    "DataStrategyOption",
    "DataStrategyOut",
    "DomainMixIn",
    "DomainMixOption",
    "DomainMixOut",
    "Line",
    "MixIn",
    "MonthRow",
    "PilotPoint",
    "RestoreItem",
    "Savings",
    "ScoringSku",
    "StorageLifecycleIn",
    "StorageLifecycleOut",
    "StorageOption",
    "TierIn",
    "TierPrices",
    "UpsampleBucket",
    "analyse_checkpoint_interval",
    "analyse_data_strategy",
    "analyse_domain_mix",
    "analyse_storage_lifecycle",
    "checkpoint_total_cost",
]

# --------------------------------------------------------------------------------------
# Arithmetic context, formatting and errors
# --------------------------------------------------------------------------------------

PRECISION = 50
MONEY_PLACES = 2
RATE_PLACES = 15
HOURS_PLACES = 6
HOURS_PER_MONTH = Decimal(730)
DAYS_PER_MONTH = 30
PROBABILITY_PLACES = 6

_CONTEXT = decimal.Context(
    prec=PRECISION,
    rounding=ROUND_HALF_EVEN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)
_ZERO = Decimal(0)
_ONE = Decimal(1)
_HUNDRED = Decimal(100)

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound=msgspec.Struct)


class AnalysisError(ValueError):
    """A request the schema accepts but the analysis cannot; `field` is the JSON path."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _exact(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run `fn` in the module's decimal context (50 digits, half-even, traps on)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with decimal.localcontext(_CONTEXT):
            return fn(*args, **kwargs)

    return wrapper


_PATH_RE = re.compile(r"at `(\$[^`]*)`")


def _revalidate(req: _S) -> _S:
    """Re-check a request against its schema (a Struct built in Python skips validation)."""
    try:
        return msgspec.convert(msgspec.to_builtins(req), type(req))
    except msgspec.ValidationError as exc:
        found = _PATH_RE.search(str(exc))
        raise AnalysisError(found.group(1) if found else "$", str(exc)) from exc


def _quantize(x: Decimal, places: int) -> Decimal:
    q = x.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
    return q.copy_abs() if q == 0 else q


def _money(x: Decimal) -> str:
    """An amount of money: rounded half-even to 0.01, always two decimals."""
    return f"{_quantize(x, MONEY_PLACES):f}"


def _num(x: Decimal, places: int = HOURS_PLACES) -> str:
    """A quantity rounded half-even to `places` decimals, trailing zeros dropped."""
    text = f"{_quantize(x, places):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _rate(x: Decimal) -> str:
    """A per-unit price (e.g. per token): rounded half-even to 15 decimals."""
    return _num(x, RATE_PLACES)


def _percent(part: Decimal, whole: Decimal) -> str | None:
    return None if whole == 0 else f"{_quantize(part / whole * _HUNDRED, 2):f}"


# --------------------------------------------------------------------------------------
# Shared schema pieces
# --------------------------------------------------------------------------------------

CURRENCY_PATTERN = r"^[A-Z]{3}$(?!\n)"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$(?!\n)"
SKU_PATTERN = r"^[a-z0-9][a-z0-9_.\-]{0,127}$(?!\n)"
DECIMAL_PATTERN = r"^[0-9]{1,24}(\.[0-9]{1,24})?$(?!\n)"
SIGNED_DECIMAL_PATTERN = r"^-?[0-9]{1,24}(\.[0-9]{1,24})?$(?!\n)"
PROBABILITY_PATTERN = r"^(0(\.[0-9]{1,24})?|1(\.0{1,24})?)$(?!\n)"

Currency = Annotated[
    str,
    msgspec.Meta(
        pattern=CURRENCY_PATTERN,
        description="ISO 4217 code of every money amount in request and answer",
        examples=["USD"],
    ),
]
DecimalString = Annotated[
    str,
    msgspec.Meta(pattern=DECIMAL_PATTERN, description="non-negative decimal as a string"),
]
SignedDecimalString = Annotated[
    str,
    msgspec.Meta(pattern=SIGNED_DECIMAL_PATTERN, description="decimal as a string"),
]
ProbabilityString = Annotated[
    str,
    msgspec.Meta(pattern=PROBABILITY_PATTERN, description="decimal between 0 and 1 as a string"),
]
Name = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN)]


class Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of a breakdown: a named quantity, its value, its unit and how it was computed."""

    item: str
    value: str
    unit: str
    formula: str = ""


class Savings(msgspec.Struct, kw_only=True):
    """How much cheaper the recommended option is than `versus` (negative: dearer)."""

    amount: str
    currency: str
    percent: str | None
    versus: str
    definition: str


class BreakEven(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The value of `quantity` at which the compared costs meet (or the optimum); null if none."""

    quantity: str
    value: str | None
    unit: str
    definition: str
    note: str = ""


def _savings(
    recommended: str,
    recommended_total: Decimal,
    versus: str,
    versus_total: Decimal,
    currency: str,
    definition: str,
) -> Savings:
    diff = versus_total - recommended_total
    return Savings(
        amount=_money(diff),
        currency=currency,
        percent=_percent(diff, versus_total),
        versus=versus,
        definition=definition,
    )


# --------------------------------------------------------------------------------------
# data-strategy
# --------------------------------------------------------------------------------------

Strategy = Literal["flat", "upsampled", "unfiltered"]
_STRATEGIES: tuple[str, ...] = ("flat", "upsampled", "unfiltered")

TokenCount = Annotated[int, msgspec.Meta(ge=1, le=10**18)]


class ScoringSku(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A priced resource used for quality scoring, with its scoring throughput."""

    code: Annotated[str, msgspec.Meta(pattern=SKU_PATTERN, examples=["gpu.h100.hour"])]
    unit: Annotated[
        str,
        msgspec.Meta(min_length=1, max_length=32, examples=["hour"], description="SKU unit"),
    ]
    unit_price: Annotated[
        DecimalString, msgspec.Meta(description="price of one SKU unit (currency/unit)")
    ]
    tokens_per_unit: Annotated[
        DecimalString,
        msgspec.Meta(description="tokens scored per SKU unit (tokens/unit), > 0"),
    ]


class UpsampleBucket(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One quality bucket of the upsampling curve."""

    share: Annotated[
        ProbabilityString,
        msgspec.Meta(description="fraction of corpus tokens in this quality bucket (0..1)"),
    ]
    repeats: Annotated[
        DecimalString,
        msgspec.Meta(
            description="times each token of the bucket appears in one pass of the "
            "upsampled mixture (0 drops the bucket)"
        ),
    ]
    label: Annotated[str, msgspec.Meta(max_length=64, pattern=SAFE_TEXT_PATTERN)] | None = None


class PilotPoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One measured pilot run: strategy, training tokens of the pilot, quality reached."""

    strategy: Strategy
    tokens: Annotated[TokenCount, msgspec.Meta(description="training tokens of the pilot run")]
    score: Annotated[
        SignedDecimalString, msgspec.Meta(description="quality score reached (score units)")
    ]


class DataStrategyIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /v1/analysis/data-strategy`."""

    corpus_tokens: Annotated[
        TokenCount, msgspec.Meta(description="tokens in the raw corpus before filtering (tokens)")
    ]
    flat_keep_share: Annotated[
        ProbabilityString,
        msgspec.Meta(
            description="fraction of corpus tokens the flat quality threshold keeps (0..1]"
        ),
    ]
    upsampling_curve: Annotated[
        list[UpsampleBucket],
        msgspec.Meta(
            min_length=1,
            max_length=100,
            description="quality buckets with their repeat factors; shares sum to 1",
        ),
    ]
    training_cost_per_token: Annotated[
        DecimalString, msgspec.Meta(description="training cost per token (currency/token)")
    ]
    currency: Currency = "USD"
    scoring_cost_per_token: (
        Annotated[
            DecimalString,
            msgspec.Meta(description="quality-scoring cost per corpus token (currency/token)"),
        ]
        | None
    ) = None
    scoring_sku: (
        Annotated[ScoringSku, msgspec.Meta(description="alternative to scoring_cost_per_token")]
        | None
    ) = None
    flat_tokens_needed: (
        Annotated[
            TokenCount,
            msgspec.Meta(
                description="training tokens the flat filter needs to reach target quality"
            ),
        ]
        | None
    ) = None
    upsampled_tokens_needed: (
        Annotated[
            TokenCount,
            msgspec.Meta(description="training tokens upsampling needs to reach target quality"),
        ]
        | None
    ) = None
    unfiltered_tokens_needed: (
        Annotated[
            TokenCount,
            msgspec.Meta(
                description="optional baseline: training tokens on the raw, unscored corpus"
            ),
        ]
        | None
    ) = None
    pilot_results: Annotated[
        list[PilotPoint],
        msgspec.Meta(
            max_length=1000,
            description="measured pilot runs; used for a strategy whose tokens_needed is absent",
        ),
    ] = []
    target_score: (
        Annotated[
            SignedDecimalString,
            msgspec.Meta(description="quality to reach, on the pilot score scale (score units)"),
        ]
        | None
    ) = None
    pilot_token_scale: Annotated[
        DecimalString,
        msgspec.Meta(description="full-run tokens per pilot token (dimensionless), > 0"),
    ] = "1"
    max_token_repetitions: (
        Annotated[
            DecimalString,
            msgspec.Meta(
                description="most times any token may be seen in training (times); "
                "strategies needing more are infeasible"
            ),
        ]
        | None
    ) = None


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
    """Answer of `POST /v1/analysis/data-strategy`; rates in currency/token."""

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


def _scoring_rate(req: DataStrategyIn) -> tuple[Decimal, str]:
    if (req.scoring_cost_per_token is None) == (req.scoring_sku is None):
        raise AnalysisError(
            "$.scoring_cost_per_token", "give exactly one of scoring_cost_per_token and scoring_sku"
        )
    if req.scoring_sku is not None:
        sku = req.scoring_sku
        per_unit = Decimal(sku.tokens_per_unit)
        if per_unit == 0:
            raise AnalysisError("$.scoring_sku.tokens_per_unit", "must be greater than 0")
        rate = Decimal(sku.unit_price) / per_unit
        return rate, (
            f"scoring_cost_per_token = SKU {sku.code} unit_price / tokens_per_unit = "
            f"{sku.unit_price} {req.currency}/{sku.unit} / {sku.tokens_per_unit} tokens/{sku.unit}"
            f" = {_rate(rate)} {req.currency}/token"
        )
    assert req.scoring_cost_per_token is not None
    rate = Decimal(req.scoring_cost_per_token)
    return rate, f"scoring_cost_per_token = {_rate(rate)} {req.currency}/token (given)"


def _interpolate_tokens(
    strategy: str, points: list[tuple[int, PilotPoint]], target: Decimal
) -> Decimal:
    ordered = sorted(points, key=lambda ip: ip[1].tokens)
    for (i, a), (_, b) in itertools.pairwise(ordered):
        if a.tokens == b.tokens:
            raise AnalysisError(
                f"$.pilot_results[{i}].tokens",
                f"two {strategy} pilot runs at {a.tokens} tokens; give one score per token count",
            )
    previous: PilotPoint | None = None
    for _, point in ordered:
        score = Decimal(point.score)
        if score >= target:
            if previous is None:
                return Decimal(point.tokens)
            t0, s0 = Decimal(previous.tokens), Decimal(previous.score)
            return t0 + (target - s0) * (Decimal(point.tokens) - t0) / (score - s0)
        previous = point
    best = max(Decimal(p.score) for _, p in ordered)
    raise AnalysisError(
        "$.pilot_results",
        f"no {strategy} pilot run reached target_score {target} (best {best}); "
        "tokens needed are not extrapolated",
    )


def _tokens_needed(req: DataStrategyIn) -> dict[str, tuple[int, str]]:
    if req.pilot_results and req.target_score is None:
        raise AnalysisError("$.target_score", "required with pilot_results")
    if req.target_score is not None and not req.pilot_results:
        raise AnalysisError("$.target_score", "given without pilot_results")
    scale = Decimal(req.pilot_token_scale)
    if scale == 0:
        raise AnalysisError("$.pilot_token_scale", "must be greater than 0")
    by_strategy: dict[str, list[tuple[int, PilotPoint]]] = {}
    for i, point in enumerate(req.pilot_results):
        by_strategy.setdefault(point.strategy, []).append((i, point))
    explicit = {
        "flat": req.flat_tokens_needed,
        "upsampled": req.upsampled_tokens_needed,
        "unfiltered": req.unfiltered_tokens_needed,
    }
    out: dict[str, tuple[int, str]] = {}
    for strategy in _STRATEGIES:
        given = explicit[strategy]
        points = by_strategy.get(strategy, [])
        if given is not None and points:
            raise AnalysisError(
                f"$.{strategy}_tokens_needed",
                f"given both here and as {strategy} pilot_results; give one",
            )
        if given is not None:
            out[strategy] = (given, "given")
        elif points:
            assert req.target_score is not None
            pilot = _interpolate_tokens(strategy, points, Decimal(req.target_score))
            full = (pilot * scale).to_integral_value(rounding=ROUND_CEILING)
            out[strategy] = (
                int(full),
                f"interpolated from {len(points)} pilot run(s): {_num(pilot, 3)} pilot tokens "
                f"× pilot_token_scale {req.pilot_token_scale}, rounded up",
            )
        elif strategy != "unfiltered":
            raise AnalysisError(
                f"$.{strategy}_tokens_needed",
                f"required: give it or {strategy} pilot_results with target_score",
            )
    return out


@dataclass
class _Priced:
    name: str
    total: Decimal
    training: Decimal
    feasible: bool
    view: DataStrategyOption


@_exact
def analyse_data_strategy(req: DataStrategyIn) -> DataStrategyOut:
    """Compare flat quality filtering with quality-aware upsampling (and optionally no scoring)."""
    req = _revalidate(req)
    cur = req.currency
    corpus = Decimal(req.corpus_tokens)
    scoring_rate, scoring_note = _scoring_rate(req)
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
    train_rate = Decimal(req.training_cost_per_token)
    needed = _tokens_needed(req)

    scoring_total = corpus * scoring_rate
    pass_tokens = corpus * sum((s * r for s, r in zip(shares, repeats, strict=True)), _ZERO)
    priced: list[_Priced] = []
    for name in _STRATEGIES:
        if name not in needed:
            continue
        tokens, source = needed[name]
        t = Decimal(tokens)
        training = t * train_rate
        scoring = _ZERO if name == "unfiltered" else scoring_total
        lines = [
            Line(
                item="scoring",
                value=_money(scoring),
                unit=cur,
                formula="no scoring"
                if name == "unfiltered"
                else f"corpus_tokens × scoring_cost_per_token = {req.corpus_tokens} × "
                f"{_rate(scoring_rate)}",
            ),
            Line(
                item="training",
                value=_money(training),
                unit=cur,
                formula=f"training_tokens × training_cost_per_token = {tokens} × "
                f"{_rate(train_rate)}",
            ),
        ]
        if name == "flat":
            kept = keep * corpus
            reps = t / kept
            lines.append(
                Line(
                    item="kept_tokens",
                    value=_num(kept, 3),
                    unit="tokens",
                    formula="corpus_tokens × flat_keep_share",
                )
            )
            rep_formula = "training_tokens / kept_tokens"
        elif name == "upsampled":
            passes = t / pass_tokens
            reps = passes * max(repeats)
            lines.append(
                Line(
                    item="tokens_per_pass",
                    value=_num(pass_tokens, 3),
                    unit="tokens",
                    formula="corpus_tokens × Σ(share × repeats)",
                )
            )
            lines.append(
                Line(
                    item="passes",
                    value=_num(passes),
                    unit="passes over the upsampled mixture",
                    formula="training_tokens / tokens_per_pass",
                )
            )
            rep_formula = "passes × max(repeats)"
        else:
            reps = t / corpus
            rep_formula = "training_tokens / corpus_tokens"
        lines.append(
            Line(item="max_token_repetitions", value=_num(reps), unit="times", formula=rep_formula)
        )
        ok = limit is None or reps <= limit
        notes = []
        if not ok:
            notes.append(
                f"infeasible: a token would be seen {_num(reps)} times, more than "
                f"max_token_repetitions {req.max_token_repetitions}"
            )
        total = scoring + training
        priced.append(
            _Priced(
                name=name,
                total=total,
                training=training,
                feasible=ok,
                view=DataStrategyOption(
                    name=name,
                    currency=cur,
                    total_cost=_money(total),
                    scoring_cost=_money(scoring),
                    training_cost=_money(training),
                    training_tokens=tokens,
                    tokens_needed_source=source,
                    max_token_repetitions=_num(reps),
                    feasible=ok,
                    breakdown=lines,
                    notes=notes,
                ),
            )
        )

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
        savings = _savings(
            best.name,
            best.total,
            runner_up.name,
            runner_up.total,
            cur,
            "total cost of the cheapest other feasible option − total cost of the recommended one",
        )

    scored = [p for p in feasible if p.name != "unfiltered"]
    better = min(scored, key=lambda p: p.total) if scored else None
    other = (
        next((p for p in priced if p.name not in ("unfiltered", better.name)), None)
        if better
        else None
    )
    per_token: Decimal | None = None
    overhead_total: Decimal | None = None
    definition = (
        "scoring cost per token at which the better scored strategy costs as much as the other "
        "scored strategy, the other's scoring held at the input rate: scoring_cost_per_token + "
        "(total_other − total_better) / corpus_tokens"
    )
    if better is None:
        break_even = BreakEven(
            quantity="scoring_cost_per_token",
            value=None,
            unit=f"{cur}/token",
            definition=definition,
            note="neither scored strategy is feasible",
        )
    elif other is None or not other.feasible:
        break_even = BreakEven(
            quantity="scoring_cost_per_token",
            value=None,
            unit=f"{cur}/token",
            definition=definition,
            note=f"{'upsampled' if better.name == 'flat' else 'flat'} is infeasible: "
            f"{better.name} has no scored competitor",
        )
    else:
        overhead_total = other.total - better.total
        per_token = overhead_total / corpus
        break_even = BreakEven(
            quantity="scoring_cost_per_token",
            value=_rate(scoring_rate + per_token),
            unit=f"{cur}/token",
            definition=definition,
            note=f"{better.name} is cheaper than {other.name} by {_money(overhead_total)} {cur}: "
            f"it can afford {_rate(per_token)} {cur}/token more scoring "
            f"({_money(overhead_total)} {cur} over the corpus) before it stops being cheaper",
        )

    unfiltered = next((p for p in priced if p.name == "unfiltered"), None)
    vs_unfiltered: BreakEven | None = None
    if unfiltered is not None and better is not None:
        value = (unfiltered.training - better.training) / corpus
        definition_u = (
            f"scoring cost per token at which {better.name} (the better scored strategy) costs as "
            "much as training on the unfiltered corpus: (training_unfiltered − training_"
            f"{better.name}) / corpus_tokens"
        )
        if value < 0:
            vs_unfiltered = BreakEven(
                quantity="scoring_cost_per_token",
                value=None,
                unit=f"{cur}/token",
                definition=definition_u,
                note=f"scoring never pays: training {better.name} alone costs more than "
                "training unfiltered",
            )
        else:
            cheaper = "cheaper" if scoring_rate < value else "not cheaper"
            cheaper = f"{better.name} is {cheaper} than training unfiltered"
            vs_unfiltered = BreakEven(
                quantity="scoring_cost_per_token",
                value=_rate(value),
                unit=f"{cur}/token",
                definition=definition_u,
                note=f"at the input rate {_rate(scoring_rate)} {cur}/token {cheaper}",
            )

    assumptions = [
        "Money: exact decimal arithmetic (50 significant digits); amounts rounded half-even to "
        f"0.01 {cur}, per-token rates to 15 decimals.",
        scoring_note + ".",
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
    if limit is not None:
        assumptions.append(
            f"Feasible: no token seen more than max_token_repetitions = {req.max_token_repetitions}"
            " times."
        )

    return DataStrategyOut(
        analysis="data-strategy",
        currency=cur,
        options=[p.view for p in priced],
        recommended=best.name,
        savings=savings,
        break_even=break_even,
        break_even_vs_unfiltered=vs_unfiltered,
        scoring_cost_per_token=_rate(scoring_rate),
        affordable_scoring_overhead_per_token=None if per_token is None else _rate(per_token),
        affordable_scoring_overhead_total=None
        if overhead_total is None
        else _money(overhead_total),
        assumptions=assumptions,
    )


# --------------------------------------------------------------------------------------
# domain-mix
# --------------------------------------------------------------------------------------

DomainName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,31}$(?!\n)")]
MoneyString = Annotated[DecimalString, msgspec.Meta(description="money (currency)")]


class MixIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One candidate mid-training mix with its pilot scores."""

    name: Name
    scores: Annotated[
        dict[DomainName, SignedDecimalString],
        msgspec.Meta(
            min_length=1,
            max_length=32,
            description="pilot score per domain (score units); every mix names the same domains",
        ),
    ]
    runs: Annotated[
        int, msgspec.Meta(ge=1, le=10_000, description="training runs the mix needs (runs)")
    ] = 1
    cost_per_run: (
        Annotated[DecimalString, msgspec.Meta(description="override of cost_per_run (currency)")]
        | None
    ) = None
    rework_probability: (
        Annotated[
            ProbabilityString,
            msgspec.Meta(description="P(general score < floor) if known; derived otherwise"),
        ]
        | None
    ) = None
    proportions: (
        Annotated[
            dict[DomainName, ProbabilityString],
            msgspec.Meta(description="share of training tokens per domain (informational)"),
        ]
        | None
    ) = None


class DomainMixIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /v1/analysis/domain-mix`."""

    mixes: Annotated[list[MixIn], msgspec.Meta(min_length=1, max_length=200)]
    cost_per_run: Annotated[DecimalString, msgspec.Meta(description="cost of one run (currency)")]
    rework_cost: Annotated[
        DecimalString,
        msgspec.Meta(
            description="cost of the rework if general ability ends below the floor (currency)"
        ),
    ]
    general_floor: Annotated[
        SignedDecimalString,
        msgspec.Meta(description="lowest acceptable general score (score units)"),
    ]
    currency: Currency = "USD"
    general_domains: Annotated[
        list[DomainName],
        msgspec.Meta(
            min_length=1,
            max_length=32,
            description="domains whose unweighted mean is the general score",
        ),
    ] = msgspec.field(default_factory=lambda: ["general_qa", "multiple_choice"])
    general_score_sd: Annotated[
        DecimalString,
        msgspec.Meta(
            description="standard deviation of the full-run general score around the pilot "
            "estimate (score units), used to derive rework probabilities"
        ),
    ] = "0"
    score_weights: (
        Annotated[
            dict[DomainName, DecimalString],
            msgspec.Meta(description="weight per domain for the weighted score; default equal"),
        ]
        | None
    ) = None
    pareto_on: Annotated[
        Literal["weighted_score", "per_domain"],
        msgspec.Meta(description="score axis of the Pareto front: weighted score or every domain"),
    ] = "weighted_score"
    budget: (
        Annotated[DecimalString, msgspec.Meta(description="max expected total cost (currency)")]
        | None
    ) = None
    min_weighted_score: (
        Annotated[
            SignedDecimalString,
            msgspec.Meta(description="if given, recommend the cheapest mix reaching this score"),
        ]
        | None
    ) = None
    baseline: (
        Annotated[
            Name, msgspec.Meta(description="mix that savings compare with; default the first")
        ]
        | None
    ) = None


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
    """Answer of `POST /v1/analysis/domain-mix`; `pareto_front` lists mixes by expected cost."""

    analysis: str
    currency: str
    options: list[DomainMixOption]
    recommended: str
    savings: Savings
    break_even: BreakEven
    pareto_front: list[str]
    score_weights: dict[str, str]
    assumptions: list[str]


def _normal_cdf(z: Decimal) -> Decimal:
    """Φ(z) via math.erfc, rounded half-even to 6 decimals."""
    value = 0.5 * math.erfc(-float(z) / math.sqrt(2.0))
    return _quantize(Decimal(repr(value)), PROBABILITY_PLACES)


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


@_exact
def analyse_domain_mix(req: DomainMixIn) -> DomainMixOut:
    """Expected cost (runs × cost + P(general < floor) × rework) and the cost/score Pareto front."""
    req = _revalidate(req)
    cur = req.currency
    domains = list(req.mixes[0].scores)
    names: set[str] = set()
    for i, mix in enumerate(req.mixes):
        if mix.name in names:
            raise AnalysisError(f"$.mixes[{i}].name", f"duplicate mix name {mix.name!r}")
        names.add(mix.name)
        if set(mix.scores) != set(domains):
            raise AnalysisError(
                f"$.mixes[{i}].scores",
                f"must name the same domains as the first mix: {sorted(domains)}",
            )
        if mix.proportions is not None and sum(Decimal(v) for v in mix.proportions.values()) != 1:
            raise AnalysisError(f"$.mixes[{i}].proportions", "shares must sum to 1")
    for j, domain in enumerate(req.general_domains):
        if domain not in domains:
            raise AnalysisError(f"$.general_domains[{j}]", f"{domain!r} has no pilot scores")
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
    weights = {d: w / weight_sum for d, w in raw_weights.items()}
    if req.baseline is not None and req.baseline not in names:
        raise AnalysisError("$.baseline", f"no mix named {req.baseline!r}")

    floor = Decimal(req.general_floor)
    sd = Decimal(req.general_score_sd)
    rework_cost = Decimal(req.rework_cost)
    mixes: list[_Mix] = []
    for i, mix in enumerate(req.mixes):
        scores = {d: Decimal(mix.scores[d]) for d in domains}
        general = sum((scores[d] for d in req.general_domains), _ZERO) / len(req.general_domains)
        weighted = sum((weights[d] * scores[d] for d in domains), _ZERO)
        if mix.rework_probability is not None:
            probability, source = Decimal(mix.rework_probability), "given"
        elif sd == 0:
            probability = _ONE if general < floor else _ZERO
            source = (
                "derived: general score below floor"
                if general < floor
                else ("derived: general score at or above floor")
            )
        else:
            probability = _normal_cdf((floor - general) / sd)
            source = "derived: Φ((floor − general) / sd)"
        cost_per_run = Decimal(
            mix.cost_per_run if mix.cost_per_run is not None else req.cost_per_run
        )
        run_cost = mix.runs * cost_per_run
        rework = probability * rework_cost
        mixes.append(
            _Mix(
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
        )

    per_domain = req.pareto_on == "per_domain"
    dominated_by = {
        m.name: [o.name for o in mixes if o is not m and _dominates(o, m, per_domain)]
        for m in mixes
    }
    on_front = {m.name: not dominated_by[m.name] for m in mixes}
    budget = None if req.budget is None else Decimal(req.budget)
    min_score = None if req.min_weighted_score is None else Decimal(req.min_weighted_score)

    def within(m: _Mix) -> bool:
        return budget is None or m.total <= budget

    def meets(m: _Mix) -> bool:
        return min_score is None or m.weighted >= min_score

    candidates = [m for m in mixes if within(m) and meets(m)]
    if not candidates:
        raise AnalysisError(
            "$.budget" if budget is not None else "$.min_weighted_score",
            "no mix is within the budget and reaches min_weighted_score",
        )
    if min_score is not None:
        best = min(candidates, key=lambda m: (m.total, -m.weighted, not on_front[m.name], m.index))
        rule = "the cheapest expected total among mixes reaching min_weighted_score"
    else:
        best = min(candidates, key=lambda m: (-m.weighted, m.total, not on_front[m.name], m.index))
        rule = "the highest weighted score"
    if budget is not None:
        rule += " within the budget"
    baseline = next(m for m in mixes if m.name == (req.baseline or mixes[0].name))
    savings = _savings(
        best.name,
        best.total,
        baseline.name,
        baseline.total,
        cur,
        "expected total of the baseline mix − expected total of the recommended mix "
        "(negative: the recommended mix costs more)",
    )
    be_definition = (
        "rework cost at which the recommended and the baseline mix have the same expected total: "
        "(run_cost_baseline − run_cost_recommended) / (P_recommended − P_baseline); above it the "
        "mix with the lower rework probability is cheaper"
    )
    if best is baseline:
        break_even = BreakEven(
            quantity="rework_cost",
            value=None,
            unit=cur,
            definition=be_definition,
            note="the recommended mix is the baseline",
        )
    elif best.probability == baseline.probability:
        break_even = BreakEven(
            quantity="rework_cost",
            value=None,
            unit=cur,
            definition=be_definition,
            note="equal rework probabilities: the difference is run cost only, at any rework cost",
        )
    else:
        value = (baseline.run_cost - best.run_cost) / (best.probability - baseline.probability)
        if value < 0:
            cheaper = best if best.total < baseline.total else baseline
            break_even = BreakEven(
                quantity="rework_cost",
                value=None,
                unit=cur,
                definition=be_definition,
                note=f"no non-negative rework cost equalises them: {cheaper.name} is cheaper at "
                "every rework cost",
            )
        else:
            break_even = BreakEven(
                quantity="rework_cost", value=_money(value), unit=cur, definition=be_definition
            )

    options = [
        DomainMixOption(
            name=m.name,
            currency=cur,
            expected_total_cost=_money(m.total),
            run_cost=_money(m.run_cost),
            expected_rework_cost=_money(m.rework),
            runs=req.mixes[m.index].runs,
            cost_per_run=_money(m.cost_per_run),
            rework_probability=_num(m.probability, 6),
            rework_probability_source=m.source,
            general_score=_num(m.general),
            weighted_score=_num(m.weighted),
            scores={d: _num(v) for d, v in m.scores.items()},
            on_pareto_front=on_front[m.name],
            dominated_by=dominated_by[m.name],
            within_budget=within(m),
            meets_min_score=meets(m),
            breakdown=[
                Line(
                    item="run_cost",
                    value=_money(m.run_cost),
                    unit=cur,
                    formula=f"runs × cost_per_run = {req.mixes[m.index].runs} × "
                    f"{_money(m.cost_per_run)}",
                ),
                Line(
                    item="expected_rework_cost",
                    value=_money(m.rework),
                    unit=cur,
                    formula=f"P(general < floor) × rework_cost = {_num(m.probability, 6)} × "
                    f"{_money(rework_cost)}",
                ),
                Line(
                    item="general_score",
                    value=_num(m.general),
                    unit="score",
                    formula=f"mean of {', '.join(req.general_domains)}",
                ),
                Line(
                    item="weighted_score",
                    value=_num(m.weighted),
                    unit="score",
                    formula="Σ weight × score, weights normalised to sum 1",
                ),
            ],
        )
        for m in mixes
    ]
    front = sorted((m for m in mixes if on_front[m.name]), key=lambda m: (m.total, -m.weighted))
    assumptions = [
        "Money: exact decimal arithmetic (50 significant digits), rounded half-even to "
        f"0.01 {cur}.",
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
    return DomainMixOut(
        analysis="domain-mix",
        currency=cur,
        options=options,
        recommended=best.name,
        savings=savings,
        break_even=break_even,
        pareto_front=[m.name for m in front],
        score_weights={d: _num(w, 6) for d, w in weights.items()},
        assumptions=assumptions,
    )


# --------------------------------------------------------------------------------------
# checkpoint-interval
# --------------------------------------------------------------------------------------

PositiveDecimalString = Annotated[
    DecimalString, msgspec.Meta(description="decimal greater than 0 as a string")
]


class CheckpointIntervalIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /v1/analysis/checkpoint-interval`."""

    accelerators: Annotated[
        int, msgspec.Meta(ge=1, le=10_000_000, description="accelerators in the job (count)")
    ]
    price_per_accelerator_hour: Annotated[
        DecimalString,
        msgspec.Meta(
            description="price of one accelerator for one hour (currency/accelerator-hour), > 0"
        ),
    ]
    checkpoint_write_seconds: Annotated[
        DecimalString,
        msgspec.Meta(description="time the job is stalled writing one checkpoint (seconds), > 0"),
    ]
    run_hours: Annotated[
        DecimalString, msgspec.Meta(description="wall-time of the run (hours), > 0")
    ]
    currency: Currency = "USD"
    job_mtbf_hours: (
        Annotated[
            DecimalString,
            msgspec.Meta(description="mean time between failures that stop the job (hours)"),
        ]
        | None
    ) = None
    accelerator_mtbf_hours: (
        Annotated[
            DecimalString,
            msgspec.Meta(
                description="mean time between failures of one accelerator (hours); job MTBF = "
                "this / accelerators"
            ),
        ]
        | None
    ) = None
    restart_seconds: Annotated[
        DecimalString,
        msgspec.Meta(description="time to detect a failure, restart and reload (seconds)"),
    ] = "0"
    checkpoint_size_gb: Annotated[
        DecimalString, msgspec.Meta(description="size of one checkpoint (GB)")
    ] = "0"
    retained_checkpoints: Annotated[
        int, msgspec.Meta(ge=1, le=1_000_000, description="checkpoints kept (the last K)")
    ] = 1
    storage_price_per_gb_month: Annotated[
        DecimalString, msgspec.Meta(description="checkpoint storage price (currency/GB-month)")
    ] = "0"
    write_cost_per_checkpoint: Annotated[
        DecimalString,
        msgspec.Meta(description="fees per checkpoint written, e.g. requests/transfer (currency)"),
    ] = "0"
    current_interval_hours: (
        Annotated[
            DecimalString,
            msgspec.Meta(description="interval in use today, for the savings (hours)"),
        ]
        | None
    ) = None


class CheckpointOption(msgspec.Struct, kw_only=True):
    """One interval: costs in `currency`, counts of checkpoints and failures over the run."""

    name: str
    interval_hours: str
    currency: str
    total_cost: str
    checkpoints_written: str
    expected_failures: str
    exceeds_run: bool
    breakdown: list[Line]


class CostCurvePoint(msgspec.Struct, kw_only=True):
    """Expected total at a multiple of the optimum interval, and its excess over the optimum."""

    multiple_of_optimum: str
    interval_hours: str
    currency: str
    total_cost: str
    extra_cost: str
    extra_percent: str | None
    exceeds_run: bool


class CheckpointIntervalOut(msgspec.Struct, kw_only=True):
    """Answer of `POST /v1/analysis/checkpoint-interval`."""

    analysis: str
    currency: str
    options: list[CheckpointOption]
    recommended: str
    savings: Savings
    break_even: BreakEven
    job_mtbf_hours: str
    young_interval_hours: str
    daly_interval_hours: str
    closed_form_interval_hours: str
    grid_optimum_interval_hours: str
    cost_curve: list[CostCurvePoint]
    warnings: list[str]
    assumptions: list[str]


@dataclass(frozen=True)
class _Ckpt:
    """The checkpoint cost model; all times in hours, money in currency."""

    run: Decimal  # T
    accelerators: Decimal  # N
    price: Decimal  # p, currency / accelerator-hour
    mtbf: Decimal  # M, job MTBF
    write: Decimal  # C
    restart: Decimal  # R
    fee: Decimal  # w, currency / checkpoint
    size: Decimal  # G, GB
    keep: Decimal  # K
    storage_price: Decimal  # q, currency / GB-month

    def parts(self, tau: Decimal) -> dict[str, Decimal]:
        n = self.run / tau
        failures = self.run / self.mtbf
        return {
            "checkpoints": n,
            "failures": failures,
            "stall": n * self.write * self.accelerators * self.price,
            "fees": n * self.fee,
            "rework": failures * (tau / 2 + self.restart) * self.accelerators * self.price,
            "storage": self.size
            * min(self.keep, n)
            * self.storage_price
            * self.run
            / HOURS_PER_MONTH,
        }

    def total(self, tau: Decimal) -> Decimal:
        p = self.parts(tau)
        return p["stall"] + p["fees"] + p["rework"] + p["storage"]


def _ckpt_model(req: CheckpointIntervalIn) -> _Ckpt:
    if (req.job_mtbf_hours is None) == (req.accelerator_mtbf_hours is None):
        raise AnalysisError(
            "$.job_mtbf_hours", "give exactly one of job_mtbf_hours and accelerator_mtbf_hours"
        )
    positive = {
        "price_per_accelerator_hour": req.price_per_accelerator_hour,
        "checkpoint_write_seconds": req.checkpoint_write_seconds,
        "run_hours": req.run_hours,
        "job_mtbf_hours": req.job_mtbf_hours,
        "accelerator_mtbf_hours": req.accelerator_mtbf_hours,
        "current_interval_hours": req.current_interval_hours,
    }
    for field, text in positive.items():
        if text is not None and Decimal(text) == 0:
            raise AnalysisError(f"$.{field}", "must be greater than 0")
    n = Decimal(req.accelerators)
    if req.job_mtbf_hours is not None:
        mtbf = Decimal(req.job_mtbf_hours)
    else:
        assert req.accelerator_mtbf_hours is not None
        mtbf = Decimal(req.accelerator_mtbf_hours) / n
    return _Ckpt(
        run=Decimal(req.run_hours),
        accelerators=n,
        price=Decimal(req.price_per_accelerator_hour),
        mtbf=mtbf,
        write=Decimal(req.checkpoint_write_seconds) / 3600,
        restart=Decimal(req.restart_seconds) / 3600,
        fee=Decimal(req.write_cost_per_checkpoint),
        size=Decimal(req.checkpoint_size_gb),
        keep=Decimal(req.retained_checkpoints),
        storage_price=Decimal(req.storage_price_per_gb_month),
    )


@_exact
def checkpoint_total_cost(req: CheckpointIntervalIn, interval_hours: Decimal | str) -> Decimal:
    """Expected total cost (currency, unrounded) of checkpointing every `interval_hours`."""
    tau = Decimal(interval_hours)
    if tau <= 0:
        raise AnalysisError("interval_hours", "must be greater than 0")
    return _ckpt_model(_revalidate(req)).total(tau)


def _young(write: Decimal, mtbf: Decimal) -> Decimal:
    return (2 * write * mtbf).sqrt()


def _daly(write: Decimal, mtbf: Decimal) -> Decimal:
    if write >= 2 * mtbf:
        return mtbf
    ratio = write / (2 * mtbf)
    return _young(write, mtbf) * (1 + ratio.sqrt() / 3 + ratio / 9) - write


def _exact_optimum(m: _Ckpt) -> tuple[Decimal, Decimal, Decimal]:
    """Minimum of the cost model on (0, T].

    Returns (closed form without storage, unclamped stationary point with the storage term
    sT/τ, optimum).

    f(τ) = a/τ + bτ + s·min(K, T/τ) + const with a = T(CNp + w), b = TNp/(2M),
    s = G·q·T/730. For τ ≤ T/K the storage term is constant; for τ ≥ T/K it is sT/τ.
    Each piece is convex, so its minimum is its stationary point clamped to the piece.
    """
    a = m.run * (m.write * m.accelerators * m.price + m.fee)
    b = m.run * m.accelerators * m.price / (2 * m.mtbf)
    s = m.size * m.storage_price * m.run / HOURS_PER_MONTH
    split = m.run / m.keep
    closed = (a / b).sqrt()
    tau_a = min(closed, split)
    free_b = ((a + s * m.run) / b).sqrt()
    tau_b = min(max(free_b, split), m.run)
    best = tau_a if m.total(tau_a) <= m.total(tau_b) else tau_b
    return closed, free_b, best


def _grid_optimum(m: _Ckpt, low: Decimal, high: Decimal) -> Decimal:
    """Numerical minimum: geometric grid (16 points per doubling) from low/64 to min(64·high, T),
    then 64 linear steps between the best grid point's neighbours."""
    lo = min(low, m.run) / 64
    hi = min(high * 64, m.run)
    span = (hi / lo).ln()
    count = int((span / Decimal(2).ln() * 16).to_integral_value(rounding=ROUND_CEILING)) + 1
    grid = [lo * (span * k / (count - 1)).exp() for k in range(count)]
    grid[-1] = hi
    costs = [m.total(t) for t in grid]
    i = min(range(count), key=costs.__getitem__)
    left, right = grid[max(i - 1, 0)], grid[min(i + 1, count - 1)]
    fine = [left + (right - left) * j / 64 for j in range(65)]
    return min(fine, key=m.total)


@_exact
def analyse_checkpoint_interval(req: CheckpointIntervalIn) -> CheckpointIntervalOut:
    """The checkpoint interval that minimises checkpoint cost plus expected rework."""
    req = _revalidate(req)
    cur = req.currency
    m = _ckpt_model(req)
    young = _young(m.write, m.mtbf)
    daly = _daly(m.write, m.mtbf)
    closed, free_b, optimum = _exact_optimum(m)
    grid = _grid_optimum(m, min(young, closed), max(young, free_b))

    candidates: list[tuple[str, Decimal]] = [
        ("optimum", optimum),
        ("grid_optimum", grid),
        ("young", young),
        ("daly", daly),
    ]
    if req.current_interval_hours is not None:
        candidates.append(("current", Decimal(req.current_interval_hours)))

    def option(name: str, tau: Decimal) -> CheckpointOption:
        p = m.parts(tau)
        total = p["stall"] + p["fees"] + p["rework"] + p["storage"]
        return CheckpointOption(
            name=name,
            interval_hours=_num(tau),
            currency=cur,
            total_cost=_money(total),
            checkpoints_written=_num(p["checkpoints"]),
            expected_failures=_num(p["failures"]),
            exceeds_run=tau > m.run,
            breakdown=[
                Line(
                    item="checkpoint_stall",
                    value=_money(p["stall"]),
                    unit=cur,
                    formula="(T/τ) × C × N × price",
                ),
                Line(
                    item="checkpoint_fees", value=_money(p["fees"]), unit=cur, formula="(T/τ) × w"
                ),
                Line(
                    item="expected_rework",
                    value=_money(p["rework"]),
                    unit=cur,
                    formula="(T/M) × (τ/2 + R) × N × price",
                ),
                Line(
                    item="checkpoint_storage",
                    value=_money(p["storage"]),
                    unit=cur,
                    formula="G × min(K, T/τ) × q × T/730",
                ),
            ],
        )

    totals = {name: m.total(tau) for name, tau in candidates}
    recommended = min(candidates, key=lambda c: totals[c[0]])[0]  # ties: list order
    versus = "current" if req.current_interval_hours is not None else "young"
    savings = _savings(
        recommended,
        totals[recommended],
        versus,
        totals[versus],
        cur,
        f"expected total at the {versus} interval − expected total at the recommended interval",
    )
    best_tau = dict(candidates)[recommended]
    best_total = totals[recommended]
    curve = []
    for multiple in ("0.25", "0.5", "1", "2", "4"):
        tau = best_tau * Decimal(multiple)
        total = m.total(tau)
        curve.append(
            CostCurvePoint(
                multiple_of_optimum=multiple,
                interval_hours=_num(tau),
                currency=cur,
                total_cost=_money(total),
                extra_cost=_money(total - best_total),
                extra_percent=_percent(total - best_total, best_total),
                exceeds_run=tau > m.run,
            )
        )
    warnings = []
    if best_tau >= m.mtbf:
        warnings.append(
            "the optimum interval is not much shorter than the MTBF: the first-order model "
            "(at most one failure per interval) is inaccurate; prefer Daly's estimate"
        )
    if m.write * 10 > best_tau:
        warnings.append("checkpoint write time is over a tenth of the interval")
    if optimum == m.run:
        warnings.append("the optimum is the whole run: one checkpoint at the end")

    hours = f"{_num(m.write * 3600)} s"
    assumptions = [
        "Money: exact decimal arithmetic (50 significant digits), rounded half-even to "
        f"0.01 {cur}; intervals in hours rounded to 6 decimals.",
        f"Symbols: T = run_hours = {_num(m.run)} h (wall-time, taken as fixed); N = "
        f"{req.accelerators} accelerators; price = {req.price_per_accelerator_hour} "
        f"{cur}/accelerator-hour; M = job MTBF = {_num(m.mtbf)} h"
        + (
            " (accelerator MTBF / N: independent failures, any one stops the job)"
            if req.accelerator_mtbf_hours is not None
            else ""
        )
        + f"; C = checkpoint write time = {hours} = {_num(m.write)} h; R = restart time = "
        f"{_num(m.restart)} h; w = {req.write_cost_per_checkpoint} {cur}/checkpoint; G = "
        f"{req.checkpoint_size_gb} GB; K = {req.retained_checkpoints} retained; q = "
        f"{req.storage_price_per_gb_month} {cur}/GB-month; a month is 730 h.",
        "Expected total cost(τ) = (T/τ)·C·N·price [stalled writing] + (T/τ)·w [write fees] + "
        "(T/M)·(τ/2 + R)·N·price [rework: on average half an interval plus the restart is lost "
        "per failure] + G·min(K, T/τ)·q·T/730 [storage: the retained checkpoints billed for the "
        "whole run, an upper bound].",
        "Young (1974), 'A first order approximation to the optimum checkpoint interval', CACM "
        "17(9): τ = sqrt(2·C·M).",
        "Daly (2006), 'A higher order estimate of the optimum checkpoint interval for restart "
        "dumps', FGCS 22(3): τ = sqrt(2CM)·[1 + (1/3)·sqrt(C/(2M)) + (1/9)·(C/(2M))] − C "
        "for C < 2M, else τ = M.",
        "closed_form_interval = sqrt(2·M·(C + w/(N·price))): the minimum of the cost model "
        "without the storage term (Young's formula with the fees folded into C).",
        "optimum: exact minimum of the cost model over 0 < τ ≤ T. With a = T·(C·N·price + w), "
        "b = T·N·price/(2M), s = G·q·T/730 the cost is a/τ + b·τ + s·K + const for τ ≤ T/K "
        "(minimum at sqrt(a/b)) and (a + sT)/τ + b·τ + const for τ ≥ T/K (minimum at "
        "sqrt((a + sT)/b)); each piece is convex, so the two stationary points, clamped to their "
        "pieces, are compared.",
        "grid_optimum: numerical minimum over a geometric grid from min(Young, closed form, T)/64 "
        "to min(64·max(Young, sqrt((a + sT)/b)), T), 16 points per doubling, refined with 64 "
        "linear steps between the best point's neighbours (a, b, s as in the optimum).",
        "Recommended: the cheapest of the listed intervals; savings compare with "
        f"{'the current interval' if versus == 'current' else 'Young’s interval'}.",
    ]
    return CheckpointIntervalOut(
        analysis="checkpoint-interval",
        currency=cur,
        options=[option(name, tau) for name, tau in candidates],
        recommended=recommended,
        savings=savings,
        break_even=BreakEven(
            quantity="checkpoint_interval",
            value=_num(best_tau),
            unit="hours",
            definition="interval at which the marginal checkpoint cost (stall, fees, storage) "
            "equals the marginal expected rework cost: the minimum of the expected total cost",
        ),
        job_mtbf_hours=_num(m.mtbf),
        young_interval_hours=_num(young),
        daly_interval_hours=_num(daly),
        closed_form_interval_hours=_num(closed),
        grid_optimum_interval_hours=_num(grid),
        cost_curve=curve,
        warnings=warnings,
        assumptions=assumptions,
    )


# --------------------------------------------------------------------------------------
# storage-lifecycle
# --------------------------------------------------------------------------------------

TierName = Literal["hot", "warm", "archive"]
_TIERS: tuple[TierName, ...] = ("hot", "warm", "archive")
DayCount = Annotated[int, msgspec.Meta(ge=0, le=36_500)]


class TierIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Prices and restore time of one storage tier."""

    price_per_gb_month: Annotated[
        DecimalString, msgspec.Meta(description="storage price (currency/GB-month)")
    ]
    retrieval_per_gb: Annotated[
        DecimalString, msgspec.Meta(description="price to read data back (currency/GB)")
    ] = "0"
    transition_per_gb: Annotated[
        DecimalString, msgspec.Meta(description="price to move data into this tier (currency/GB)")
    ] = "0"
    restore_hours: Annotated[
        DecimalString, msgspec.Meta(description="time before data in this tier is readable (hours)")
    ] = "0"


class TierPrices(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The three storage tiers data moves through."""

    hot: TierIn
    warm: TierIn
    archive: TierIn


class DataClassIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One class of stored data (corpus, intermediates, checkpoints) and its lifecycle rules."""

    name: Annotated[Name, msgspec.Meta(examples=["corpus", "intermediates", "checkpoints"])]
    initial_gb: Annotated[
        DecimalString, msgspec.Meta(description="data stored at the start of month 1 (GB)")
    ]
    growth_gb_per_month: Annotated[
        DecimalString,
        msgspec.Meta(description="new data written at the start of each later month (GB/month)"),
    ] = "0"
    warm_after_days: Annotated[
        DayCount | None, msgspec.Meta(description="move to warm at this age (days)")
    ] = None
    archive_after_days: Annotated[
        DayCount | None, msgspec.Meta(description="move to archive at this age (days)")
    ] = None
    delete_after_days: Annotated[
        DayCount | None, msgspec.Meta(description="retention: delete at this age (days)")
    ] = None
    reads_gb_per_month: Annotated[
        DecimalString,
        msgspec.Meta(
            description="data read back per month from data past the hot period (GB/month)"
        ),
    ] = "0"


class StorageLifecycleIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /v1/analysis/storage-lifecycle`."""

    horizon_months: Annotated[
        int, msgspec.Meta(ge=1, le=600, description="months projected (months)")
    ]
    tiers: TierPrices
    classes: Annotated[list[DataClassIn], msgspec.Meta(min_length=1, max_length=50)]
    currency: Currency = "USD"


class MonthRow(msgspec.Struct, kw_only=True):
    """One projected month (1-based): costs in `currency`, volumes in GB."""

    month: int
    currency: str
    with_rules_cost: str
    baseline_cost: str
    cumulative_with_rules: str
    cumulative_baseline: str
    hot_gb: str
    warm_gb: str
    archive_gb: str
    deleted_gb: str
    baseline_gb: str


class StorageOption(msgspec.Struct, kw_only=True):
    """`baseline` (all hot, kept forever) or `with_rules`: total over the horizon in `currency`."""

    name: str
    currency: str
    total_cost: str
    breakdown: list[Line]


class RestoreItem(msgspec.Struct, kw_only=True):
    """What restoring a class's data in one tier at the horizon end takes: hours and money."""

    data_class: str
    tier: str
    gb_at_horizon_end: str
    restore_hours: str
    currency: str
    retrieval_cost_all: str


class StorageLifecycleOut(msgspec.Struct, kw_only=True):
    """Answer of `POST /v1/analysis/storage-lifecycle`."""

    analysis: str
    currency: str
    options: list[StorageOption]
    recommended: str
    savings: Savings
    break_even: BreakEven
    monthly: list[MonthRow]
    restore: list[RestoreItem]
    restore_trade_off: list[str]
    assumptions: list[str]


def _tier_at(cls: DataClassIn, age_days: int) -> str:
    if cls.delete_after_days is not None and age_days >= cls.delete_after_days:
        return "deleted"
    if cls.archive_after_days is not None and age_days >= cls.archive_after_days:
        return "archive"
    if cls.warm_after_days is not None and age_days >= cls.warm_after_days:
        return "warm"
    return "hot"


@dataclass
class _ClassRun:
    """One class's projection: per month and tier the GB and costs."""

    gb: list[dict[str, Decimal]]  # per month: hot/warm/archive/deleted (with rules)
    base_gb: list[Decimal]
    cost: list[dict[str, Decimal]]  # per month: storage_<tier>, transitions, retrieval
    base_cost: list[dict[str, Decimal]]  # per month: storage_hot, retrieval


def _project(cls: DataClassIn, tiers: TierPrices, horizon: int) -> _ClassRun:
    tier_in: dict[str, TierIn] = {"hot": tiers.hot, "warm": tiers.warm, "archive": tiers.archive}
    price: dict[str, Decimal] = {t: Decimal(tier_in[t].price_per_gb_month) for t in _TIERS}
    retrieval: dict[str, Decimal] = {t: Decimal(tier_in[t].retrieval_per_gb) for t in _TIERS}
    transition: dict[str, Decimal] = {t: Decimal(tier_in[t].transition_per_gb) for t in _TIERS}
    initial = Decimal(cls.initial_gb)
    growth = Decimal(cls.growth_gb_per_month)
    reads = Decimal(cls.reads_gb_per_month)
    run = _ClassRun(gb=[], base_gb=[], cost=[], base_cost=[])
    for month in range(horizon):
        gb = dict.fromkeys(("hot", "warm", "archive", "deleted"), _ZERO)
        moved = _ZERO
        for cohort in range(month + 1):
            size = initial if cohort == 0 else growth
            age = (month - cohort) * DAYS_PER_MONTH
            tier = _tier_at(cls, age)
            gb[tier] += size
            if (
                cohort < month
                and tier in ("warm", "archive")
                and _tier_at(cls, age - DAYS_PER_MONTH) != tier
            ):
                moved += size * transition[tier]
        cold = gb["warm"] + gb["archive"]
        if cold > 0:
            read_cost = (
                reads
                * (gb["warm"] * retrieval["warm"] + gb["archive"] * retrieval["archive"])
                / cold
            )
        else:
            read_cost = reads * retrieval["hot"]
        base = initial + growth * month
        run.gb.append(gb)
        run.base_gb.append(base)
        run.cost.append(
            {
                "storage_hot": gb["hot"] * price["hot"],
                "storage_warm": gb["warm"] * price["warm"],
                "storage_archive": gb["archive"] * price["archive"],
                "transitions": moved,
                "retrieval": read_cost,
            }
        )
        run.base_cost.append(
            {"storage_hot": base * price["hot"], "retrieval": reads * retrieval["hot"]}
        )
    return run


def _class_rules_text(cls: DataClassIn, tiers: TierPrices, cur: str) -> str:
    steps = []
    if cls.warm_after_days is not None:
        steps.append(
            f"older than {cls.warm_after_days} days is warm (restore {tiers.warm.restore_hours} h, "
            f"{tiers.warm.retrieval_per_gb} {cur}/GB to read)"
        )
    if cls.archive_after_days is not None:
        steps.append(
            f"older than {cls.archive_after_days} days is archived (restore "
            f"{tiers.archive.restore_hours} h, {tiers.archive.retrieval_per_gb} {cur}/GB to read)"
        )
    if cls.delete_after_days is not None:
        steps.append(f"older than {cls.delete_after_days} days is deleted and cannot be restored")
    if not steps:
        return f"{cls.name}: no rules, everything stays hot (restore {tiers.hot.restore_hours} h)"
    return (
        f"{cls.name}: with rules, data "
        + "; data ".join(steps)
        + "; without rules all of it stays "
        f"hot (restore {tiers.hot.restore_hours} h, {tiers.hot.retrieval_per_gb} {cur}/GB)"
    )


@_exact
def analyse_storage_lifecycle(req: StorageLifecycleIn) -> StorageLifecycleOut:
    """Projected storage cost with and without tiering and retention rules."""
    req = _revalidate(req)
    cur = req.currency
    names: set[str] = set()
    for i, cls in enumerate(req.classes):
        where = f"$.classes[{i}]"
        if cls.name in names:
            raise AnalysisError(f"{where}.name", f"duplicate class name {cls.name!r}")
        names.add(cls.name)
        order = [
            (k, v)
            for k, v in (
                ("warm_after_days", cls.warm_after_days),
                ("archive_after_days", cls.archive_after_days),
                ("delete_after_days", cls.delete_after_days),
            )
            if v is not None
        ]
        for (_, a), (field, b) in itertools.pairwise(order):
            if b <= a:
                raise AnalysisError(
                    f"{where}.{field}", "lifecycle ages must increase: warm < archive < delete"
                )

    horizon = req.horizon_months
    runs = [_project(cls, req.tiers, horizon) for cls in req.classes]
    monthly: list[MonthRow] = []
    cum_with = _ZERO
    cum_base = _ZERO
    cum_with_list: list[Decimal] = []
    cum_base_list: list[Decimal] = []
    for month in range(horizon):
        with_cost = sum((sum(r.cost[month].values(), _ZERO) for r in runs), _ZERO)
        base_cost = sum((sum(r.base_cost[month].values(), _ZERO) for r in runs), _ZERO)
        cum_with += with_cost
        cum_base += base_cost
        cum_with_list.append(cum_with)
        cum_base_list.append(cum_base)

        def gb(tier: str, month: int = month) -> Decimal:
            return sum((r.gb[month][tier] for r in runs), _ZERO)

        monthly.append(
            MonthRow(
                month=month + 1,
                currency=cur,
                with_rules_cost=_money(with_cost),
                baseline_cost=_money(base_cost),
                cumulative_with_rules=_money(cum_with),
                cumulative_baseline=_money(cum_base),
                hot_gb=_num(gb("hot")),
                warm_gb=_num(gb("warm")),
                archive_gb=_num(gb("archive")),
                deleted_gb=_num(gb("deleted")),
                baseline_gb=_num(sum((r.base_gb[month] for r in runs), _ZERO)),
            )
        )

    def lines(key: str) -> list[Line]:
        out = []
        for cls, r in zip(req.classes, runs, strict=True):
            series = r.cost if key == "with_rules" else r.base_cost
            for component in series[0]:
                out.append(
                    Line(
                        item=f"{cls.name}.{component}",
                        value=_money(sum((c[component] for c in series), _ZERO)),
                        unit=cur,
                        formula=f"Σ over {horizon} months",
                    )
                )
        return out

    options = [
        StorageOption(
            name="baseline", currency=cur, total_cost=_money(cum_base), breakdown=lines("baseline")
        ),
        StorageOption(
            name="with_rules",
            currency=cur,
            total_cost=_money(cum_with),
            breakdown=lines("with_rules"),
        ),
    ]
    if cum_with < cum_base:
        recommended, versus = "with_rules", "baseline"
        savings = _savings(
            recommended, cum_with, versus, cum_base, cur, "baseline total − with-rules total"
        )
    else:
        recommended, versus = "baseline", "with_rules"
        savings = _savings(
            recommended, cum_base, versus, cum_with, cur, "with-rules total − baseline total"
        )

    payback: int | None = None
    for month in range(horizon - 1, -1, -1):
        if cum_with_list[month] < cum_base_list[month]:
            payback = month + 1
        else:
            break
    break_even = BreakEven(
        quantity="payback_month",
        value=None if payback is None else str(payback),
        unit="month (1 = first month of the horizon)",
        definition="first month from which the cumulative cost with rules stays strictly below the "
        "cumulative baseline cost through the end of the horizon",
        note="" if payback is not None else "the rules do not pay off within the horizon",
    )

    restore: list[RestoreItem] = []
    tier_in = {"hot": req.tiers.hot, "warm": req.tiers.warm, "archive": req.tiers.archive}
    for cls, r in zip(req.classes, runs, strict=True):
        last = r.gb[-1]
        for tier in _TIERS:
            restore.append(
                RestoreItem(
                    data_class=cls.name,
                    tier=tier,
                    gb_at_horizon_end=_num(last[tier]),
                    restore_hours=tier_in[tier].restore_hours,
                    currency=cur,
                    retrieval_cost_all=_money(last[tier] * Decimal(tier_in[tier].retrieval_per_gb)),
                )
            )
    trade_off = [_class_rules_text(cls, req.tiers, cur) for cls in req.classes]

    assumptions = [
        "Money: exact decimal arithmetic (50 significant digits), rounded half-even to "
        f"0.01 {cur}; GB to 6 decimals.",
        f"Months have {DAYS_PER_MONTH} days. initial_gb is written at the start of month 1; "
        "growth_gb_per_month at the start of each later month; each month's write is a cohort.",
        "A cohort's tier in a month follows its age at the start of that month ((month − "
        f"written month) × {DAYS_PER_MONTH} days): deleted if age ≥ delete_after_days, else "
        "archive if ≥ archive_after_days, else warm if ≥ warm_after_days, else hot. Transitions "
        "therefore happen at whole months (thresholds rounded up to the next month start).",
        "Monthly storage cost = Σ GB in tier × price_per_gb_month of the tier (a whole month "
        "billed per month held).",
        "Transition fee = GB moved × transition_per_gb of the destination tier, charged in the "
        "month of the move; new data is written straight into the tier its age selects.",
        "Reads (reads_gb_per_month) come from data past its hot period, spread over warm and "
        "archive in proportion to their GB and priced at their retrieval_per_gb; when nothing is "
        "warm or archived, and in the baseline, they are priced at the hot tier's "
        "retrieval_per_gb.",
        "Baseline: no tiering and no retention: all data stays hot for the whole horizon.",
        "Recommended: the cheaper total; ties go to the baseline (no restore delay).",
        "Not modelled: minimum storage durations and early-deletion fees of archive tiers, "
        "per-object request fees, compression.",
    ]
    return StorageLifecycleOut(
        analysis="storage-lifecycle",
        currency=cur,
        options=options,
        recommended=recommended,
        savings=savings,
        break_even=break_even,
        monthly=monthly,
        restore=restore,
        restore_trade_off=trade_off,
        assumptions=assumptions,
    )


# --------------------------------------------------------------------------------------
# Registry for the HTTP layer: path segment -> (request type, analysis function)
# --------------------------------------------------------------------------------------

ANALYSES: dict[str, tuple[type[msgspec.Struct], Callable[[Any], msgspec.Struct]]] = {
    "data-strategy": (DataStrategyIn, analyse_data_strategy),
    "domain-mix": (DomainMixIn, analyse_domain_mix),
    "checkpoint-interval": (CheckpointIntervalIn, analyse_checkpoint_interval),
    "storage-lifecycle": (StorageLifecycleIn, analyse_storage_lifecycle),
}
