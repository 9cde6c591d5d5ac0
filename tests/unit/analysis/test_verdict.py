"""The cost-per-point verdict and its scale-up figures, worked by hand on report rows.

A small study: baseline `base`, target benchmark `math`, general benchmark `qa`, tolerance 1.

| option | cost   | tokens | math gain | qa gain | exposure | cost/point         |
|--------|--------|--------|-----------|---------|----------|--------------------|
| a      | 100.00 | 1000   | +20       | −0.5    |          | 100 / 20 = 5.00    |
| b      |  60.00 |  500   | +15       | −3 (reg)|    24.00 |  60 / 15 = 4.00    |
| c      |  90.00 | 1000   | +10       | +1      |          |  90 / 10 = 9.00    |
| d      |  30.00 | 1000   |  −2       |  0      |          | none (no gain)     |
"""

from __future__ import annotations

from datetime import UTC, datetime

from trainledger.analysis.verdict import Scale, Verdict, cost_per_point_verdict
from trainledger.evaluations.effect import BenchmarkCell, ExperimentRow

T = datetime(2026, 11, 20, tzinfo=UTC)


def cell(benchmark: str, kind: str, gain: str | None) -> BenchmarkCell:
    return BenchmarkCell(
        benchmark=benchmark,
        kind=kind,
        value="0",
        higher_is_better=True,
        time=T,
        step=None,
        tokens_seen=None,
        baseline_value=None if gain is None else "0",
        change=gain,
        gain=gain,
        cost_per_point=None,
        regression=False,
        on_front=False,
    )


def row(
    name: str,
    cost: str,
    tokens: int | None,
    math: str | None,
    qa: str | None = "0",
    exposure: str | None = None,
) -> ExperimentRow:
    cells = [cell("math", "target", math)] if math is not None else []
    if qa is not None:
        cells.append(cell("qa", "general", qa))
    return ExperimentRow(
        experiment=f"exp-{name}",
        is_baseline=False,
        cost=cost,
        cost_by_category={},
        cost_by_stage={},
        events=1,
        accelerator_hours="0",
        tokens_seen=tokens,
        benchmarks=cells,
        regressions=["qa"] if exposure is not None else [],
        rework_exposure=exposure,
        rework_since=None,
        planned_tokens=None,
        running=None,
        forecast_cost_at_completion=None,
    )


A = row("a", "100.00", 1000, "20", "-0.5")
B = row("b", "60.00", 500, "15", "-3", exposure="24.00")
C = row("c", "90.00", 1000, "10", "1")
D = row("d", "30.00", 1000, "-2")


def verdict(
    rows: dict[str, ExperimentRow],
    scale: int | None = 10_000,
    planned: dict[str, int] | None = None,
    targets: tuple[str, ...] = ("math",),
) -> Verdict:
    return cost_per_point_verdict(
        list(rows.items()), list(targets), Scale(scale, planned or {}), "USD", "base", "1"
    )


def test_the_lowest_cost_per_point_without_a_regression_wins() -> None:
    v = verdict({"a": A, "b": B, "c": C, "d": D})
    assert (v.winner, v.runner_up) == ("a", "c")
    assert [o.name for o in v.options] == ["a", "c", "b", "d"]  # eligible, regressing, no gain
    by = {o.name: o for o in v.options}
    assert {n: o.status for n, o in by.items()} == {
        "a": "eligible",
        "b": "regresses",
        "c": "eligible",
        "d": "no_gain",
    }
    assert {n: o.cost_per_point for n, o in by.items()} == {
        "a": "5.00",
        "b": "4.00",
        "c": "9.00",
        "d": None,
    }
    assert by["a"].points == "20" and by["d"].points == "-2"
    assert by["a"].general_gains == {"qa": "-0.5"}  # a drop within the tolerance: no regression
    assert v.scale_tokens == 10_000 and v.scale_tokens_source == "request: scale_tokens"
    # cost × 10 000 ÷ tokens seen: 100 × 10, 60 × 20, 90 × 10; exposure 24 × 20
    assert by["a"].cost_at_scale == "1000.00" and by["a"].rework_exposure_at_scale is None
    assert by["b"].cost_at_scale == "1200.00" and by["b"].rework_exposure_at_scale == "480.00"
    assert by["c"].cost_at_scale == "900.00"
    assert by["a"].cost_per_token == "0.1" and by["b"].cost_per_token == "0.12"
    assert v.reason == (
        "a wins: 5.00 USD per point over 20 points, the lowest cost per point among options "
        "without a general regression; runner-up c at 9.00 USD per point"
    )
    assert v.summary == (
        v.reason + ". At 10,000 tokens a would cost 1,000.00 USD. At 10,000 tokens c would cost "
        "900.00 USD. At 10,000 tokens b would cost 1,200.00 USD (cheaper per point, 4.00 USD, but "
        "it regresses qa), 480.00 USD of it at risk of rework."
    )


def test_a_regressing_runner_up_and_its_exposure() -> None:
    v = verdict({"b": B, "a": A})
    assert (v.winner, v.runner_up) == ("a", "b")
    assert v.reason.endswith("runner-up b at 4.00 USD per point, but it regresses qa")


def test_ties_go_to_the_larger_gain_then_the_lower_cost_then_request_order() -> None:
    half = row("h", "50.00", 1000, "10")  # 5.00 a point, as a, over 10 points
    v = verdict({"h": half, "a": A})
    assert (v.winner, v.runner_up) == ("a", "h")
    assert "(a tie on cost per point: the larger gain wins)" in v.reason
    twin = row("t", "100.00", 1000, "20")
    assert verdict({"t": twin, "a": A}).winner == "t"  # equal in all: request order


def test_no_gain_no_winner() -> None:
    v = verdict({"d": D, "e": row("e", "10.00", 100, "0")})
    assert v.winner is None and v.runner_up is None
    assert v.reason == "no winner: no option gains over the baseline on the target benchmarks"
    assert v.summary == v.reason + "."


def test_every_gaining_option_regresses_no_winner() -> None:
    v = verdict({"b": B, "d": D})
    assert v.winner is None and v.runner_up is None
    assert v.reason.startswith("no winner: every option that gains regresses")
    assert "the cheapest per point, b (4.00 USD per point), regresses qa" in v.reason
    assert v.summary.endswith("b would cost 1,200.00 USD, 480.00 USD of it at risk of rework.")


def test_an_option_with_no_positive_cost_does_not_win() -> None:
    # Results but no usage under the experiment (cost 0), or credits above its usage: a cost
    # per point of 0 or less would win on a gap in the data.
    free = row("f", "0", 1000, "30")
    credited = row("n", "-5.00", 1000, "30")
    v = verdict({"f": free, "n": credited, "c": C})
    assert (v.winner, v.runner_up) == ("c", None)
    by = {o.name: o for o in v.options}
    assert by["f"].status == by["n"].status == "no_cost"
    assert by["f"].cost_per_point is None and by["n"].cost_per_point is None
    alone = verdict({"f": free})
    assert alone.winner is None
    assert alone.reason.startswith("no winner: f gains but has no positive cost in the ledger")


def test_a_missing_target_result_is_incomplete() -> None:
    v = verdict({"x": row("x", "10.00", 100, None), "a": A})
    assert [(o.name, o.status, o.points) for o in v.options] == [
        ("a", "eligible", "20"),
        ("x", "incomplete", None),
    ]
    v = verdict({"a": A}, targets=())
    assert v.winner is None and v.reason.startswith("no winner: no option has a gain on every")


def test_points_sum_over_the_target_benchmarks() -> None:
    two = row("two", "30.00", 1000, "2")
    two.benchmarks.append(cell("code", "target", "4"))
    v = verdict({"two": two}, targets=("math", "code"))
    assert v.options[0].target_gains == {"math": "2", "code": "4"}
    assert v.options[0].points == "6" and v.options[0].cost_per_point == "5.00"


def test_scale_defaults_to_the_winners_planned_tokens() -> None:
    v = verdict({"a": A, "c": C}, scale=None, planned={"exp-a": 3000, "exp-c": 1})
    assert v.scale_tokens == 3000
    assert v.scale_tokens_source == "evaluation settings: planned_tokens of exp-a"
    assert [o.cost_at_scale for o in v.options] == ["300.00", "270.00"]  # same scale for both
    v = verdict({"a": A}, scale=None)
    assert v.scale_tokens is None and v.options[0].cost_at_scale is None
    assert v.summary.endswith("No scale-up figures: give scale_tokens, or declare planned_tokens.")


def test_rounding_is_half_even_to_the_nano() -> None:
    # 0.000000010 over 4 points: 2.5 nano a point -> 2; 5 nano × 1 ÷ 2 tokens: 2.5 -> 2
    tiny = row("tiny", "0.00000001", 2, "4")
    v = verdict({"tiny": tiny}, scale=1)
    assert v.options[0].cost_per_point == "0.000000002"
    assert v.options[0].cost_at_scale == "0.000000005"  # 10 nano × 1 ÷ 2 = 5 exactly
    odd = row("odd", "0.000000005", 2, "1")
    v = verdict({"odd": odd}, scale=1)
    assert v.options[0].cost_at_scale == "0.000000002"  # 2.5 nano -> 2 (even)
    assert v.options[0].cost_per_token == "0.0000000025"
    no_tokens = row("n", "10.00", None, "1")
    v = verdict({"n": no_tokens})
    assert v.options[0].cost_at_scale is None and v.options[0].cost_per_token is None
    assert "n reports no tokens seen: it cannot be scaled." in v.summary


def test_gains_keep_every_digit() -> None:
    # 24 integer and 24 decimal digits: more than the default 28-digit context holds
    long = "123456789012345678901234.123456789012345678901234"
    v = verdict({"l": row("l", "1.00", 1, long)})
    assert v.options[0].points == long and v.options[0].target_gains == {"math": long}
