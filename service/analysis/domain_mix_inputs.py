"""The `domain-mix` request: the candidate mixes (typed in, or measured: an experiment) and the
figures every mix shares."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ..events.model import PROJECT_PATTERN, Label
from .schema import (
    Currency,
    DecimalString,
    Name,
    ProbabilityString,
    ScaleTokens,
    SignedDecimalString,
)

__all__ = ["DomainMixIn", "DomainName", "MixIn"]


DomainName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,31}$(?!\n)")]


class MixIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One candidate mid-training mix with its pilot scores."""

    name: Name
    scores: (
        Annotated[
            dict[DomainName, SignedDecimalString],
            msgspec.Meta(
                min_length=1,
                max_length=32,
                description="pilot score per domain (score units); every mix names the same "
                "domains. Give these or `experiment`",
            ),
        ]
        | None
    ) = None
    experiment: (
        Annotated[
            Label,
            msgspec.Meta(
                min_length=1,
                description="measured instead of typed in (needs `project`): the scores are the "
                "experiment's latest reported results on the project's declared benchmarks, "
                "cost_per_run its cost in the ledger",
            ),
        ]
        | None
    ) = None
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


class DomainMixIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Body of `POST /v1/analysis/domain-mix`."""

    project: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=PROJECT_PATTERN,
                description="the project whose ledger and results measured mixes are read from",
            ),
        ]
        | None
    ) = None
    mixes: Annotated[list[MixIn], msgspec.Meta(min_length=1, max_length=200)]
    cost_per_run: (
        Annotated[
            DecimalString,
            msgspec.Meta(description="cost of one run (currency); needed unless every mix has one"),
        ]
        | None
    ) = None
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
    scale_tokens: ScaleTokens | None = None
