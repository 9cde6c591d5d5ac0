"""Data strategy inputs that may be measured: the scoring rate and the tokens needed.

The scoring cost per corpus token is given, or derived from a priced scoring SKU and its
throughput (unit price / tokens per unit). A strategy's tokens needed is either given
(`<strategy>_tokens_needed`) or interpolated from its measured pilot runs: the runs sorted by
tokens, linear interpolation at the first run that reaches `target_score` (never
extrapolated), scaled by `pilot_token_scale` and rounded up.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from typing import Annotated, Literal

import msgspec

from ..events.model import PROJECT_PATTERN, SAFE_TEXT_PATTERN, Label
from .arithmetic import AnalysisError, number_text, rate_text
from .schema import (
    SKU_PATTERN,
    Currency,
    DecimalString,
    ProbabilityString,
    ScaleTokens,
    SignedDecimalString,
)

__all__ = [
    "STRATEGIES",
    "DataStrategyIn",
    "PilotPoint",
    "ScoringSku",
    "Strategy",
    "TokenCount",
    "UpsampleBucket",
    "scoring_rate_of",
    "tokens_needed",
]

Strategy = Literal["flat", "upsampled", "unfiltered"]
STRATEGIES: tuple[str, ...] = ("flat", "upsampled", "unfiltered")
"""The strategies in answer order; ties in cost go to the earlier one."""

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


class PilotPoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One measured pilot run: strategy, training tokens of the pilot, quality reached."""

    strategy: Strategy
    tokens: Annotated[TokenCount, msgspec.Meta(description="training tokens of the pilot run")]
    score: Annotated[
        SignedDecimalString, msgspec.Meta(description="quality score reached (score units)")
    ]


def scoring_rate_of(
    scoring_cost_per_token: str | None, scoring_sku: ScoringSku | None, currency: str
) -> tuple[Decimal, str]:
    """The scoring cost per corpus token, and how it was found (for the assumptions)."""
    if (scoring_cost_per_token is None) == (scoring_sku is None):
        raise AnalysisError(
            "$.scoring_cost_per_token", "give exactly one of scoring_cost_per_token and scoring_sku"
        )
    if scoring_sku is not None:
        sku = scoring_sku
        per_unit = Decimal(sku.tokens_per_unit)
        if per_unit == 0:
            raise AnalysisError("$.scoring_sku.tokens_per_unit", "must be greater than 0")
        rate = Decimal(sku.unit_price) / per_unit
        return rate, (
            f"scoring_cost_per_token = SKU {sku.code} unit_price / tokens_per_unit = "
            f"{sku.unit_price} {currency}/{sku.unit} / {sku.tokens_per_unit} tokens/{sku.unit}"
            f" = {rate_text(rate)} {currency}/token"
        )
    assert scoring_cost_per_token is not None
    rate = Decimal(scoring_cost_per_token)
    return rate, f"scoring_cost_per_token = {rate_text(rate)} {currency}/token (given)"


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


def tokens_needed(
    explicit: Mapping[str, int | None],
    pilot_results: Sequence[PilotPoint],
    target_score: str | None,
    pilot_token_scale: str,
) -> dict[str, tuple[int, str]]:
    """Per strategy: (training tokens needed, where the figure comes from).

    `explicit` maps each strategy to its `<strategy>_tokens_needed` (None when absent).
    `unfiltered` is optional: it is left out when neither given nor piloted.
    """
    if pilot_results and target_score is None:
        raise AnalysisError("$.target_score", "required with pilot_results")
    if target_score is not None and not pilot_results:
        raise AnalysisError("$.target_score", "given without pilot_results")
    scale = Decimal(pilot_token_scale)
    if scale == 0:
        raise AnalysisError("$.pilot_token_scale", "must be greater than 0")
    by_strategy: dict[str, list[tuple[int, PilotPoint]]] = {}
    for i, point in enumerate(pilot_results):
        by_strategy.setdefault(point.strategy, []).append((i, point))
    out: dict[str, tuple[int, str]] = {}
    for strategy in STRATEGIES:
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
            assert target_score is not None
            pilot = _interpolate_tokens(strategy, points, Decimal(target_score))
            full = (pilot * scale).to_integral_value(rounding=ROUND_CEILING)
            out[strategy] = (
                int(full),
                f"interpolated from {len(points)} pilot run(s): {number_text(pilot, 3)} pilot "
                f"tokens × pilot_token_scale {pilot_token_scale}, rounded up",
            )
        elif strategy != "unfiltered":
            raise AnalysisError(
                f"$.{strategy}_tokens_needed",
                f"required: give it or {strategy} pilot_results with target_score",
            )
    return out


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


class DataStrategyIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
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
    project: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=PROJECT_PATTERN,
                description="the project whose ledger and results pilot_experiments are read from",
            ),
        ]
        | None
    ) = None
    training_cost_per_token: (
        Annotated[
            DecimalString,
            msgspec.Meta(
                description="training cost per token (currency/token); measured from "
                "pilot_experiments when absent"
            ),
        ]
        | None
    ) = None
    pilot_experiments: Annotated[
        dict[Strategy, Annotated[Label, msgspec.Meta(min_length=1)]],
        msgspec.Meta(
            max_length=3,
            description="strategy -> the experiment that piloted it (needs `project` and "
            "`pilot_benchmark`): its results on pilot_benchmark are its pilot_results (tokens "
            "seen, value), and the ledger cost of these experiments over the tokens they saw "
            "is training_cost_per_token when that is absent",
        ),
    ] = {}
    pilot_benchmark: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=SAFE_TEXT_PATTERN)] | None
    ) = None
    scale_tokens: ScaleTokens | None = None
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
