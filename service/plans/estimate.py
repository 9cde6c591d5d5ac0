"""Training plans: what a planned run should cost, before it runs.

`POST /v1/plans` registers a plan and `POST /v1/plans/estimate` prices one without saving it;
both answer with :func:`estimate_plan`. This module is the pure estimate, with no I/O (the
wire models are in :mod:`service.plans.model`). The caller loads the rate card and passes its
SKUs in integer form (:func:`service.ratecards.model.validate_rate_card` or
``RateCardHistory.priced``).

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
  storage is priced from the next tier on. This is the ledger's pricer itself
  (``costcore.price_batch`` prices the lines), but the plan does not reset the
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
* **Peak headroom**: see :mod:`service.plans.timeline`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import NamedTuple

# Only costcore's public API (its package ``__all__``), not its submodules' layout.
from costcore import INT64_MAX, QUANTITY_SCALE, format_money, format_quantity, round_half_even_div

from ..events.model import UNSAFE_TEXT_REASON, safe_text
from ..ratecards.model import PricedSku
from .model import (
    GRID_INTENSITY,
    LineEstimate,
    ModelDerivation,
    ModelTermsIn,
    PlanError,
    PlanEstimate,
    PlanIn,
    StageEstimate,
    StageIn,
    TierSegment,
)
from .numbers import decimal_text, fixed_text, parse_decimal, parse_micro
from .pricing import Item, Sums, is_hour_unit, price_lines, resource_items, tier_segments
from .timeline import micros, peak_headroom, place_stage

__all__ = ["estimate_plan"]

_ROUND_NOTE = (
    "flops = 6 × parameters × tokens; accelerator_seconds = flops ÷ (peak_flops × mfu); "
    "accelerator_hours = accelerator_seconds ÷ 3600, rounded half-even to 10⁻⁶ h "
    "(accelerator_seconds is shown rounded to 10⁻⁶ s; the hours are rounded from the exact value)"
)


def _derive_hours(
    model: ModelTermsIn, where: str, skus: dict[str, PricedSku]
) -> tuple[int, ModelDerivation]:
    """Accelerator micro-hours for a stage in model terms, and the derivation to show."""
    if model.accelerator_sku not in skus:
        raise PlanError(
            f"{where}.accelerator_sku", f"unknown SKU {model.accelerator_sku!r} in the rate card"
        )
    peak = parse_decimal(model.peak_flops_per_accelerator, f"{where}.peak_flops_per_accelerator")
    if peak <= 0:
        raise PlanError(f"{where}.peak_flops_per_accelerator", "must be greater than 0")
    mfu = parse_decimal(model.mfu, f"{where}.mfu")
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
        peak_flops_per_accelerator=decimal_text(peak),
        mfu=decimal_text(mfu),
        effective_flops_per_accelerator=fixed_text(effective, 6),
        accelerator_seconds=fixed_text(seconds, 6),
        accelerator_hours=format_quantity(hours_micro),
        formula=_ROUND_NOTE,
    )
    return hours_micro, derivation


class _PreparedStage(NamedTuple):
    """A validated stage: its lines to price, its derivation, contingency and time span."""

    stage: StageIn
    items: list[Item]
    derivation: ModelDerivation | None
    pct_micro: int
    span: tuple[int, int] | None


def _accelerator_skus(plan: PlanIn, skus: dict[str, PricedSku]) -> set[str]:
    codes = {code for code, sku in skus.items() if sku.power_watts is not None}
    codes.update(s.model.accelerator_sku for s in plan.stages if s.model is not None)
    return codes


def _resolve_intensity(plan: PlanIn) -> tuple[Fraction | None, str | None, str | None]:
    """(kg CO2e per kWh, its text, where it came from)."""
    if plan.carbon_intensity_kg_per_kwh is not None:
        value = parse_decimal(plan.carbon_intensity_kg_per_kwh, "$.carbon_intensity_kg_per_kwh")
        source = "plan"
        if plan.region is not None:
            source = f"plan (overrides region {plan.region!r})"
        return Fraction(value), decimal_text(value), source
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


# --------------------------------------------------------------------------------------------
# Pass 1: check the plan and collect each stage's lines
# --------------------------------------------------------------------------------------------


def _check_plan(plan: PlanIn, card_currency: str | None) -> int:
    """Plan-wide checks; the window's length in µs."""
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
    return micros(plan.window_end - plan.window_start)


def _checked_pue(plan: PlanIn) -> Decimal:
    pue = parse_decimal(plan.pue, "$.pue")
    if not 1 <= pue <= 5:
        raise PlanError("$.pue", f"must be between 1 and 5, got {plan.pue}")
    return pue


def _prepare_stages(
    plan: PlanIn, skus: dict[str, PricedSku], window_us: int
) -> list[_PreparedStage]:
    """Validate every stage and collect its lines (kind, path, sku, micro-quantity)."""
    prepared: list[_PreparedStage] = []
    cursor = 0
    for i, stage in enumerate(plan.stages):
        where = f"$.stages[{i}]"
        if not stage.resources and stage.model is None:
            raise PlanError(where, "give resources, model terms, or both")
        items: list[Item] = []
        derivation: ModelDerivation | None = None
        if stage.model is not None:
            hours_micro, derivation = _derive_hours(stage.model, f"{where}.model", skus)
            items.append(("model", f"{where}.model", stage.model.accelerator_sku, hours_micro))
        items.extend(resource_items(stage.resources, "resource", f"{where}.resources", skus))
        items.extend(resource_items(stage.overheads, "overhead", f"{where}.overheads", skus))
        pct_micro = parse_micro(stage.contingency_pct, f"{where}.contingency_pct")
        if pct_micro > 1000 * QUANTITY_SCALE:
            raise PlanError(f"{where}.contingency_pct", "must be at most 1000 (percent)")
        span, cursor = place_stage(stage, where, cursor, window_us)
        prepared.append(_PreparedStage(stage, items, derivation, pct_micro, span))
    return prepared


def _check_accelerator_units(
    prepared: list[_PreparedStage], accelerators: set[str], skus: dict[str, PricedSku]
) -> None:
    for prep in prepared:
        for kind, path, code, _ in prep.items:
            unit = skus[code].unit
            if code in accelerators and not is_hour_unit(unit):
                raise PlanError(
                    f"{path}.accelerator_sku" if kind == "model" else f"{path}.sku",
                    f"SKU {code!r} is an accelerator (it has a power draw or is used in model "
                    f"terms) but is priced per {unit!r}, not per hour",
                )


# --------------------------------------------------------------------------------------------
# Pass 3: the answer, stage by stage, from the priced lines
# --------------------------------------------------------------------------------------------


class _LineContext(NamedTuple):
    skus: dict[str, PricedSku]
    accelerators: set[str]
    pue: Fraction
    intensity: Fraction | None  # kg CO2e per kWh


@dataclass
class _StageSums:
    """A stage's running totals: money (nano), accelerator micro-hours, energy (kWh)."""

    sums: Sums = field(default_factory=Sums)
    hours: int = 0
    energy: Fraction = Fraction(0)


def _line_estimate(
    item: Item, cost: int, start: int, ctx: _LineContext, stage: _StageSums
) -> LineEstimate:
    """One priced line (adding it to the stage's totals); `start`: the SKU's cumulative
    quantity before it, for the per-tier breakdown."""
    kind, path, code, qty = item
    sku = ctx.skus[code]
    stage.sums.add(sku, cost)
    energy_text: str | None = None
    if code in ctx.accelerators:
        stage.hours += qty
    if sku.power_watts is not None:
        energy = Fraction(qty * sku.power_watts, QUANTITY_SCALE * 1000) * ctx.pue
        stage.energy += energy
        energy_text = fixed_text(energy, 3)
    tiers: list[TierSegment] | None = None
    if sku.cumulative:
        tiers = [
            TierSegment(quantity=format_quantity(q), unit_price=format_money(p))
            for q, p in tier_segments(sku, start, qty)
        ]
    return LineEstimate(
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


def _estimate_stage(
    i: int,
    prep: _PreparedStage,
    costs: list[int],
    cumulative: dict[str, int],
    ctx: _LineContext,
) -> tuple[StageEstimate, _StageSums, int, int]:
    """The stage's answer, its totals, its contingency and its total (nano)."""
    stage = _StageSums()
    lines: list[LineEstimate] = []
    for item, cost in zip(prep.items, costs, strict=True):
        code, qty = item[2], item[3]
        start = cumulative.get(code, 0)
        cumulative[code] = start + qty
        lines.append(_line_estimate(item, cost, start, ctx, stage))

    sums = stage.sums
    contingency = round_half_even_div(sums.subtotal * prep.pct_micro, 100 * QUANTITY_SCALE)
    total = sums.subtotal + contingency
    span = prep.span
    daily_burn: str | None = None
    if span is not None:
        daily_burn = format_money(round_half_even_div(total * QUANTITY_SCALE, span[1] - span[0]))
    estimate = StageEstimate(
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
        accelerator_hours=format_quantity(stage.hours),
        energy_kwh=fixed_text(stage.energy, 3),
        emissions_kg_co2e=(
            None if ctx.intensity is None else fixed_text(stage.energy * ctx.intensity, 3)
        ),
        start_day=None if span is None else format_quantity(span[0]),
        end_day=None if span is None else format_quantity(span[1]),
        daily_burn=daily_burn,
    )
    return estimate, stage, contingency, total


@dataclass
class _PlanSums:
    """The plan's running totals over its stages, and each stage's total and time span."""

    sums: Sums = field(default_factory=Sums)
    contingency: int = 0
    hours: int = 0
    energy: Fraction = Fraction(0)
    stage_totals: list[int] = field(default_factory=list)
    timeline: list[tuple[int, int] | None] = field(default_factory=list)  # micro-days

    def add(
        self, stage: _StageSums, contingency: int, total: int, span: tuple[int, int] | None
    ) -> None:
        self.stage_totals.append(total)
        self.timeline.append(span)
        self.sums.fixed += stage.sums.fixed
        self.sums.elastic += stage.sums.elastic
        for category, amount in stage.sums.categories.items():
            self.sums.categories[category] = self.sums.categories.get(category, 0) + amount
        self.contingency += contingency
        self.hours += stage.hours
        self.energy += stage.energy


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
    window_us = _check_plan(plan, card_currency)
    pue_dec = _checked_pue(plan)
    pue = Fraction(pue_dec)
    intensity, intensity_text, intensity_source = _resolve_intensity(plan)
    prepared = _prepare_stages(plan, skus, window_us)
    accelerators = _accelerator_skus(plan, skus)
    _check_accelerator_units(prepared, accelerators, skus)

    # Pass 2: price all lines in plan order with costcore's reference pricer (same tier and
    # rounding semantics as the ledger's kernel).
    costs = price_lines([item for p in prepared for item in p.items], skus)

    # Pass 3: assemble the answer.
    ctx = _LineContext(skus, accelerators, pue, intensity)
    cumulative: dict[str, int] = {}  # for the per-tier breakdown shown on each line
    plan_sums = _PlanSums()
    stage_out: list[StageEstimate] = []
    offset = 0
    for i, prep in enumerate(prepared):
        stage_costs = costs[offset : offset + len(prep.items)]
        offset += len(prep.items)
        estimate, stage, contingency, total = _estimate_stage(i, prep, stage_costs, cumulative, ctx)
        stage_out.append(estimate)
        plan_sums.add(stage, contingency, total, prep.span)

    sums = plan_sums.sums
    grand_total = sums.subtotal + plan_sums.contingency
    return PlanEstimate(
        project=plan.project,
        name=plan.name,
        rate_card=plan.rate_card,
        currency=plan.currency,
        window_start=plan.window_start,
        window_end=plan.window_end,
        stages=stage_out,
        categories={c: format_money(v) for c, v in sums.categories.items()},
        fixed=format_money(sums.fixed),
        elastic=format_money(sums.elastic),
        subtotal=format_money(sums.subtotal),
        contingency=format_money(plan_sums.contingency),
        total=format_money(grand_total),
        accelerator_hours=format_quantity(plan_sums.hours),
        energy_kwh=fixed_text(plan_sums.energy, 3),
        pue=decimal_text(pue_dec),
        carbon_intensity_kg_per_kwh=intensity_text,
        carbon_intensity_source=intensity_source,
        emissions_kg_co2e=(
            None if intensity is None else fixed_text(plan_sums.energy * intensity, 3)
        ),
        peak=peak_headroom(plan_sums.stage_totals, plan_sums.timeline, grand_total, window_us),
    )
