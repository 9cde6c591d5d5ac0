"""Training plans: what a planned run should cost, before it runs.

`POST /v1/plans` registers a plan and `POST /v1/plans/estimate` prices one without saving it;
both answer with :func:`estimate_plan`. This module is the pure part: wire models and the
estimate itself, with no I/O. The caller loads the rate card and passes its SKUs in integer form
(:func:`service.ratecards.model.validate_rate_card` or ``RateCardHistory.priced``).

A plan has stages (data_prep, quality_scoring, pretrain, midtrain, eval, post_train, other). A
stage's consumption is given as resource quantities (``[{sku, quantity}]``), in model terms
(parameters, tokens, accelerator SKU, peak FLOP/s, MFU; turned into accelerator hours by the
6·N·D rule, and the step is shown in the answer), or both; plus overheads (more resources:
checkpoint storage, scoring inference, transfer, logs, ops hours) and a contingency percentage.

Arithmetic
----------
* Money is exact integers, as in the rest of the ledger: quantities in micro-units (10⁻⁶),
  prices and costs in nano-currency (10⁻⁹). A line's cost is ``Σ quantity × unit price`` over
  the tier segments it spans, rounded once, half-even, to a nano. Contingency is
  ``subtotal × pct / 100`` rounded half-even to a nano. Money goes out as exact decimal strings.
* The physics (FLOPs → hours, kWh, kg CO2e) is computed with exact rationals
  (:class:`fractions.Fraction` built from the decimal inputs), never floats. The derived
  accelerator hours are rounded half-even to micro-hours (10⁻⁶ h) explicitly, because that is
  the ledger's quantity resolution; pricing and energy use that rounded figure. Energy is
  reported in kWh and emissions in kg CO2e, both rounded half-even to 3 decimals at output only
  (totals are rounded from exact sums, not summed from rounded parts).

Definitions
-----------
* **Tiers across stages.** Graduated tiers apply to the plan's cumulative quantity of each SKU,
  taken in stage order, and within a stage in the order: model-derived hours, ``resources``,
  ``overheads``. So if pretraining uses the first 50 TB-month of hot storage, post-training's
  storage is priced from the next tier on. This is the same tier arithmetic as the ledger's
  pricer (``costcore.price_batch_reference`` prices the lines), but the plan does not reset the
  counters at month boundaries as a rate card's monthly tiers do: usage of a tiered SKU spread
  over several months is priced as if it fell in one month, which with volume discounts
  understates the bill. Each tiered line shows its per-tier breakdown (``tiers``): the
  quantity that fell in each tier and that tier's unit price, not a per-tier amount. The line's
  ``cost`` is ``Σ tier quantity × tier price`` (exact) rounded once, so amounts rounded tier by
  tier need not add up to it (e.g. 0.500118 + 0.642808 nano is 1.194762 -> 1 nano, while
  rounding each part gives 1 + 1 = 2).
* **Accelerator SKUs** are those that declare ``power_watts`` and those named as a stage's
  ``model.accelerator_sku``; their unit must be an hour unit (``hour``, ``gpu_hour``, ...).
  ``accelerator_hours`` sums every line on an accelerator SKU.
* **Energy** = Σ hours × power_watts / 1000 × PUE over lines whose SKU declares power_watts.
  PUE (power usage effectiveness, facility energy / IT energy) defaults to ``1.2``: between
  hyperscale fleet averages (about 1.1) and industry-wide survey averages (about 1.5).
* **Emissions** = energy × grid carbon intensity (kg CO2e/kWh), taken from the plan's
  ``carbon_intensity_kg_per_kwh``, else from its ``region`` in :data:`GRID_INTENSITY`, else not
  computed (``null``).
* **Fixed vs elastic** follows each SKU's ``fixed`` flag over the priced lines; contingency is
  reported apart, so ``fixed + elastic + contingency = total`` and
  ``Σ categories + contingency = total``.
* **Peak headroom.** Stages with ``duration_days`` are laid on the window's timeline: a stage
  starts at its ``start_day`` (days after ``window_start``) if given, else when the previous
  timed stage ends (the first at day 0). Its daily burn is its total (with contingency) divided
  by its duration. Stages without a duration are spread evenly over the whole window. The
  *peak daily spend* is the highest sum of daily burns at any moment; the *average daily spend*
  is the plan total over the window's length in days; *headroom* is peak − average and *ratio*
  is peak / average. Budget the peak, not the average, for cash-flow and quota alarms.
"""

