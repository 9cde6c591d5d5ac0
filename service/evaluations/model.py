"""Evaluation results and the project's evaluation settings: the wire models and their checks.

A result is one measurement of one benchmark on one experiment's checkpoint: its value (an
exact decimal string), which direction is better, how far the run was (step, tokens seen) and
when. Results are kept by id (a result posted twice is stored once). The settings name the
baseline experiment, which benchmarks are `general` (a regression there means rework) and
which are `target` (the gain is what the spend buys), the regression tolerance, and each
running experiment's planned tokens (for the forecast at completion). The rules of the
cost-effect report over them are in `effect.py`.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

import msgspec

from ..events.model import (
    DECIMAL_PATTERN,
    PROJECT_PATTERN,
    SAFE_TEXT_PATTERN,
    SIGNED_DECIMAL_PATTERN,
    TIME_PATTERN,
    Label,
)

__all__ = [
    "MAX_BATCH",
    "AuditPage",
    "BenchmarkKind",
    "BenchmarkName",
    "EvaluationResult",
    "EvaluationSettings",
    "ResultAudit",
    "ResultIn",
    "ResultsAccepted",
    "ResultsIn",
]

MAX_BATCH = 1000
# A decimal without exponent (the one bound of `DECIMAL_PATTERN`), sign allowed: values are
# compared and subtracted exactly.
SIGNED_VALUE_PATTERN = SIGNED_DECIMAL_PATTERN
TOLERANCE_PATTERN = DECIMAL_PATTERN

BenchmarkName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=SAFE_TEXT_PATTERN)
]
ExperimentName = Annotated[Label, msgspec.Meta(min_length=1)]
ResultId = Annotated[Label, msgspec.Meta(min_length=1)]
BenchmarkKind = Literal["general", "target"]
TokenCount = Annotated[int, msgspec.Meta(ge=0, le=10**18)]
ExactValue = Annotated[
    str,
    msgspec.Meta(
        pattern=SIGNED_VALUE_PATTERN,
        description="the score as an exact decimal string (no exponent)",
        examples=["61.25"],
    ),
]


ResultVersion = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=2**31 - 1,
        description="1 for a first report; a higher version of a stored id replaces it (a "
        "correction, audited); the stored version or a lower one is a duplicate",
    ),
]
ResultTime = Annotated[
    str,
    msgspec.Meta(
        max_length=64,
        pattern=TIME_PATTERN,
        description="RFC 3339 (the events' grammar and accepted range: not older than the "
        "deduplication window, not further ahead than the future skew)",
        examples=["2026-05-01T10:00:00Z"],
    ),
]


class ResultIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """One evaluation result as reported (the time defaults to when it is received)."""

    id: Annotated[
        ResultId,
        msgspec.Meta(description="idempotency key: a repeat of the same version is ignored"),
    ]
    experiment: ExperimentName
    benchmark: BenchmarkName
    value: ExactValue
    higher_is_better: bool = True
    step: Annotated[int, msgspec.Meta(ge=0, le=10**15)] | None = None
    tokens_seen: (
        Annotated[TokenCount, msgspec.Meta(description="training tokens seen at the checkpoint")]
        | None
    ) = None
    time: ResultTime | None = None
    version: ResultVersion = 1


class ResultsIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /v1/evaluations`: a batch of results of one project."""

    project: Annotated[str, msgspec.Meta(pattern=PROJECT_PATTERN)]
    results: Annotated[list[ResultIn], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]


class EvaluationResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A stored result (its time always set)."""

    id: str
    experiment: str
    benchmark: str
    value: str
    higher_is_better: bool
    time: datetime
    step: int | None = None
    tokens_seen: int | None = None
    version: int = 1

    @property
    def decimal(self) -> Decimal:
        return Decimal(self.value)


class ResultsAccepted(msgspec.Struct):
    """The answer to a batch: how many were new, how many repeats of stored ids, how many
    replaced a stored result by a higher version (corrections)."""

    project: str
    accepted: int
    duplicates: int
    duplicate_ids: list[str]
    corrected: int = 0
    corrected_ids: list[str] = []


class ResultAudit(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One correction or deletion of a stored result: who (the token), when, and what (the
    result before, and after unless it was deleted)."""

    action: Literal["corrected", "deleted"]
    id: str
    at: datetime
    token_id: str
    token_name: str = ""
    before: EvaluationResult
    after: EvaluationResult | None = None


class AuditPage(msgspec.Struct):
    """Answer of `GET /v1/evaluations/audit`: the project's corrections and deletions, newest
    first (at most `limit`; the project keeps its last `kept`)."""

    project: str
    items: list[ResultAudit]
    limit: int
    kept: int


class EvaluationSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A project's evaluation settings (`PUT /v1/evaluations/settings`)."""

    baseline: (
        Annotated[
            ExperimentName, msgspec.Meta(description="the experiment the others are compared to")
        ]
        | None
    ) = None
    benchmarks: Annotated[
        dict[BenchmarkName, BenchmarkKind],
        msgspec.Meta(
            max_length=200,
            description="benchmark -> 'general' (a regression means rework, e.g. general "
            "QA) or 'target' (what the spend is for, e.g. math, code)",
        ),
    ] = {}
    tolerance: Annotated[
        str,
        msgspec.Meta(
            pattern=TOLERANCE_PATTERN,
            description="how far (in the benchmark's points) a general benchmark may fall "
            "below the baseline before it is a regression",
        ),
    ] = "0"
    planned_tokens: Annotated[
        dict[ExperimentName, Annotated[int, msgspec.Meta(ge=1, le=10**18)]],
        msgspec.Meta(
            max_length=1000,
            description="experiment -> the training tokens it is planned to see (for the "
            "forecast at completion)",
        ),
    ] = {}
