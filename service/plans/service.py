"""Plans over storage: estimate, register (with their budgets), progress, plan vs actual.

Plan against actual follows earned-value management: for each stage the budget at completion
(BAC) is its planned total with contingency, the earned value is ``EV = BAC × fraction done``,
the actual cost ``AC`` is what the ledger holds for that stage within the plan's window, the cost
performance index is ``CPI = EV / AC``, and the forecast at completion is
``EAC = BAC / CPI = AC / fraction done``. A stage with no progress reported yet is forecast at
``max(BAC, AC)``; a finished stage (fraction 1) at its actual cost. Variance = ``BAC − EAC``
(negative: over plan).
"""

from __future__ import annotations

import secrets
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated

import msgspec

from costcore import format_money, round_half_even_div
from costcore.money import parse_money

from ..budgets.model import BudgetIn
from ..budgets.service import create_budget, list_budgets, set_earned
from ..costs.report import cost_report
from ..errors import NotFound
from ..events.model import DECIMAL_PATTERN
from ..ratecards.catalog import PricingCatalog, RateCards
from .estimate import estimate_plan
from .model import PlanError, PlanEstimate, PlanIn, StageEstimate

if TYPE_CHECKING:
    from ..stores import Stores


class PlanRecord(msgspec.Struct, kw_only=True):
    """A registered plan: its body, the estimate made when it was registered, and the budgets
    created for it."""

    id: str
    created_at: datetime
    plan: PlanIn
    estimate: PlanEstimate
    budget_ids: list[str]


class ProgressIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Progress of one stage, from the training job. Give `tokens_done` or `fraction_done`."""

    stage: str | None = None  # stage name, when it names one stage of the plan
    stage_index: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tokens_done: Annotated[int, msgspec.Meta(ge=0)] | None = None
    fraction_done: Annotated[str, msgspec.Meta(pattern=DECIMAL_PATTERN)] | None = None


class ProgressRecord(msgspec.Struct, kw_only=True):
    """A stage's progress as recorded: the fraction done and, when given, the tokens done."""

    stage_index: int
    fraction: str
    tokens_done: int | None
    reported_at: datetime


class StageStatus(msgspec.Struct, kw_only=True):
    """Plan against actual for one stage: planned and actual cost, fraction done, earned value and
    cost performance index."""

    index: int
    stage: str
    label: str | None
    planned: str
    actual: str
    fraction_done: str | None
    earned_value: str | None
    cpi: str | None
    forecast_at_completion: str
    variance: str
    planned_by_category: dict[str, str]


class PlanStatus(msgspec.Struct, kw_only=True):
    """Answer of `GET /v1/plans/{plan_id}/status`: plan against actual, in total and by stage."""

    plan_id: str
    project: str
    currency: str
    window_start: datetime
    window_end: datetime
    as_of: datetime
    planned: str
    actual: str
    actual_by_category: dict[str, str]
    actual_outside_plan_stages: str
    burn_rate_per_day: str
    elapsed_days: str
    forecast_at_completion: str
    variance: str
    stages: list[StageStatus]
    method: str


class PlanNotFound(NotFound):
    def __init__(self, project: str, plan_id: str) -> None:
        super().__init__(plan_id)
        self.project = project
        self.plan_id = plan_id

    def problem_detail(self) -> str:
        return f"no plan {self.plan_id!r} in {self.project!r}"


def _nano(text: str) -> int:
    return parse_money(Decimal(text))


async def _catalog(rate_cards: RateCards, plan: PlanIn) -> PricingCatalog:
    catalog = await rate_cards.catalog(plan.rate_card)
    if catalog is None:
        raise PlanError("$.rate_card", f"no rate card named {plan.rate_card!r}")
    return catalog


async def estimate(rate_cards: RateCards, plan: PlanIn) -> PlanEstimate:
    """Price a plan with the rate-card version in effect at the plan's start (else the latest)."""
    catalog = await _catalog(rate_cards, plan)
    index = catalog.history.index_at(plan.window_start)
    if index < 0:
        index = len(catalog.history.versions) - 1
    version = catalog.history.versions[index]
    return estimate_plan(plan, catalog.history.priced(index), card_currency=version.currency)


async def register(store: Stores, rate_cards: RateCards, plan: PlanIn) -> PlanRecord:
    """Save a plan and create its budgets: the whole plan, and each stage, over its window."""
    result = await estimate(rate_cards, plan)
    window = {
        "period": "window",
        "window_start": plan.window_start,
        "window_end": plan.window_end,
    }
    plan_id = "pln_" + secrets.token_hex(6)
    budget_ids = []
    whole = await create_budget(
        store,
        msgspec.convert(
            {
                "project": plan.project,
                "name": f"plan {plan.name}",
                "amount": result.total,
                "forecast": {"min_elapsed_pct": 10},
                "plan_id": plan_id,
                **window,
            },
            BudgetIn,
        ),
        plan.currency,
    )
    budget_ids.append(whole.id)
    per_stage: dict[str, int] = {}
    for stage in result.stages:
        per_stage[stage.stage] = per_stage.get(stage.stage, 0) + _nano(stage.total)
    for stage_name, amount in per_stage.items():
        if amount == 0:
            continue
        budget = await create_budget(
            store,
            msgspec.convert(
                {
                    "project": plan.project,
                    "name": f"plan {plan.name} / {stage_name}",
                    "amount": format_money(amount),
                    "scope": {"stage": stage_name},
                    "plan_id": plan_id,
                    **window,
                },
                BudgetIn,
            ),
            plan.currency,
        )
        budget_ids.append(budget.id)
    record = PlanRecord(
        id=plan_id,
        created_at=datetime.now(UTC),
        plan=plan,
        estimate=result,
        budget_ids=budget_ids,
    )
    await store.plans.put_plan(plan.project, plan_id, msgspec.json.encode(record))
    return record


async def load(store: Stores, project: str, plan_id: str) -> PlanRecord:
    raw = await store.plans.plan(project, plan_id)
    if raw is None:
        raise PlanNotFound(project, plan_id)
    return msgspec.json.decode(raw, type=PlanRecord)


async def list_plans(store: Stores, project: str) -> list[PlanRecord]:
    return [msgspec.json.decode(raw, type=PlanRecord) for raw in await store.plans.plans(project)]


def _stage_index(record: PlanRecord, progress: ProgressIn) -> int:
    stages = record.plan.stages
    if progress.stage_index is not None:
        if progress.stage_index >= len(stages):
            raise PlanError("$.stage_index", f"the plan has {len(stages)} stages")
        return progress.stage_index
    if progress.stage is None:
        raise PlanError("$.stage", "name the stage (stage or stage_index)")
    matches = [i for i, s in enumerate(stages) if s.stage == progress.stage]
    if not matches:
        raise PlanError("$.stage", f"the plan has no stage {progress.stage!r}")
    if len(matches) > 1:
        raise PlanError(
            "$.stage", f"the plan has several {progress.stage!r} stages: use stage_index"
        )
    return matches[0]


async def report_progress(
    store: Stores, record: PlanRecord, progress: ProgressIn
) -> ProgressRecord:
    index = _stage_index(record, progress)
    stage = record.plan.stages[index]
    if (progress.tokens_done is None) == (progress.fraction_done is None):
        raise PlanError("$", "give exactly one of tokens_done and fraction_done")
    if progress.tokens_done is not None:
        if stage.model is None:
            raise PlanError("$.tokens_done", "this stage was not planned in tokens")
        fraction = Fraction(progress.tokens_done, stage.model.tokens)
    else:
        try:
            fraction = Fraction(Decimal(progress.fraction_done or "0"))
        except InvalidOperation as exc:
            raise PlanError("$.fraction_done", "not a decimal") from exc
    if fraction > 1:
        raise PlanError("$", "progress cannot pass 100 % of the stage")
    scaled = round_half_even_div(fraction.numerator * 10**6, fraction.denominator)
    record_out = ProgressRecord(
        stage_index=index,
        fraction=f"{scaled // 10**6}.{scaled % 10**6:06d}",
        tokens_done=progress.tokens_done,
        reported_at=datetime.now(UTC),
    )
    await store.plans.put_progress(
        record.plan.project, {f"{record.id}|{index}": msgspec.json.encode(record_out)}
    )
    await _set_budgets_earned(store, record)
    return record_out


def earned_fraction(
    record: PlanRecord, progress: dict[int, ProgressRecord], stage: str | None
) -> str | None:
    """The fraction done, by earned value, of the plan's stages named `stage` (all of them for
    None): their earned value over their planned cost, ``Σ BAC × done / Σ BAC``, to 9 places.
    None when none of them has reported progress."""
    stages = [s for s in record.estimate.stages if stage is None or s.stage == stage]
    if not any(s.index in progress for s in stages):
        return None
    planned = sum(_nano(s.total) for s in stages)
    if planned == 0:
        return None
    earned = sum(
        _nano(s.total) * Fraction(Decimal(progress[s.index].fraction))
        for s in stages
        if s.index in progress
    )
    scaled = round_half_even_div((earned * 10**9).numerator, (earned * 10**9).denominator * planned)
    return f"{scaled // 10**9}.{scaled % 10**9:09d}"


async def _progress(store: Stores, record: PlanRecord) -> dict[int, ProgressRecord]:
    return {
        int(k.split("|", 1)[1]): msgspec.json.decode(v, type=ProgressRecord)
        for k, v in (await store.plans.progress(record.plan.project, record.id)).items()
    }


async def _set_budgets_earned(store: Stores, record: PlanRecord) -> None:
    """Give the plan's budgets the fraction of their scope done, which their forecasts read
    (service/budgets/model.py): the whole plan's, or their stage's."""
    progress = await _progress(store, record)
    earned = {
        b.id: earned_fraction(record, progress, b.scope.stage)
        for b in await list_budgets(store, record.plan.project)
        if b.plan_id == record.id
    }
    await set_earned(store, record.plan.project, earned)


