"""The cost-effect report's rules, pinned column by column on a small hand-worked project.

The project (costs in nano; the accelerator is gpu.h100.hour):

| experiment | event | time | stage | SKU | quantity | cost |
|---|---|---|---|---|---|---|
| base | b1 | T+1h | pretrain | gpu | 10 h | 25.000000000 |
| base | b2 | T+2h | pretrain | disk | 1 | 1.234567891 |
| mixA | a1 | T+1h | midtrain | gpu | 4 h | 10.000000000 |
| mixA | a2 | T+5h | midtrain | gpu | 2 h | 5.000000001 |
| mixA | a3 | T+9h | eval | gpu | 0.5 h | 1.250000000 |
| mixB | m1 | T+1h | midtrain | gpu | 8 h | 20.000000000 |
| mixD | d1 | T+1h | midtrain | gpu | 12 h | 30.000000000 |

Settings: baseline `base`; gsm8k a target, mmlu general; tolerance 1; mixA planned 3,500
tokens. Results (higher is better unless said): base gsm8k 40.0, mmlu 60.0, eval_loss 2.5
(lower is better); mixA at T+4h gsm8k 45.5, mmlu 59.5 (1,000 tokens), at T+8h gsm8k 52.0,
mmlu 57.0 (3,000 tokens); mixB gsm8k 43.0, mmlu 61.0, eval_loss 2.1; mixD gsm8k 55.0,
mmlu 58.9.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainledger.evaluations.effect import CostEffectReport, ReportFilter, cost_effect
from trainledger.evaluations.model import EvaluationResult, EvaluationSettings
from trainledger.ledger.eventlog import LoggedEvent

T = datetime(2026, 1, 1, tzinfo=UTC)
GPU, DISK = "gpu.h100.hour", "storage.disk"
SETTINGS = EvaluationSettings(
    baseline="base",
    benchmarks={"gsm8k": "target", "mmlu": "general"},
    tolerance="1",
    planned_tokens={"mixA": 3500},
)


def _us(hours: float) -> int:
    return int((T + timedelta(hours=hours)).timestamp() * 1_000_000)


def _ev(
    eid: str, exp: str, hours: float, stage: str, sku: str, q_micro: int, cost: int
) -> LoggedEvent:
    category = "compute" if sku == GPU else "storage"
    owner = "bob" if exp == "mixB" else "alice"
    tags = {"team": "math"} if exp == "mixA" else None
    return LoggedEvent(eid, _us(hours), stage, exp, owner, sku, q_micro, tags, cost, 1, category)


EVENTS = [
    _ev("b1", "base", 1, "pretrain", GPU, 10_000_000, 25_000_000_000),
    _ev("b2", "base", 2, "pretrain", DISK, 1_000_000, 1_234_567_891),
    _ev("a1", "mixA", 1, "midtrain", GPU, 4_000_000, 10_000_000_000),
    _ev("a2", "mixA", 5, "midtrain", GPU, 2_000_000, 5_000_000_001),
    _ev("a3", "mixA", 9, "eval", GPU, 500_000, 1_250_000_000),
    _ev("m1", "mixB", 1, "midtrain", GPU, 8_000_000, 20_000_000_000),
    _ev("d1", "mixD", 1, "midtrain", GPU, 12_000_000, 30_000_000_000),
    _ev("x1", "", 1, "pretrain", GPU, 1_000_000, 7_000_000_000),  # no experiment: not a row
]


def _r(
    rid: str, exp: str, bench: str, value: str, hours: float, tokens: int | None = None
) -> EvaluationResult:
    return EvaluationResult(
        id=rid,
        experiment=exp,
        benchmark=bench,
        value=value,
        higher_is_better=bench != "eval_loss",
        time=T + timedelta(hours=hours),
        tokens_seen=tokens,
    )


RESULTS = [
    _r("r01", "base", "gsm8k", "40.0", 3),
    _r("r02", "base", "mmlu", "60.0", 3),
    _r("r03", "base", "eval_loss", "2.5", 3),
    _r("r04", "mixA", "gsm8k", "45.5", 4, 1000),
    _r("r05", "mixA", "mmlu", "59.5", 4, 1000),
    _r("r06", "mixA", "gsm8k", "52.0", 8, 3000),
    _r("r07", "mixA", "mmlu", "57.0", 8, 3000),
    _r("r08", "mixB", "gsm8k", "43.0", 3),
    _r("r09", "mixB", "mmlu", "61.0", 3),
    _r("r10", "mixB", "eval_loss", "2.1", 3),
    _r("r11", "mixD", "gsm8k", "55.0", 3),
    _r("r12", "mixD", "mmlu", "58.9", 3),
]


def _report(filters: ReportFilter | None = None) -> CostEffectReport:
    return cost_effect("p", "USD", SETTINGS, EVENTS, {GPU}, RESULTS, filters or ReportFilter())


def _row(report: CostEffectReport, name: str):  # type: ignore[no-untyped-def]
    return next(r for r in report.rows if r.experiment == name)


def test_costs_to_the_nano_by_category_and_stage_and_accelerator_hours() -> None:
    report = _report()
    assert [r.experiment for r in report.rows] == ["base", "mixA", "mixB", "mixD"]
    base, mix_a = _row(report, "base"), _row(report, "mixA")
    assert base.is_baseline and not mix_a.is_baseline
    assert base.cost == "26.234567891"
    assert base.cost_by_category == {"compute": "25.00", "storage": "1.234567891"}
    assert base.cost_by_stage == {"pretrain": "26.234567891"}
    assert base.accelerator_hours == "10"
    assert mix_a.cost == "16.250000001"
    assert mix_a.cost_by_stage == {"eval": "1.25", "midtrain": "15.000000001"}
    assert mix_a.accelerator_hours == "6.5"
    assert mix_a.events == 3
    # 26.234567891 + 16.250000001 + 20 + 30: the unlabelled event is no experiment's
    assert report.total_cost == "92.484567892"


def test_latest_values_changes_and_gains_against_the_baseline() -> None:
    report = _report()
    cells = {c.benchmark: c for c in _row(report, "mixA").benchmarks}
    assert cells["gsm8k"].value == "52.0" and cells["gsm8k"].tokens_seen == 3000
    assert (cells["gsm8k"].baseline_value, cells["gsm8k"].change) == ("40.0", "12.0")
    assert (cells["mmlu"].change, cells["mmlu"].gain) == ("-3.0", "-3.0")
    mix_b = {c.benchmark: c for c in _row(report, "mixB").benchmarks}
    # lower is better: 2.1 - 2.5 = -0.4 is a gain of 0.4; undeclared, so "other"
    assert (mix_b["eval_loss"].change, mix_b["eval_loss"].gain) == ("-0.4", "0.4")
    assert mix_b["eval_loss"].kind == "other" and mix_b["eval_loss"].cost_per_point is None
    assert _row(report, "mixA").tokens_seen == 3000
    assert _row(report, "mixB").tokens_seen is None


def test_cost_per_point_on_target_benchmarks() -> None:
    report = _report()

    def cpp(name: str) -> str | None:
        return next(
            c for c in _row(report, name).benchmarks if c.benchmark == "gsm8k"
        ).cost_per_point

    assert cpp("mixA") == "1.354166667"  # 16.250000001 / 12 = 1.35416666675 -> half-even
    assert cpp("mixB") == "6.666666667"  # 20 / 3
    assert cpp("mixD") == "2.00"  # 30 / 15
    assert cpp("base") is None  # no gain over itself
    mmlu = next(c for c in _row(report, "mixB").benchmarks if c.benchmark == "mmlu")
    assert mmlu.gain == "1.0" and mmlu.cost_per_point is None  # general: no cost per point


def test_regressions_and_rework_exposure() -> None:
    report = _report()
    mix_a, mix_b, mix_d = (_row(report, n) for n in ("mixA", "mixB", "mixD"))
    # mixA: mmlu -3 < -1. Its last mmlu within tolerance (59.5, gain -0.5) was at T+4h: the
    # runs after it (a2 at T+5h: 5.000000001, a3 at T+9h: 1.25) would be redone.
    assert mix_a.regressions == ["mmlu"]
    assert mix_a.rework_since == T + timedelta(hours=4)
    assert mix_a.rework_exposure == "6.250000001"
    # mixD: mmlu -1.1 < -1, never within tolerance: all of its cost
    assert mix_d.regressions == ["mmlu"]
    assert (mix_d.rework_exposure, mix_d.rework_since) == ("30.00", None)
    assert mix_b.regressions == [] and mix_b.rework_exposure is None


def test_usage_that_began_at_the_last_good_checkpoint_is_rework() -> None:
    # An event's time is when its usage began: a4 began at T+4h, the time of mixA's last good
    # mmlu result, so it ran after that checkpoint and would be redone with a2 and a3.
    at_checkpoint = _ev("a4", "mixA", 4, "midtrain", GPU, 1_000_000, 2_500_000_000)
    just_before = _ev("a0", "mixA", 3.999, "midtrain", GPU, 1_000_000, 2_500_000_000)
    events = [*EVENTS, at_checkpoint, just_before]
    report = cost_effect("p", "USD", SETTINGS, events, {GPU}, RESULTS, ReportFilter())
    assert _row(report, "mixA").rework_exposure == "8.750000001"  # 6.250000001 + 2.5


def test_a_fall_of_exactly_the_tolerance_is_no_regression() -> None:
    results = [*RESULTS, _r("r13", "mixB", "mmlu", "59.0", 4)]  # gain -1.0 == -tolerance
    report = cost_effect("p", "USD", SETTINGS, EVENTS, {GPU}, results, ReportFilter())
    assert _row(report, "mixB").regressions == []


def test_pareto_front_per_target_benchmark() -> None:
    report = _report()
    (front,) = report.fronts
    assert front.benchmark == "gsm8k" and front.higher_is_better
    # mixA (16.25, 52) dominates base (26.23, 40) and mixB (20, 43); mixD (30, 55) scores more
    assert [(p.experiment, p.cost, p.value) for p in front.experiments] == [
        ("mixA", "16.250000001", "52.0"),
        ("mixD", "30.00", "55.0"),
    ]
    on = {
        r.experiment: next(c.on_front for c in r.benchmarks if c.benchmark == "gsm8k")
        for r in report.rows
    }
    assert on == {"base": False, "mixA": True, "mixB": False, "mixD": True}


def test_equal_points_are_both_on_the_front() -> None:
    results = [*RESULTS, _r("r14", "mixB", "gsm8k", "52.0", 9)]
    events = [e for e in EVENTS if e.experiment != "mixB"]
    events.append(_ev("m1", "mixB", 1, "midtrain", GPU, 1, 16_250_000_001))
    report = cost_effect("p", "USD", SETTINGS, events, {GPU}, results, ReportFilter())
    assert [p.experiment for p in report.fronts[0].experiments] == ["mixA", "mixB", "mixD"]


def test_forecast_at_completion_from_tokens_seen() -> None:
    report = _report()
    mix_a = _row(report, "mixA")
    # 16.250000001 x 3500 / 3000 = 18.9583333345 nano-exact: a tie, to even
    assert (mix_a.planned_tokens, mix_a.running) == (3500, True)
    assert mix_a.forecast_cost_at_completion == "18.958333334"
    assert _row(report, "mixB").forecast_cost_at_completion is None
    done = EvaluationSettings(baseline="base", planned_tokens={"mixA": 3000})
    finished = cost_effect("p", "USD", done, EVENTS, {GPU}, RESULTS, ReportFilter())
    assert _row(finished, "mixA").running is False
    assert _row(finished, "mixA").forecast_cost_at_completion == "16.250000001"


def test_filters_by_stage_owner_tag_and_time() -> None:
    by_stage = _report(ReportFilter(stage="midtrain"))
    assert [r.experiment for r in by_stage.rows] == ["mixA", "mixB", "mixD"]
    assert _row(by_stage, "mixA").cost == "15.000000001"
    assert [r.experiment for r in _report(ReportFilter(owner="bob")).rows] == ["mixB"]
    assert [r.experiment for r in _report(ReportFilter(tags={"team": "math"})).rows] == ["mixA"]
    early = _report(ReportFilter(time_to=T + timedelta(hours=6)))
    mix_a = _row(early, "mixA")
    assert mix_a.cost == "15.000000001"  # a3 (T+9h) is after the range
    assert {c.benchmark: c.value for c in mix_a.benchmarks} == {"gsm8k": "45.5", "mmlu": "59.5"}
    assert mix_a.regressions == []
    late = _report(ReportFilter(time_from=T + timedelta(hours=4)))
    assert [r.experiment for r in late.rows] == ["mixA"]  # the only events and results after
    assert _row(late, "mixA").cost == "6.250000001"


def test_latest_result_ties_go_to_the_greatest_id() -> None:
    results = [_r("z", "mixB", "gsm8k", "1.0", 3), _r("a", "mixB", "gsm8k", "9.0", 3)]
    report = cost_effect("p", "USD", SETTINGS, [], set(), results, ReportFilter())
    assert [c.value for c in _row(report, "mixB").benchmarks] == ["1.0"]
    assert _row(report, "mixB").cost == "0.00"
