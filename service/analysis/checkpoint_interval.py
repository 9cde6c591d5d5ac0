"""`checkpoint-interval`: the interval minimising checkpoint cost plus expected rework.

The cost model (all times in hours, money in the request currency): over a run of T hours
checkpointed every τ hours, the job stalls T/τ times for the write time C on N accelerators,
pays T/τ write fees, loses on average τ/2 + R per failure (T/M failures for a job MTBF M) and
stores the last K checkpoints. Young (1974) and Daly (2006) give closed-form intervals; the
exact minimum of the model and a numerical grid minimum are computed too, with the cost curve
around the best interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Annotated

import msgspec

from .arithmetic import (
    AnalysisError,
    exact,
    money_text,
    number_text,
    percent_text,
    revalidate,
)
from .schema import BreakEven, Currency, DecimalString, Line, Savings, savings_versus

__all__ = [
    "CheckpointIntervalIn",
    "CheckpointIntervalOut",
    "CheckpointOption",
    "CostCurvePoint",
    "analyse_checkpoint_interval",
    "checkpoint_total_cost",
]

HOURS_PER_MONTH = Decimal(730)


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


# --------------------------------------------------------------------------------------
# The cost model and its optima
# --------------------------------------------------------------------------------------


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


@exact
def checkpoint_total_cost(req: CheckpointIntervalIn, interval_hours: Decimal | str) -> Decimal:
    """Expected total cost (currency, unrounded) of checkpointing every `interval_hours`."""
    tau = Decimal(interval_hours)
    if tau <= 0:
        raise AnalysisError("interval_hours", "must be greater than 0")
    return _ckpt_model(revalidate(req)).total(tau)


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


# --------------------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------------------


def _option(m: _Ckpt, name: str, tau: Decimal, cur: str) -> CheckpointOption:
    p = m.parts(tau)
    total = p["stall"] + p["fees"] + p["rework"] + p["storage"]
    return CheckpointOption(
        name=name,
        interval_hours=number_text(tau),
        currency=cur,
        total_cost=money_text(total),
        checkpoints_written=number_text(p["checkpoints"]),
        expected_failures=number_text(p["failures"]),
        exceeds_run=tau > m.run,
        breakdown=[
            Line(
                item="checkpoint_stall",
                value=money_text(p["stall"]),
                unit=cur,
                formula="(T/τ) × C × N × price",
            ),
            Line(
                item="checkpoint_fees", value=money_text(p["fees"]), unit=cur, formula="(T/τ) × w"
            ),
            Line(
                item="expected_rework",
                value=money_text(p["rework"]),
                unit=cur,
                formula="(T/M) × (τ/2 + R) × N × price",
            ),
            Line(
                item="checkpoint_storage",
                value=money_text(p["storage"]),
                unit=cur,
                formula="G × min(K, T/τ) × q × T/730",
            ),
        ],
    )


def _cost_curve(m: _Ckpt, best_tau: Decimal, best_total: Decimal, cur: str) -> list[CostCurvePoint]:
    """Expected totals at 1/4, 1/2, 1, 2 and 4 times the best interval."""
    curve = []
    for multiple in ("0.25", "0.5", "1", "2", "4"):
        tau = best_tau * Decimal(multiple)
        total = m.total(tau)
        curve.append(
            CostCurvePoint(
                multiple_of_optimum=multiple,
                interval_hours=number_text(tau),
                currency=cur,
                total_cost=money_text(total),
                extra_cost=money_text(total - best_total),
                extra_percent=percent_text(total - best_total, best_total),
                exceeds_run=tau > m.run,
            )
        )
    return curve


def _warnings(m: _Ckpt, best_tau: Decimal, optimum: Decimal) -> list[str]:
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
    return warnings


def _assumptions(req: CheckpointIntervalIn, m: _Ckpt, versus: str) -> list[str]:
    cur = req.currency
    hours = f"{number_text(m.write * 3600)} s"
    return [
        "Money: exact decimal arithmetic (50 significant digits), rounded half-even to "
        f"0.01 {cur}; intervals in hours rounded to 6 decimals.",
        f"Symbols: T = run_hours = {number_text(m.run)} h (wall-time, taken as fixed); N = "
        f"{req.accelerators} accelerators; price = {req.price_per_accelerator_hour} "
        f"{cur}/accelerator-hour; M = job MTBF = {number_text(m.mtbf)} h"
        + (
            " (accelerator MTBF / N: independent failures, any one stops the job)"
            if req.accelerator_mtbf_hours is not None
            else ""
        )
        + f"; C = checkpoint write time = {hours} = {number_text(m.write)} h; R = restart time = "
        f"{number_text(m.restart)} h; w = {req.write_cost_per_checkpoint} {cur}/checkpoint; G = "
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


@exact
def analyse_checkpoint_interval(req: CheckpointIntervalIn) -> CheckpointIntervalOut:
    """The checkpoint interval that minimises checkpoint cost plus expected rework."""
    req = revalidate(req)
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
    totals = {name: m.total(tau) for name, tau in candidates}
    recommended = min(candidates, key=lambda c: totals[c[0]])[0]  # ties: list order
    versus = "current" if req.current_interval_hours is not None else "young"
    savings = savings_versus(
        recommended,
        totals[recommended],
        versus,
        totals[versus],
        cur,
        f"expected total at the {versus} interval − expected total at the recommended interval",
    )
    best_tau = dict(candidates)[recommended]
    return CheckpointIntervalOut(
        analysis="checkpoint-interval",
        currency=cur,
        options=[_option(m, name, tau, cur) for name, tau in candidates],
        recommended=recommended,
        savings=savings,
        break_even=BreakEven(
            quantity="checkpoint_interval",
            value=number_text(best_tau),
            unit="hours",
            definition="interval at which the marginal checkpoint cost (stall, fees, storage) "
            "equals the marginal expected rework cost: the minimum of the expected total cost",
        ),
        job_mtbf_hours=number_text(m.mtbf),
        young_interval_hours=number_text(young),
        daly_interval_hours=number_text(daly),
        closed_form_interval_hours=number_text(closed),
        grid_optimum_interval_hours=number_text(grid),
        cost_curve=_cost_curve(m, best_tau, totals[recommended], cur),
        warnings=_warnings(m, best_tau, optimum),
        assumptions=_assumptions(req, m, versus),
    )
