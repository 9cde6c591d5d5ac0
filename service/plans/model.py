"""Training plans: the wire models of a plan and of its estimate, and the plan error.

`POST /v1/plans` registers a plan and `POST /v1/plans/estimate` prices one without saving it;
both answer with :func:`service.plans.estimate.estimate_plan`, where the arithmetic and the
definitions of every figure are documented. This module holds what goes over the wire.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from ..errors import Invalid
from ..events.model import ProjectName
from ..ratecards.model import (
    CURRENCY_PATTERN,
    NAME_PATTERN,
    DecimalString,
    SkuCode,
    UtcDatetime,
)

__all__ = [
    "DEFAULT_PUE",
    "GRID_INTENSITY",
    "STAGE_NAMES",
    "LineEstimate",
    "ModelDerivation",
    "ModelTermsIn",
    "PeakHeadroom",
    "PlanError",
    "PlanEstimate",
    "PlanIn",
    "ResourceIn",
    "StageEstimate",
    "StageIn",
    "StageName",
    "TierSegment",
]

StageName = Literal[
    "data_prep", "quality_scoring", "pretrain", "midtrain", "eval", "post_train", "other"
]
STAGE_NAMES: tuple[str, ...] = (
    "data_prep",
    "quality_scoring",
    "pretrain",
    "midtrain",
    "eval",
    "post_train",
    "other",
)

DEFAULT_PUE = "1.2"
"""Default power usage effectiveness when a plan gives none (see `estimate`)."""

GRID_INTENSITY: dict[str, tuple[str, str]] = {
    # region: (kg CO2e per kWh, source). Lifecycle intensities of electricity generation.
    "world": ("0.481", "Ember, Global Electricity Review 2024: world average for 2023, 481 g/kWh"),
    "us": (
        "0.385",
        "US national average used by Touvron et al. 2023, 'LLaMA: Open and Efficient Foundation "
        "Language Models', section 6 (arXiv:2302.13971)",
    ),
    "ca": ("0.170", "Ember via Our World in Data, Canada 2023, 170 g/kWh"),
    "fr": ("0.056", "Ember via Our World in Data, France 2023, 56 g/kWh"),
    "de": ("0.381", "Ember via Our World in Data, Germany 2023, 381 g/kWh"),
    "pl": ("0.662", "Ember, EU power sector 2023: Poland about 662 g/kWh"),
    "se": ("0.041", "Ember, EU power sector 2023: Sweden 40.7 g/kWh"),
    "no": ("0.030", "Ember 2023 via Statista: Norway 30 g/kWh"),
    "cn": ("0.582", "Ember via Our World in Data, China 2023, 582 g/kWh"),
    "in": ("0.713", "Ember via Our World in Data, India 2023, 713 g/kWh"),
}
"""Built-in grid carbon intensities, used when a plan names a region but gives no intensity."""

NamePart = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN)]
Currency = Annotated[str, msgspec.Meta(pattern=CURRENCY_PATTERN, examples=["USD"])]
FlopsString = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[0-9]+(\.[0-9]+)?([eE]\+?[0-9]{1,3})?$(?!\n)",
        description="non-negative decimal, optionally with a positive exponent",
        examples=["989e12", "989500000000000"],
    ),
]
RegionCode = Annotated[
    str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$(?!\n)", examples=["us"])
]
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]


# --------------------------------------------------------------------------------------------
# Wire models: requests
# --------------------------------------------------------------------------------------------


class ResourceIn(msgspec.Struct, forbid_unknown_fields=True):
    """A quantity of one SKU, in the SKU's own unit (``gpu_hour``, ``gb_day``, ``mtok``...)."""

    sku: SkuCode
    quantity: DecimalString


class ModelTermsIn(msgspec.Struct, forbid_unknown_fields=True):
    """A stage in model terms, turned into accelerator hours by the 6·N·D rule.

    ``parameters`` is N, the parameters active per token (for mixture-of-experts, the activated
    ones, not the total); ``tokens`` is D. ``peak_flops_per_accelerator`` is the accelerator's
    peak dense FLOP/s at the training precision, ``mfu`` the expected model FLOPs utilisation in
    (0, 1].
    """

    parameters: Annotated[int, msgspec.Meta(ge=1, le=10**15)]
    tokens: Annotated[int, msgspec.Meta(ge=1, le=10**17)]
    accelerator_sku: SkuCode
    peak_flops_per_accelerator: FlopsString
    mfu: DecimalString


class StageIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One stage: ``resources`` and/or ``model``, plus ``overheads`` and a contingency.

    ``contingency_pct`` is a percentage of the stage subtotal (``"10"`` = 10 %).
    ``duration_days`` (and optionally ``start_day``, days after the window start) place the
    stage on the timeline for the peak-spend estimate.
    """

    stage: StageName
    label: Label | None = None
    resources: Annotated[list[ResourceIn], msgspec.Meta(max_length=500)] = msgspec.field(
        default_factory=list
    )
    model: ModelTermsIn | None = None
    overheads: Annotated[list[ResourceIn], msgspec.Meta(max_length=500)] = msgspec.field(
        default_factory=list
    )
    contingency_pct: DecimalString = "0"
    duration_days: DecimalString | None = None
    start_day: DecimalString | None = None


class PlanIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Body of ``POST /v1/plans`` and ``POST /v1/plans/estimate``.

    ``pue`` defaults to :data:`DEFAULT_PUE`. Give ``carbon_intensity_kg_per_kwh`` directly, or a
    ``region`` from :data:`GRID_INTENSITY`; with neither, emissions are not computed.
    """

    project: ProjectName
    name: NamePart
    rate_card: NamePart
    currency: Currency
    window_start: UtcDatetime
    window_end: UtcDatetime
    stages: Annotated[list[StageIn], msgspec.Meta(min_length=1, max_length=64)]
    pue: DecimalString = DEFAULT_PUE
    carbon_intensity_kg_per_kwh: DecimalString | None = None
    region: RegionCode | None = None
    description: Annotated[str, msgspec.Meta(max_length=500)] | None = None


# --------------------------------------------------------------------------------------------
# Wire models: the answer
# --------------------------------------------------------------------------------------------


class TierSegment(msgspec.Struct, kw_only=True):
    """The part of a line's quantity that fell in one price tier."""

    quantity: str
    unit_price: str


class LineEstimate(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One priced quantity of one SKU. ``path`` is the JSON path of the input it comes from."""

    source: Literal["model", "resource", "overhead"]
    path: str
    sku: str
    category: str
    unit: str
    fixed: bool
    quantity: str
    unit_price: str
    cost: str
    tiers: list[TierSegment] | None = None
    energy_kwh: str | None = None


class ModelDerivation(msgspec.Struct, kw_only=True):
    """The 6·N·D step, shown: FLOPs, then accelerator seconds and hours."""

    accelerator_sku: str
    parameters: int
    tokens: int
    flops: str
    peak_flops_per_accelerator: str
    mfu: str
    effective_flops_per_accelerator: str
    accelerator_seconds: str
    accelerator_hours: str
    formula: str


class StageEstimate(msgspec.Struct, kw_only=True):
    """The estimate of one stage of a plan: its priced lines, subtotal and contingency."""

    index: int
    stage: str
    label: str | None
    derivation: ModelDerivation | None
    lines: list[LineEstimate]
    subtotal: str
    contingency_pct: str
    contingency: str
    total: str
    fixed: str
    elastic: str
    accelerator_hours: str
    energy_kwh: str
    emissions_kg_co2e: str | None
    start_day: str | None
    end_day: str | None
    daily_burn: str | None


class PeakHeadroom(msgspec.Struct, kw_only=True):
    """Highest daily spend implied by the stage timeline, against the window's average."""

    window_days: str
    average_daily: str
    peak_daily: str
    peak_from_day: str
    peak_to_day: str
    headroom: str
    ratio: str | None
    definition: str


class PlanEstimate(msgspec.Struct, kw_only=True):
    """Answer of ``POST /v1/plans/estimate`` (and the estimate part of ``POST /v1/plans``)."""

    project: str
    name: str
    rate_card: str
    currency: str
    window_start: datetime
    window_end: datetime
    stages: list[StageEstimate]
    categories: dict[str, str]
    fixed: str
    elastic: str
    subtotal: str
    contingency: str
    total: str
    accelerator_hours: str
    energy_kwh: str
    pue: str
    carbon_intensity_kg_per_kwh: str | None
    carbon_intensity_source: str | None
    emissions_kg_co2e: str | None
    peak: PeakHeadroom


class PlanError(Invalid, ValueError):
    """A plan that cannot be estimated; ``field`` names the offending JSON path."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason
