"""`storage-lifecycle`: storage cost with and without tiering and retention rules.

Each data class is projected month by month as cohorts (the initial data, then each month's
growth) that move hot -> warm -> archive -> deleted as they age. The baseline keeps everything
hot forever. The answer compares the totals, gives the payback month of the rules and what
restoring each tier's data at the end of the horizon would take.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Literal

import msgspec

from .arithmetic import AnalysisError, exact, money_text, number_text, revalidate
from .schema import (
    BreakEven,
    Currency,
    DecimalString,
    Line,
    Name,
    Savings,
    savings_versus,
)

__all__ = [
    "DataClassIn",
    "MonthRow",
    "RestoreItem",
    "StorageLifecycleIn",
    "StorageLifecycleOut",
    "StorageOption",
    "TierIn",
    "TierPrices",
    "analyse_storage_lifecycle",
]

DAYS_PER_MONTH = 30

TierName = Literal["hot", "warm", "archive"]
_TIERS: tuple[TierName, ...] = ("hot", "warm", "archive")
DayCount = Annotated[int, msgspec.Meta(ge=0, le=36_500)]

_ZERO = Decimal(0)


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


# --------------------------------------------------------------------------------------
# Projection: each class's cohorts month by month
# --------------------------------------------------------------------------------------


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


def _check_classes(req: StorageLifecycleIn) -> None:
    """Raise for duplicate class names and lifecycle ages that do not increase."""
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


# --------------------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------------------


@dataclass
class _Totals:
    """Month by month over all classes: the rows, and the cumulative costs."""

    monthly: list[MonthRow]
    cum_with: list[Decimal]
    cum_base: list[Decimal]


def _monthly(runs: list[_ClassRun], horizon: int, cur: str) -> _Totals:
    totals = _Totals(monthly=[], cum_with=[], cum_base=[])
    cum_with = _ZERO
    cum_base = _ZERO
    for month in range(horizon):
        with_cost = sum((sum(r.cost[month].values(), _ZERO) for r in runs), _ZERO)
        base_cost = sum((sum(r.base_cost[month].values(), _ZERO) for r in runs), _ZERO)
        cum_with += with_cost
        cum_base += base_cost
        totals.cum_with.append(cum_with)
        totals.cum_base.append(cum_base)

        def gb(tier: str, month: int = month) -> Decimal:
            return sum((r.gb[month][tier] for r in runs), _ZERO)

        totals.monthly.append(
            MonthRow(
                month=month + 1,
                currency=cur,
                with_rules_cost=money_text(with_cost),
                baseline_cost=money_text(base_cost),
                cumulative_with_rules=money_text(cum_with),
                cumulative_baseline=money_text(cum_base),
                hot_gb=number_text(gb("hot")),
                warm_gb=number_text(gb("warm")),
                archive_gb=number_text(gb("archive")),
                deleted_gb=number_text(gb("deleted")),
                baseline_gb=number_text(sum((r.base_gb[month] for r in runs), _ZERO)),
            )
        )
    return totals


def _breakdown(req: StorageLifecycleIn, runs: list[_ClassRun], key: str) -> list[Line]:
    """Per class and cost component, its total over the horizon (`key`: which option)."""
    out = []
    for cls, r in zip(req.classes, runs, strict=True):
        series = r.cost if key == "with_rules" else r.base_cost
        for component in series[0]:
            out.append(
                Line(
                    item=f"{cls.name}.{component}",
                    value=money_text(sum((c[component] for c in series), _ZERO)),
                    unit=req.currency,
                    formula=f"Σ over {req.horizon_months} months",
                )
            )
    return out


def _recommend(cum_with: Decimal, cum_base: Decimal, cur: str) -> tuple[str, Savings]:
    """The cheaper option (ties: the baseline) and its savings over the other."""
    if cum_with < cum_base:
        return "with_rules", savings_versus(
            "with_rules", cum_with, "baseline", cum_base, cur, "baseline total − with-rules total"
        )
    return "baseline", savings_versus(
        "baseline", cum_base, "with_rules", cum_with, cur, "with-rules total − baseline total"
    )


def _payback(totals: _Totals, horizon: int) -> BreakEven:
    payback: int | None = None
    for month in range(horizon - 1, -1, -1):
        if totals.cum_with[month] < totals.cum_base[month]:
            payback = month + 1
        else:
            break
    return BreakEven(
        quantity="payback_month",
        value=None if payback is None else str(payback),
        unit="month (1 = first month of the horizon)",
        definition="first month from which the cumulative cost with rules stays strictly below the "
        "cumulative baseline cost through the end of the horizon",
        note="" if payback is not None else "the rules do not pay off within the horizon",
    )


def _restore(req: StorageLifecycleIn, runs: list[_ClassRun]) -> list[RestoreItem]:
    restore: list[RestoreItem] = []
    tier_in = {"hot": req.tiers.hot, "warm": req.tiers.warm, "archive": req.tiers.archive}
    for cls, r in zip(req.classes, runs, strict=True):
        last = r.gb[-1]
        for tier in _TIERS:
            restore.append(
                RestoreItem(
                    data_class=cls.name,
                    tier=tier,
                    gb_at_horizon_end=number_text(last[tier]),
                    restore_hours=tier_in[tier].restore_hours,
                    currency=req.currency,
                    retrieval_cost_all=money_text(
                        last[tier] * Decimal(tier_in[tier].retrieval_per_gb)
                    ),
                )
            )
    return restore


def _assumptions(cur: str) -> list[str]:
    return [
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


@exact
def analyse_storage_lifecycle(req: StorageLifecycleIn) -> StorageLifecycleOut:
    """Projected storage cost with and without tiering and retention rules."""
    req = revalidate(req)
    cur = req.currency
    _check_classes(req)
    horizon = req.horizon_months
    runs = [_project(cls, req.tiers, horizon) for cls in req.classes]
    totals = _monthly(runs, horizon, cur)
    cum_with, cum_base = totals.cum_with[-1], totals.cum_base[-1]
    options = [
        StorageOption(
            name="baseline",
            currency=cur,
            total_cost=money_text(cum_base),
            breakdown=_breakdown(req, runs, "baseline"),
        ),
        StorageOption(
            name="with_rules",
            currency=cur,
            total_cost=money_text(cum_with),
            breakdown=_breakdown(req, runs, "with_rules"),
        ),
    ]
    recommended, savings = _recommend(cum_with, cum_base, cur)
    return StorageLifecycleOut(
        analysis="storage-lifecycle",
        currency=cur,
        options=options,
        recommended=recommended,
        savings=savings,
        break_even=_payback(totals, horizon),
        monthly=totals.monthly,
        restore=_restore(req, runs),
        restore_trade_off=[_class_rules_text(cls, req.tiers, cur) for cls in req.classes],
        assumptions=_assumptions(cur),
    )