def _ratio(num: int, den: int) -> str:
    scaled = round_half_even_div(num * 10_000, den)
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


async def _actuals(store: Stores, plan: PlanIn) -> tuple[dict[str, int], dict[str, int]]:
    """The cost (nano) the ledger holds within the plan's window, by stage and by category."""
    first: date = plan.window_start.astimezone(UTC).date()
    last: date = (plan.window_end.astimezone(UTC) - timedelta(microseconds=1)).date()
    report = await cost_report(
        store, plan.project, first, last + timedelta(days=1), ["stage", "category"], {}, 0, 10_000
    )
    actual_stage: dict[str, int] = {}
    actual_category: dict[str, int] = {}
    for row in report.rows:
        cost = _nano(row.cost)
        actual_stage[row.key["stage"]] = actual_stage.get(row.key["stage"], 0) + cost
        actual_category[row.key["category"]] = actual_category.get(row.key["category"], 0) + cost
    return actual_stage, actual_category


def _stage_status(
    s: StageEstimate, name_plan: int, name_actual: int, done: ProgressRecord | None
) -> tuple[StageStatus, int]:
    """One plan stage against its share of its name's actual cost; and its EAC (nano)."""
    bac = _nano(s.total)
    ac = round_half_even_div(name_actual * bac, name_plan) if name_plan else name_actual
    fraction = Fraction(Decimal(done.fraction)) if done else None
    if fraction is None or fraction == 0:
        eac = max(bac, ac)
        ev = cpi = None
    else:
        ev_exact = bac * fraction
        eac = round_half_even_div(ac * fraction.denominator, fraction.numerator)
        ev = round_half_even_div(ev_exact.numerator, ev_exact.denominator)
        cpi = _ratio(ev, ac) if ac else None
    by_category: dict[str, int] = {}
    for line in s.lines:
        by_category[line.category] = by_category.get(line.category, 0) + _nano(line.cost)
    status = StageStatus(
        index=s.index,
        stage=s.stage,
        label=s.label,
        planned=s.total,
        actual=format_money(ac),
        fraction_done=done.fraction if done else None,
        earned_value=format_money(ev) if ev is not None else None,
        cpi=cpi,
        forecast_at_completion=format_money(eac),
        variance=format_money(bac - eac),
        planned_by_category={k: format_money(v) for k, v in sorted(by_category.items())},
    )
    return status, eac


async def plan_status(store: Stores, record: PlanRecord, now: datetime | None = None) -> PlanStatus:
    now = now or datetime.now(UTC)
    plan, est = record.plan, record.estimate
    actual_stage, actual_category = await _actuals(store, plan)
    progress = await _progress(store, record)
    # Several plan stages may share a stage name; the ledger's actuals are per name, so a
    # name's actual cost is shared among its plan stages in proportion to their plan.
    planned_by_name: dict[str, int] = {}
    for s in est.stages:
        planned_by_name[s.stage] = planned_by_name.get(s.stage, 0) + _nano(s.total)
    stages: list[StageStatus] = []
    total_eac = 0
    for s in est.stages:
        status, eac = _stage_status(
            s, planned_by_name[s.stage], actual_stage.get(s.stage, 0), progress.get(s.index)
        )
        stages.append(status)
        total_eac += eac
    actual_total = sum(actual_stage.values())
    outside = sum(v for k, v in actual_stage.items() if k not in planned_by_name)
    total_eac += outside
    start = plan.window_start.astimezone(UTC)
    elapsed = max(min(now, plan.window_end) - start, timedelta(0))
    elapsed_us = elapsed // timedelta(microseconds=1)
    burn = round_half_even_div(actual_total * 86_400_000_000, elapsed_us) if elapsed_us else 0
    planned_total = _nano(est.total)
    return PlanStatus(
        plan_id=record.id,
        project=plan.project,
        currency=plan.currency,
        window_start=plan.window_start,
        window_end=plan.window_end,
        as_of=now,
        planned=est.total,
        actual=format_money(actual_total),
        actual_by_category={k: format_money(v) for k, v in sorted(actual_category.items())},
        actual_outside_plan_stages=format_money(outside),
        burn_rate_per_day=format_money(burn),
        elapsed_days=_ratio(elapsed_us, 86_400_000_000),
        forecast_at_completion=format_money(total_eac),
        variance=format_money(planned_total - total_eac),
        stages=stages,
        method=(
            "earned value: EV = BAC × fraction done, CPI = EV / AC, EAC = AC / fraction done; "
            "no progress yet: EAC = max(BAC, AC); spend in stages the plan does not name is "
            "added to the forecast as is"
        ),
    )


async def status_of_plan(store: Stores, project: str, plan_id: str) -> PlanStatus:
    """The plan against its actual spend now. Raises PlanNotFound."""
    return await plan_status(store, await load(store, project, plan_id))


async def report_plan_progress(
    store: Stores, project: str, plan_id: str, progress: ProgressIn
) -> ProgressRecord:
    """Raises PlanNotFound, or PlanError for a report that does not fit the plan."""
    return await report_progress(store, await load(store, project, plan_id), progress)