from __future__ import annotations

import itertools
from array import array
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Annotated, Literal, NamedTuple

import msgspec

# Only costcore's public API (its package ``__all__``), not its submodules' layout.
from costcore import (
    INT64_MAX,
    QUANTITY_SCALE,
    STATUS_OVERFLOW,
    RateRow,
    RateTable,
    format_money,
    format_quantity,
    parse_quantity,
    price_batch_reference,
    round_half_even_div,
)

from ..events.model import UNSAFE_TEXT_REASON, ProjectName, safe_text
from ..ratecards.model import (
    COST_CATEGORIES,
    CURRENCY_PATTERN,
    NAME_PATTERN,
    DecimalString,
    PricedSku,
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
    "estimate_plan",
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
"""Default power usage effectiveness when a plan gives none (see module docstring)."""

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

_HOUR_UNITS = frozenset({"h", "hr", "hrs"})
_ROUND_NOTE = (
    "flops = 6 × parameters × tokens; accelerator_seconds = flops ÷ (peak_flops × mfu); "
    "accelerator_hours = accelerator_seconds ÷ 3600, rounded half-even to 10⁻⁶ h "
    "(accelerator_seconds is shown rounded to 10⁻⁶ s; the hours are rounded from the exact value)"
)
_PEAK_NOTE = (
    "timed stages (duration_days) run from start_day, or back to back in stage order; untimed "
    "stages are spread evenly over the window; peak_daily = highest sum of daily burns at any "
    "moment; average_daily = total ÷ window days; headroom = peak_daily − average_daily; "
    "ratio = peak_daily ÷ average_daily"
)


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


class PlanError(ValueError):
    """A plan that cannot be estimated; ``field`` names the offending JSON path."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _decimal(text: str, field: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise PlanError(field, f"not a decimal number: {text!r}") from exc
    if not value.is_finite():
        raise PlanError(field, f"must be a finite number, got {text!r}")
    return value


def _quantity(text: str, field: str) -> int:
    try:
        return parse_quantity(_decimal(text, field))
    except ValueError as exc:
        if isinstance(exc, PlanError):
            raise
        raise PlanError(field, str(exc)) from exc


def _fixed(value: Fraction, decimals: int) -> str:
    """``value`` rounded half-even to ``decimals`` places; trailing zeros stripped."""
    scaled = round_half_even_div(value.numerator * 10**decimals, value.denominator)
    sign = "-" if scaled < 0 else ""
    whole, frac = divmod(abs(scaled), 10**decimals)
    frac_text = str(frac).rjust(decimals, "0").rstrip("0") if decimals else ""
    return f"{sign}{whole}.{frac_text}" if frac_text else f"{sign}{whole}"


def _fraction_text(value: Decimal) -> str:
    """Plain (non-scientific) text of a finite decimal, without trailing zeros."""
    return _fixed(Fraction(value), max(0, -_exponent(value)))


def _exponent(value: Decimal) -> int:
    exponent = value.normalize().as_tuple().exponent
    assert isinstance(exponent, int)
    return exponent


def _is_hour_unit(unit: str) -> bool:
    lowered = unit.lower()
    return "hour" in lowered or lowered in _HOUR_UNITS


def _segments(sku: PricedSku, start: int, quantity: int) -> list[tuple[int, int]]:
    """Split ``quantity`` micro-units, starting at cumulative ``start``, over the SKU's tiers.

    Returns ``(quantity_micro, unit_price_nano)`` pairs with a non-zero quantity (a single pair
    at the SKU's unit price when it has no tiers).
    """
    if not sku.tiers:
        return [(quantity, sku.unit_price_nano)]
    end = start + quantity
    out: list[tuple[int, int]] = []
    lower = 0
    for upto, price in sku.tiers:
        upper = end if upto is None else upto
        overlap = min(end, upper) - max(start, lower)
        if overlap > 0:
            out.append((overlap, price))
        if upto is None or upto >= end:
            break
        lower = upto
    return out


class _Sums:
    """Running money totals (nano) for a stage or the whole plan."""

    __slots__ = ("categories", "elastic", "fixed")

    def __init__(self) -> None:
        self.fixed = 0
        self.elastic = 0
        self.categories: dict[str, int] = dict.fromkeys(COST_CATEGORIES, 0)

    def add(self, sku: PricedSku, cost: int) -> None:
        if sku.fixed:
            self.fixed += cost
        else:
            self.elastic += cost
        self.categories[sku.category] = self.categories.get(sku.category, 0) + cost

    @property
    def subtotal(self) -> int:
        return self.fixed + self.elastic


# --------------------------------------------------------------------------------------------
# The estimate
# --------------------------------------------------------------------------------------------


def _derive_hours(
    model: ModelTermsIn, where: str, skus: dict[str, PricedSku]
) -> tuple[int, ModelDerivation]:
    """Accelerator micro-hours for a stage in model terms, and the derivation to show."""
    if model.accelerator_sku not in skus:
        raise PlanError(
            f"{where}.accelerator_sku", f"unknown SKU {model.accelerator_sku!r} in the rate card"
        )
    peak = _decimal(model.peak_flops_per_accelerator, f"{where}.peak_flops_per_accelerator")
    if peak <= 0:
        raise PlanError(f"{where}.peak_flops_per_accelerator", "must be greater than 0")
    mfu = _decimal(model.mfu, f"{where}.mfu")
    if not 0 < mfu <= 1:
        raise PlanError(f"{where}.mfu", f"must be in (0, 1], got {model.mfu}")
    flops = 6 * model.parameters * model.tokens
    effective = Fraction(peak) * Fraction(mfu)  # FLOP/s per accelerator
    seconds = Fraction(flops) / effective
    hours = seconds / 3600
    hours_micro = round_half_even_div(
        hours.numerator * QUANTITY_SCALE, hours.denominator
    )  # explicit half-even rounding to the ledger's micro-unit resolution
    if hours_micro <= 0:
        raise PlanError(where, "derives zero accelerator hours (at micro-hour resolution)")
    if hours_micro > INT64_MAX:
        raise PlanError(where, "derives more accelerator hours than the ledger can hold")
    derivation = ModelDerivation(
        accelerator_sku=model.accelerator_sku,
        parameters=model.parameters,
        tokens=model.tokens,
        flops=str(flops),
        peak_flops_per_accelerator=_fraction_text(peak),
        mfu=_fraction_text(mfu),
        effective_flops_per_accelerator=_fixed(effective, 6),
        accelerator_seconds=_fixed(seconds, 6),
        accelerator_hours=format_quantity(hours_micro),
        formula=_ROUND_NOTE,
    )
    return hours_micro, derivation


_Item = tuple[Literal["model", "resource", "overhead"], str, str, int]
"""A line to price: (kind, JSON path, SKU code, quantity in micro-units)."""


class _PreparedStage(NamedTuple):
    stage: StageIn
    items: list[_Item]
    derivation: ModelDerivation | None
    pct_micro: int
    span: tuple[int, int] | None


def _price_lines(items: list[_Item], skus: dict[str, PricedSku]) -> list[int]:
    """Cost in nano of each line, priced in order by ``costcore.price_batch_reference``.

    One rate row per SKU used and one tier counter per tiered SKU (starting at 0), so tiers
    apply to the plan's cumulative quantity of the SKU in line order.
    """
    rows: dict[str, int] = {}
    slots: dict[str, int] = {}
    for _, _, code, _ in items:
        if code not in rows:
            rows[code] = len(rows)
            if skus[code].tiers:
                slots[code] = len(slots)
    table = RateTable.build(
        [RateRow(skus[code].unit_price_nano, skus[code].tiers) for code in rows]
    )
    result = price_batch_reference(
        array("q", [qty for *_, qty in items]),
        array("i", [rows[code] for _, _, code, _ in items]),
        array("i", range(len(items))),
        array("i", [slots.get(code, -1) for _, _, code, _ in items]),
        table,
        array("q", bytes(8 * len(slots))),
        max(1, len(items)),
    )
    for (_, path, code, _), status in zip(items, result.status, strict=True):
        if status == STATUS_OVERFLOW:
            raise PlanError(
                path, f"cost or cumulative quantity of SKU {code!r} exceeds the ledger's range"
            )
    return list(result.cost_nano)


def _resource_items(
    resources: list[ResourceIn],
    kind: Literal["resource", "overhead"],
    where: str,
    skus: dict[str, PricedSku],
) -> list[_Item]:
    out: list[_Item] = []
    for j, res in enumerate(resources):
        path = f"{where}[{j}]"
        if res.sku not in skus:
            raise PlanError(f"{path}.sku", f"unknown SKU {res.sku!r} in the rate card")
        out.append((kind, path, res.sku, _quantity(res.quantity, f"{path}.quantity")))
    return out


def _accelerator_skus(plan: PlanIn, skus: dict[str, PricedSku]) -> set[str]:
    codes = {code for code, sku in skus.items() if sku.power_watts is not None}
    codes.update(s.model.accelerator_sku for s in plan.stages if s.model is not None)
    return codes


def _resolve_intensity(plan: PlanIn) -> tuple[Fraction | None, str | None, str | None]:
    """(kg CO2e per kWh, its text, where it came from)."""
    if plan.carbon_intensity_kg_per_kwh is not None:
        value = _decimal(plan.carbon_intensity_kg_per_kwh, "$.carbon_intensity_kg_per_kwh")
        source = "plan"
        if plan.region is not None:
            source = f"plan (overrides region {plan.region!r})"
        return Fraction(value), _fraction_text(value), source
    if plan.region is not None:
        known = GRID_INTENSITY.get(plan.region)
        if known is None:
            raise PlanError(
                "$.region",
                f"unknown region {plan.region!r}; known: {', '.join(sorted(GRID_INTENSITY))}; "
                "or give carbon_intensity_kg_per_kwh",
            )
        text, source = known
        return Fraction(Decimal(text)), text, f"region {plan.region!r}: {source}"
    return None, None, None


def estimate_plan(
    plan: PlanIn, skus: dict[str, PricedSku], *, card_currency: str | None = None
) -> PlanEstimate:
    """Price a plan against a rate card's SKUs. Pure: no I/O, no clock.

    ``skus`` maps SKU code to its integer form (``validate_rate_card`` output). If
    ``card_currency`` is given it must equal the plan's currency.

    Each stage's lines are priced as quantity × unit price, with graduated tiers applied to the
    plan's cumulative quantity of each SKU in stage order (within a stage: model-derived hours,
    then ``resources``, then ``overheads``), so a later stage continues where the earlier ones
    left the tier counter. A line's cost is rounded once, half-even, to a nano.

    Raises :class:`PlanError` naming the JSON path of the first problem found: unknown SKUs,
    ``mfu`` outside (0, 1], a window that ends before it starts, a stage running past the
    window, an unknown region, a non-hour accelerator SKU, and so on.
    """
    if plan.description is not None and not safe_text(plan.description):
        raise PlanError("$.description", UNSAFE_TEXT_REASON)
    for i, stage in enumerate(plan.stages):
        if stage.label is not None and not safe_text(stage.label):
            raise PlanError(f"$.stages[{i}].label", UNSAFE_TEXT_REASON)
    if card_currency is not None and plan.currency != card_currency:
        raise PlanError(
            "$.currency",
            f"plan currency {plan.currency} differs from the rate card's {card_currency}",
        )
    if plan.window_end <= plan.window_start:
        raise PlanError("$.window_end", "must be after window_start")
    window_us = _micros(plan.window_end - plan.window_start)

    pue_dec = _decimal(plan.pue, "$.pue")
    if not 1 <= pue_dec <= 5:
        raise PlanError("$.pue", f"must be between 1 and 5, got {plan.pue}")
    pue = Fraction(pue_dec)
    intensity, intensity_text, intensity_source = _resolve_intensity(plan)

    # Pass 1: validate every stage and collect its lines (kind, path, sku, micro-quantity).
    prepared: list[_PreparedStage] = []
    cursor = 0
    for i, stage in enumerate(plan.stages):
        where = f"$.stages[{i}]"
        if not stage.resources and stage.model is None:
            raise PlanError(where, "give resources, model terms, or both")
        items: list[_Item] = []
        derivation: ModelDerivation | None = None
        if stage.model is not None:
            hours_micro, derivation = _derive_hours(stage.model, f"{where}.model", skus)
            items.append(("model", f"{where}.model", stage.model.accelerator_sku, hours_micro))
        items.extend(_resource_items(stage.resources, "resource", f"{where}.resources", skus))
        items.extend(_resource_items(stage.overheads, "overhead", f"{where}.overheads", skus))
        pct_micro = _quantity(stage.contingency_pct, f"{where}.contingency_pct")
        if pct_micro > 1000 * QUANTITY_SCALE:
            raise PlanError(f"{where}.contingency_pct", "must be at most 1000 (percent)")
        span, cursor = _place(stage, where, cursor, window_us)
        prepared.append(_PreparedStage(stage, items, derivation, pct_micro, span))

    accelerators = _accelerator_skus(plan, skus)
    for prep in prepared:
        for kind, path, code, _ in prep.items:
            unit = skus[code].unit
            if code in accelerators and not _is_hour_unit(unit):
                raise PlanError(
                    f"{path}.accelerator_sku" if kind == "model" else f"{path}.sku",
                    f"SKU {code!r} is an accelerator (it has a power draw or is used in model "
                    f"terms) but is priced per {unit!r}, not per hour",
                )

    # Pass 2: price all lines in plan order with costcore's reference pricer (same tier and
    # rounding semantics as the ledger's kernel).
    costs = _price_lines([item for p in prepared for item in p.items], skus)

    # Pass 3: assemble the answer.
    cumulative: dict[str, int] = {}  # for the per-tier breakdown shown on each line
    plan_sums = _Sums()
    plan_contingency = 0
    plan_hours = 0
    plan_energy = Fraction(0)
    stage_out: list[StageEstimate] = []
    stage_totals: list[int] = []
    timeline: list[tuple[int, int] | None] = []  # (start, end) in micro-days
    cost_iter = iter(costs)
    for i, prep in enumerate(prepared):
        sums = _Sums()
        stage_hours = 0
        stage_energy = Fraction(0)
        lines: list[LineEstimate] = []
        for kind, path, code, qty in prep.items:
            sku = skus[code]
            cost = next(cost_iter)
            start = cumulative.get(code, 0)
            cumulative[code] = start + qty
            sums.add(sku, cost)
            energy_text: str | None = None
            if code in accelerators:
                stage_hours += qty
            if sku.power_watts is not None:
                energy = Fraction(qty * sku.power_watts, QUANTITY_SCALE * 1000) * pue
                stage_energy += energy
                energy_text = _fixed(energy, 3)
            tiers: list[TierSegment] | None = None
            if sku.tiers:
                tiers = [
                    TierSegment(quantity=format_quantity(q), unit_price=format_money(p))
                    for q, p in _segments(sku, start, qty)
                ]
            lines.append(
                LineEstimate(
                    source=kind,
                    path=path,
                    sku=code,
                    category=sku.category,
                    unit=sku.unit,
                    fixed=sku.fixed,
                    quantity=format_quantity(qty),
                    unit_price=format_money(sku.unit_price_nano),
                    cost=format_money(cost),
                    tiers=tiers,
                    energy_kwh=energy_text,
                )
            )

        contingency = round_half_even_div(sums.subtotal * prep.pct_micro, 100 * QUANTITY_SCALE)
        total = sums.subtotal + contingency
        span = prep.span
        daily_burn: str | None = None
        if span is not None:
            daily_burn = format_money(
                round_half_even_div(total * QUANTITY_SCALE, span[1] - span[0])
            )

        stage_out.append(
            StageEstimate(
                index=i,
                stage=prep.stage.stage,
                label=prep.stage.label,
                derivation=prep.derivation,
                lines=lines,
                subtotal=format_money(sums.subtotal),
                contingency_pct=format_quantity(prep.pct_micro),
                contingency=format_money(contingency),
                total=format_money(total),
                fixed=format_money(sums.fixed),
                elastic=format_money(sums.elastic),
                accelerator_hours=format_quantity(stage_hours),
                energy_kwh=_fixed(stage_energy, 3),
                emissions_kg_co2e=(
                    None if intensity is None else _fixed(stage_energy * intensity, 3)
                ),
                start_day=None if span is None else format_quantity(span[0]),
                end_day=None if span is None else format_quantity(span[1]),
                daily_burn=daily_burn,
            )
        )
        stage_totals.append(total)
        timeline.append(span)
        plan_sums.fixed += sums.fixed
        plan_sums.elastic += sums.elastic
        for category, amount in sums.categories.items():
            plan_sums.categories[category] = plan_sums.categories.get(category, 0) + amount
        plan_contingency += contingency
        plan_hours += stage_hours
        plan_energy += stage_energy

    grand_total = plan_sums.subtotal + plan_contingency
    return PlanEstimate(
        project=plan.project,
        name=plan.name,
        rate_card=plan.rate_card,
        currency=plan.currency,
        window_start=plan.window_start,
        window_end=plan.window_end,
        stages=stage_out,
        categories={c: format_money(v) for c, v in plan_sums.categories.items()},
        fixed=format_money(plan_sums.fixed),
        elastic=format_money(plan_sums.elastic),
        subtotal=format_money(plan_sums.subtotal),
        contingency=format_money(plan_contingency),
        total=format_money(grand_total),
        accelerator_hours=format_quantity(plan_hours),
        energy_kwh=_fixed(plan_energy, 3),
        pue=_fraction_text(pue_dec),
        carbon_intensity_kg_per_kwh=intensity_text,
        carbon_intensity_source=intensity_source,
        emissions_kg_co2e=None if intensity is None else _fixed(plan_energy * intensity, 3),
        peak=_peak(stage_totals, timeline, grand_total, window_us),
    )


# --------------------------------------------------------------------------------------------
# Timeline and peak
# --------------------------------------------------------------------------------------------

_US_PER_MICRODAY = 86_400  # 1 day = 86 400 s = 86 400 × 10⁶ µs, so 1 micro-day = 86 400 µs


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _place(
    stage: StageIn, where: str, cursor: int, window_us: int
) -> tuple[tuple[int, int] | None, int]:
    """The stage's (start, end) in micro-days after the window start, and the new cursor."""
    if stage.duration_days is None:
        if stage.start_day is not None:
            raise PlanError(f"{where}.start_day", "needs duration_days")
        return None, cursor
    duration = _quantity(stage.duration_days, f"{where}.duration_days")
    if duration <= 0:
        raise PlanError(f"{where}.duration_days", "must be greater than 0")
    start = cursor
    if stage.start_day is not None:
        start = _quantity(stage.start_day, f"{where}.start_day")
    end = start + duration
    if end * _US_PER_MICRODAY > window_us:
        window_days = _fixed(Fraction(window_us, _US_PER_MICRODAY * QUANTITY_SCALE), 6)
        raise PlanError(
            f"{where}.duration_days",
            f"stage runs to day {format_quantity(end)}, past the window's {window_days} days",
        )
    return (start, end), end


def _peak(
    totals: list[int],
    timeline: list[tuple[int, int] | None],
    grand_total: int,
    window_us: int,
) -> PeakHeadroom:
    day_us = _US_PER_MICRODAY * QUANTITY_SCALE
    untimed = sum(t for t, span in zip(totals, timeline, strict=True) if span is None)
    background = round_half_even_div(untimed * day_us, window_us)  # nano per day
    average = round_half_even_div(grand_total * day_us, window_us)
    window_days = _fixed(Fraction(window_us, day_us), 6)

    spans = [
        (span, round_half_even_div(t * QUANTITY_SCALE, span[1] - span[0]))
        for t, span in zip(totals, timeline, strict=True)
        if span is not None
    ]
    peak, peak_from, peak_to = background, "0", window_days
    if spans:
        ordered = sorted({p for span, _ in spans for p in span})
        best = -1
        for lo, hi in itertools.pairwise(ordered):
            rate = background + sum(r for (s, e), r in spans if s <= lo and hi <= e)
            if rate > best:
                best, peak_from, peak_to = rate, format_quantity(lo), format_quantity(hi)
        if best > background:
            peak = best
        else:
            peak_from, peak_to = "0", window_days
    return PeakHeadroom(
        window_days=window_days,
        average_daily=format_money(average),
        peak_daily=format_money(peak),
        peak_from_day=peak_from,
        peak_to_day=peak_to,
        headroom=format_money(peak - average),
        ratio=None if average == 0 else _fixed(Fraction(peak, average), 4),
        definition=_PEAK_NOTE,
    )
