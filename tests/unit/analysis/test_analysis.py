"""Design-decision analyses (`service/analysis/`: one module per analysis, `registry.ANALYSES`).

Every scenario below is built by hand: its expected answers are worked out in the comments
from the inputs and the documented formulas, never copied from the function's output.
Requests are built from JSON-like dicts through `msgspec.convert`, as the HTTP layer will.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from trainledger.analysis.arithmetic import AnalysisError
from trainledger.analysis.checkpoint_interval import (
    CheckpointIntervalIn,
    analyse_checkpoint_interval,
    checkpoint_total_cost,
)
from trainledger.analysis.data_strategy import DataStrategyIn, analyse_data_strategy
from trainledger.analysis.domain_mix import DomainMixIn, analyse_domain_mix
from trainledger.analysis.registry import ANALYSES
from trainledger.analysis.storage_lifecycle import StorageLifecycleIn, analyse_storage_lifecycle


def _d(value: Decimal) -> str:
    """A Decimal as a plain decimal string (no exponent), as the request patterns require."""
    return f"{value:f}"


def _option(out: Any, name: str) -> Any:
    return next(o for o in out.options if o.name == name)


def _line(option: Any, item: str) -> str:
    return str(next(line.value for line in option.breakdown if line.item == item))


# ======================================================================================
# data-strategy
# ======================================================================================


def _data(**overrides: Any) -> DataStrategyIn:
    body: dict[str, Any] = {
        "corpus_tokens": 2_000_000_000_000,
        "flat_keep_share": "0.3",
        "upsampling_curve": [
            {"share": "0.1", "repeats": "4", "label": "top"},
            {"share": "0.3", "repeats": "1", "label": "middle"},
            {"share": "0.6", "repeats": "0", "label": "bottom"},
        ],
        "training_cost_per_token": "0.0000005",
        "scoring_cost_per_token": "0.00000001",
        "flat_tokens_needed": 1_200_000_000_000,
        "upsampled_tokens_needed": 1_000_000_000_000,
    }
    body.update(overrides)
    return msgspec.convert({k: v for k, v in body.items() if v is not None}, DataStrategyIn)


def test_data_strategy_upsampling_wins_with_explicit_tokens() -> None:
    out = analyse_data_strategy(
        _data(unfiltered_tokens_needed=1_600_000_000_000, max_token_repetitions="4")
    )
    flat, up, raw = (_option(out, n) for n in ("flat", "upsampled", "unfiltered"))
    # Scoring, both scored strategies: 2e12 tokens × 1e-8 USD/token = 20 000 USD.
    assert flat.scoring_cost == up.scoring_cost == "20000.00"
    assert raw.scoring_cost == "0.00"
    # Flat: kept = 2e12 × 0.3 = 6e11 tokens; 1.2e12 training tokens → 1.2e12 / 6e11 = 2 epochs.
    # Training 1.2e12 × 5e-7 = 600 000; total 620 000.
    assert _line(flat, "kept_tokens") == "600000000000"
    assert flat.max_token_repetitions == "2"
    assert (flat.training_cost, flat.total_cost) == ("600000.00", "620000.00")
    # Upsampled: one pass = 2e12 × (0.1×4 + 0.3×1 + 0.6×0) = 2e12 × 0.7 = 1.4e12 tokens;
    # 1e12 tokens = 1/1.4 = 0.714286 passes; top bucket seen 4/1.4 = 2.857143 times.
    # Training 1e12 × 5e-7 = 500 000; total 520 000.
    assert _line(up, "tokens_per_pass") == "1400000000000"
    assert _line(up, "passes") == "0.714286"
    assert up.max_token_repetitions == "2.857143"
    assert (up.training_cost, up.total_cost) == ("500000.00", "520000.00")
    # Unfiltered: 1.6e12 × 5e-7 = 800 000, no scoring; 1.6e12 / 2e12 = 0.8 epochs.
    assert (raw.total_cost, raw.max_token_repetitions) == ("800000.00", "0.8")
    assert all(o.feasible for o in out.options)  # all ≤ 4 repetitions

    assert out.recommended == "upsampled"
    # Savings vs the next cheapest (flat): 620 000 − 520 000 = 100 000; 100 000 / 620 000
    # = 16.129…% → 16.13.
    assert out.savings is not None
    assert (out.savings.versus, out.savings.amount, out.savings.percent) == (
        "flat",
        "100000.00",
        "16.13",
    )
    # Break-even scoring rate for upsampled vs flat: 1e-8 + 100 000 / 2e12 = 1e-8 + 5e-8 = 6e-8.
    assert out.break_even.quantity == "scoring_cost_per_token"
    assert (out.break_even.value, out.break_even.unit) == ("0.00000006", "USD/token")
    assert out.affordable_scoring_overhead_per_token == "0.00000005"
    assert out.affordable_scoring_overhead_total == "100000.00"
    # Versus not scoring: (800 000 − 500 000) / 2e12 = 1.5e-7 USD/token.
    assert out.break_even_vs_unfiltered is not None
    assert out.break_even_vs_unfiltered.value == "0.00000015"
    assert out.scoring_cost_per_token == "0.00000001"
    assert any("Σ(share × repeats)" in a for a in out.assumptions)


def _pilot_request(**overrides: Any) -> DataStrategyIn:
    body: dict[str, Any] = {
        "corpus_tokens": 1_000_000_000_000,
        "flat_keep_share": "0.2",
        "upsampling_curve": [{"share": "0.5", "repeats": "2"}, {"share": "0.5", "repeats": "0"}],
        "training_cost_per_token": "0.000001",
        "scoring_sku": {
            "code": "gpu.h100.hour",
            "unit": "hour",
            "unit_price": "3.00",
            "tokens_per_unit": "300000000",
        },
        "pilot_results": [
            {"strategy": "flat", "tokens": 1_000_000_000, "score": "40"},
            {"strategy": "flat", "tokens": 4_000_000_000, "score": "52"},
            {"strategy": "flat", "tokens": 2_000_000_000, "score": "48"},
            {"strategy": "upsampled", "tokens": 1_000_000_000, "score": "45"},
            {"strategy": "upsampled", "tokens": 2_000_000_000, "score": "55"},
        ],
        "target_score": "50",
        "pilot_token_scale": "200",
        "max_token_repetitions": "4",
    }
    body.update(overrides)
    return msgspec.convert({k: v for k, v in body.items() if v is not None}, DataStrategyIn)


def test_data_strategy_from_pilot_runs_and_a_scoring_sku() -> None:
    out = analyse_data_strategy(_pilot_request())
    # SKU: 3.00 USD/hour / 3e8 tokens/hour = 1e-8 USD/token; scoring = 1e12 × 1e-8 = 10 000.
    assert out.scoring_cost_per_token == "0.00000001"
    flat, up = _option(out, "flat"), _option(out, "upsampled")
    # Flat pilots sorted: (1e9, 40), (2e9, 48), (4e9, 52); target 50 first reached at 4e9:
    # 2e9 + (50 − 48) × (4e9 − 2e9) / (52 − 48) = 2e9 + 1e9 = 3e9 pilot tokens; × 200 = 6e11.
    assert flat.training_tokens == 600_000_000_000
    # Upsampled: 1e9 + (50 − 45) × 1e9 / (55 − 45) = 1.5e9; × 200 = 3e11.
    assert up.training_tokens == 300_000_000_000
    assert "interpolated" in flat.tokens_needed_source
    # Flat: kept 2e11 → 6e11 / 2e11 = 3 repetitions; training 6e11 × 1e-6 = 600 000 → 610 000.
    # Upsampled: pass = 1e12 × 1 = 1e12; 0.3 passes × 2 = 0.6 repetitions; 300 000 → 310 000.
    assert (flat.max_token_repetitions, flat.total_cost) == ("3", "610000.00")
    assert (up.max_token_repetitions, up.total_cost) == ("0.6", "310000.00")
    assert out.recommended == "upsampled"
    assert out.savings is not None and out.savings.amount == "300000.00"
    # Break-even: 1e-8 + 300 000 / 1e12 = 1e-8 + 3e-7 = 3.1e-7 USD/token.
    assert out.break_even.value == "0.00000031"
    assert out.affordable_scoring_overhead_per_token == "0.0000003"
    assert out.break_even_vs_unfiltered is None
    assert any("interpolated linearly" in a for a in out.assumptions)


def test_data_strategy_repetition_limit_makes_flat_infeasible() -> None:
    # Same scenario, at most 2 repetitions: flat needs 3 (above), so it is infeasible.
    out = analyse_data_strategy(_pilot_request(max_token_repetitions="2"))
    assert not _option(out, "flat").feasible
    assert _option(out, "flat").notes
    assert out.recommended == "upsampled"
    assert out.savings is None  # no other feasible option
    assert out.break_even.value is None
    assert "infeasible" in out.break_even.note


def test_data_strategy_first_pilot_meets_target_and_token_rounding_up() -> None:
    out = analyse_data_strategy(
        _data(
            corpus_tokens=100,
            flat_tokens_needed=None,
            upsampled_tokens_needed=None,
            scoring_cost_per_token="1",
            training_cost_per_token="1",
            upsampling_curve=[{"share": "1", "repeats": "1"}],
            pilot_results=[
                # flat: (3, 0) and (10, 1); target 0.5 → 3 + 0.5 × 7 = 6.5 → rounded up to 7.
                {"strategy": "flat", "tokens": 3, "score": "0"},
                {"strategy": "flat", "tokens": 10, "score": "1"},
                # upsampled: first run already at 0.9 ≥ 0.5 → its 5 tokens, no extrapolation.
                {"strategy": "upsampled", "tokens": 5, "score": "0.9"},
            ],
            target_score="0.5",
        )
    )
    assert _option(out, "flat").training_tokens == 7
    assert _option(out, "upsampled").training_tokens == 5
    # Totals: 100 × 1 + 7 × 1 = 107 and 100 + 5 = 105.
    assert (_option(out, "flat").total_cost, _option(out, "upsampled").total_cost) == (
        "107.00",
        "105.00",
    )


def test_data_strategy_tie_goes_to_flat_and_scoring_that_never_pays() -> None:
    out = analyse_data_strategy(
        _data(
            corpus_tokens=1000,
            flat_keep_share="1",
            upsampling_curve=[{"share": "1", "repeats": "1"}],
            scoring_cost_per_token="0.01",
            training_cost_per_token="0.01",
            flat_tokens_needed=500,
            upsampled_tokens_needed=500,
            unfiltered_tokens_needed=400,
        )
    )
    # flat = upsampled = 1000 × 0.01 + 500 × 0.01 = 15.00; unfiltered = 400 × 0.01 = 4.00.
    assert out.recommended == "unfiltered"
    assert out.savings is not None
    assert (out.savings.versus, out.savings.amount) == ("flat", "11.00")  # tie → flat first
    # flat vs upsampled tie: the better one (flat) can afford 0 extra: break-even = 0.01.
    assert out.break_even.value == "0.01"
    assert out.affordable_scoring_overhead_total == "0.00"
    # (4 − 5) / 1000 < 0: even free scoring does not beat training unfiltered.
    assert out.break_even_vs_unfiltered is not None
    assert out.break_even_vs_unfiltered.value is None
    assert "never pays" in out.break_even_vs_unfiltered.note


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"scoring_cost_per_token": None}, "$.scoring_cost_per_token"),  # neither
        (
            {
                "scoring_sku": {
                    "code": "x",
                    "unit": "hour",
                    "unit_price": "1",
                    "tokens_per_unit": "10",
                }
            },
            "$.scoring_cost_per_token",
        ),  # both
        (
            {
                "scoring_cost_per_token": None,
                "scoring_sku": {
                    "code": "x",
                    "unit": "h",
                    "unit_price": "1",
                    "tokens_per_unit": "0",
                },
            },
            "$.scoring_sku.tokens_per_unit",
        ),
        ({"flat_keep_share": "0"}, "$.flat_keep_share"),
        (
            {
                "upsampling_curve": [
                    {"share": "0.5", "repeats": "1"},
                    {"share": "0.4", "repeats": "1"},
                ]
            },
            "$.upsampling_curve",
        ),
        ({"upsampling_curve": [{"share": "1", "repeats": "0"}]}, "$.upsampling_curve"),
        ({"flat_tokens_needed": None}, "$.flat_tokens_needed"),
        ({"target_score": "1"}, "$.target_score"),  # target without pilots
        (
            {"pilot_results": [{"strategy": "flat", "tokens": 5, "score": "1"}]},
            "$.target_score",
        ),  # pilots without target
        (
            {
                "pilot_results": [{"strategy": "flat", "tokens": 5, "score": "1"}],
                "target_score": "1",
            },
            "$.flat_tokens_needed",
        ),  # flat given twice
        (
            {
                "flat_tokens_needed": None,
                "pilot_results": [
                    {"strategy": "flat", "tokens": 5, "score": "1"},
                    {"strategy": "flat", "tokens": 9, "score": "2"},
                ],
                "target_score": "3",
            },
            "$.pilot_results",
        ),  # never reaches the target: no extrapolation
        (
            {
                "flat_tokens_needed": None,
                "pilot_results": [
                    {"strategy": "flat", "tokens": 5, "score": "1"},
                    {"strategy": "flat", "tokens": 5, "score": "2"},
                ],
                "target_score": "1",
            },
            "$.pilot_results[0].tokens",
        ),
        ({"max_token_repetitions": "1"}, "$.max_token_repetitions"),  # flat 2, upsampled 2.86
        ({"max_token_repetitions": "0"}, "$.max_token_repetitions"),
        ({"pilot_token_scale": "0"}, "$.pilot_token_scale"),
    ],
)
def test_data_strategy_errors(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(AnalysisError) as info:
        analyse_data_strategy(_data(**overrides))
    assert info.value.field == field


def test_data_strategy_schema_rejects_unknown_fields_and_bad_decimals() -> None:
    good = msgspec.to_builtins(_data())
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({**good, "surprise": 1}, DataStrategyIn)
    with pytest.raises(msgspec.ValidationError, match="training_cost_per_token"):
        msgspec.convert({**good, "training_cost_per_token": "1e-7"}, DataStrategyIn)
    with pytest.raises(msgspec.ValidationError, match="flat_keep_share"):
        msgspec.convert({**good, "flat_keep_share": "1.5"}, DataStrategyIn)
    # A Struct built in Python skips validation; the analysis re-checks it.
    bad = DataStrategyIn(
        corpus_tokens=0,
        flat_keep_share="0.5",
        upsampling_curve=[],
        training_cost_per_token="1",
        scoring_cost_per_token="1",
        flat_tokens_needed=1,
        upsampled_tokens_needed=1,
    )
    with pytest.raises(AnalysisError) as info:
        analyse_data_strategy(bad)
    assert info.value.field.startswith("$.")


@settings(max_examples=60, deadline=None)
@given(
    corpus=st.integers(min_value=1_000, max_value=10**13),
    keep=st.integers(min_value=1, max_value=100),
    scoring=st.integers(min_value=0, max_value=10**6),
    training=st.integers(min_value=1, max_value=10**6),
    flat=st.integers(min_value=1, max_value=10**13),
    up=st.integers(min_value=1, max_value=10**13),
)
def test_data_strategy_break_even_equalises_costs(
    corpus: int, keep: int, scoring: int, training: int, flat: int, up: int
) -> None:
    out = analyse_data_strategy(
        _data(
            corpus_tokens=corpus,
            flat_keep_share=_d(Decimal(keep) / 100),
            scoring_cost_per_token=_d(Decimal(scoring).scaleb(-12)),
            training_cost_per_token=_d(Decimal(training).scaleb(-12)),
            flat_tokens_needed=flat,
            upsampled_tokens_needed=up,
        )
    )
    totals = {o.name: Decimal(o.total_cost) for o in out.options}
    assert Decimal(_option(out, out.recommended).total_cost) == min(totals.values())
    # Re-pricing the better strategy's scoring at the break-even rate makes it cost the other's
    # total (to within the rounding of the reported rate and totals).
    better = out.recommended
    other = "upsampled" if better == "flat" else "flat"
    assert out.break_even.value is not None
    tokens = _option(out, better).training_tokens
    repriced = Decimal(corpus) * Decimal(out.break_even.value) + tokens * Decimal(training).scaleb(
        -12
    )
    assert abs(repriced - totals[other]) <= Decimal("0.01") + Decimal(corpus) * Decimal("1e-15")


# ======================================================================================
# domain-mix
# ======================================================================================


def _mixes(**overrides: Any) -> DomainMixIn:
    body: dict[str, Any] = {
        "cost_per_run": "100000",
        "rework_cost": "500000",
        "general_floor": "60",
        "mixes": [
            {
                "name": "general",
                "scores": {"math": "40", "code": "30", "general_qa": "70", "multiple_choice": "68"},
                "rework_probability": "0.05",
            },
            {
                "name": "mathcode",
                "scores": {"math": "60", "code": "50", "general_qa": "62", "multiple_choice": "62"},
                "rework_probability": "0.2",
                "cost_per_run": "80000",
                "proportions": {"math": "0.4", "code": "0.3", "general_qa": "0.3"},
            },
            {
                "name": "heavy",
                "runs": 2,
                "scores": {"math": "62", "code": "54", "general_qa": "55", "multiple_choice": "57"},
                "rework_probability": "0.6",
            },
            {
                "name": "cheap-bad",
                "cost_per_run": "120000",
                "scores": {"math": "40", "code": "30", "general_qa": "65", "multiple_choice": "65"},
                "rework_probability": "0.05",
            },
        ],
    }
    body.update(overrides)
    return msgspec.convert({k: v for k, v in body.items() if v is not None}, DomainMixIn)


def test_domain_mix_given_probabilities_front_and_break_even() -> None:
    out = analyse_domain_mix(_mixes())
    by = {o.name: o for o in out.options}
    # Expected totals = runs × cost_per_run + P × 500 000:
    #   general   1 × 100 000 + 0.05 × 500 000 = 125 000
    #   mathcode  1 ×  80 000 + 0.2  × 500 000 = 180 000
    #   heavy     2 × 100 000 + 0.6  × 500 000 = 500 000
    #   cheap-bad 1 × 120 000 + 0.05 × 500 000 = 145 000
    assert {n: o.expected_total_cost for n, o in by.items()} == {
        "general": "125000.00",
        "mathcode": "180000.00",
        "heavy": "500000.00",
        "cheap-bad": "145000.00",
    }
    assert (by["heavy"].run_cost, by["heavy"].expected_rework_cost) == ("200000.00", "300000.00")
    # Equal weights: general (40+30+70+68)/4 = 52; mathcode 234/4 = 58.5; heavy 228/4 = 57;
    # cheap-bad 200/4 = 50. General score = mean(general_qa, multiple_choice) for general: 69.
    assert {n: o.weighted_score for n, o in by.items()} == {
        "general": "52",
        "mathcode": "58.5",
        "heavy": "57",
        "cheap-bad": "50",
    }
    assert by["general"].general_score == "69"
    assert out.score_weights == dict.fromkeys(
        ("math", "code", "general_qa", "multiple_choice"), "0.25"
    )
    # heavy (500k, 57) is dominated by mathcode (180k, 58.5); cheap-bad (145k, 50) by general
    # (125k, 52). Front, by cost: general, mathcode.
    assert by["heavy"].dominated_by == ["mathcode"]
    assert by["cheap-bad"].dominated_by == ["general"]
    assert out.pareto_front == ["general", "mathcode"]
    # No budget: the highest weighted score, mathcode.
    assert out.recommended == "mathcode"
    # Savings vs baseline (first mix, general): 125 000 − 180 000 = −55 000; −55/125 = −44 %.
    assert (out.savings.versus, out.savings.amount, out.savings.percent) == (
        "general",
        "-55000.00",
        "-44.00",
    )
    # Break-even rework cost: (100 000 − 80 000) / (0.2 − 0.05) = 133 333.33…; check:
    # 100 000 + 0.05 R = 80 000 + 0.2 R ⇔ 0.15 R = 20 000.
    assert (out.break_even.value, out.break_even.unit) == ("133333.33", "USD")


def test_domain_mix_budget_and_minimum_score() -> None:
    # Budget 150 000: general (125k, 52) and cheap-bad (145k, 50) fit; best score: general,
    # which is the baseline → zero savings and no break-even.
    out = analyse_domain_mix(_mixes(budget="150000"))
    assert out.recommended == "general"
    assert out.savings.amount == "0.00"
    assert out.break_even.value is None
    assert not _option(out, "mathcode").within_budget
    # Minimum weighted score 55: mathcode (58.5, 180k) and heavy (57, 500k) reach it; the
    # cheaper is mathcode.
    out = analyse_domain_mix(_mixes(min_weighted_score="55"))
    assert out.recommended == "mathcode"
    assert not _option(out, "general").meets_min_score


def _derived(**overrides: Any) -> DomainMixIn:
    def mix(name: str, math_: str, code: str, qa: str, mc: str) -> dict[str, Any]:
        return {
            "name": name,
            "scores": {"math": math_, "code": code, "general_qa": qa, "multiple_choice": mc},
        }

    body: dict[str, Any] = {
        "cost_per_run": "10000",
        "rework_cost": "30000",
        "general_floor": "60",
        "score_weights": {"math": "2", "code": "1", "general_qa": "1", "multiple_choice": "0"},
        "mixes": [
            mix("A", "50", "40", "70", "60"),
            mix("B", "70", "60", "58", "60"),
            mix("C", "50", "40", "60", "60"),
            mix("D", "45", "40", "70", "65"),
        ],
        "baseline": "C",
    }
    body.update(overrides)
    return msgspec.convert(body, DomainMixIn)


def test_domain_mix_derived_probabilities_weights_and_per_domain_front() -> None:
    out = analyse_domain_mix(_derived())
    by = {o.name: o for o in out.options}
    # sd = 0: P = 1 if mean(general_qa, multiple_choice) < 60 else 0.
    #   A (70+60)/2 = 65 → 0; B (58+60)/2 = 59 → 1; C 60 → 0 (at the floor is not below);
    #   D 67.5 → 0.
    assert {n: o.rework_probability for n, o in by.items()} == {
        "A": "0",
        "B": "1",
        "C": "0",
        "D": "0",
    }
    # Expected: A, C, D = 10 000; B = 10 000 + 1 × 30 000 = 40 000.
    assert by["B"].expected_total_cost == "40000.00"
    assert by["A"].expected_total_cost == "10000.00"
    # Weights 2:1:1:0 → 0.5, 0.25, 0.25, 0.
    #   A 0.5×50 + 0.25×40 + 0.25×70 = 25 + 10 + 17.5 = 52.5
    #   B 35 + 15 + 14.5 = 64.5; C 25 + 10 + 15 = 50; D 22.5 + 10 + 17.5 = 50
    assert out.score_weights == {
        "math": "0.5",
        "code": "0.25",
        "general_qa": "0.25",
        "multiple_choice": "0",
    }
    assert {n: o.weighted_score for n, o in by.items()} == {
        "A": "52.5",
        "B": "64.5",
        "C": "50",
        "D": "50",
    }
    # Weighted front: A (10k, 52.5) dominates C and D (10k, 50); B (40k, 64.5) is not dominated.
    assert out.pareto_front == ["A", "B"]
    assert out.recommended == "B"
    # Baseline C: savings 10 000 − 40 000 = −30 000. Break-even rework cost:
    # (run_C − run_B) / (P_B − P_C) = (10 000 − 10 000) / (1 − 0) = 0.
    assert out.savings.amount == "-30000.00"
    assert out.break_even.value == "0.00"

    # Per domain: A vs D: math 50 > 45 but multiple_choice 60 < 65 → neither dominates; D joins
    # the front. A still dominates C (equal except general_qa 70 > 60, same cost).
    per = analyse_domain_mix(_derived(pareto_on="per_domain"))
    assert per.pareto_front == ["A", "D", "B"]
    assert _option(per, "C").dominated_by == ["A"]


def test_domain_mix_normal_rework_probability() -> None:
    out = analyse_domain_mix(
        _derived(
            general_score_sd="2",
            rework_cost="100000",
            mixes=[
                # general 60 = floor: z = 0, Φ(0) = 0.5 → 0.5 × 100 000 = 50 000.
                {"name": "X", "scores": {"general_qa": "60", "multiple_choice": "60"}},
                # general 62: z = (60 − 62)/2 = −1, Φ(−1) = 0.158655 (table: 0.1586553)
                # → 15 865.50.
                {"name": "Y", "scores": {"general_qa": "63", "multiple_choice": "61"}},
            ],
            score_weights=None,
            baseline=None,
        )
    )
    assert _option(out, "X").rework_probability == "0.5"
    assert _option(out, "X").expected_rework_cost == "50000.00"
    assert _option(out, "Y").rework_probability == "0.158655"
    assert _option(out, "Y").expected_rework_cost == "15865.50"
    # Y: 10 000 + 15 865.50 = 25 865.50, better score (62 vs 60) and cheaper than X (60 000).
    assert out.recommended == "Y"
    assert out.pareto_front == ["Y"]
    # Equal run costs, different P: break-even (10 000 − 10 000) / (0.158655 − 0.5) = 0 → "0.00";
    # savings vs X: 60 000 − 25 865.50 = 34 134.50.
    assert out.savings.amount == "34134.50"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (
            {
                "mixes": [
                    {"name": "a", "scores": {"general_qa": "1", "multiple_choice": "1"}},
                    {"name": "a", "scores": {"general_qa": "1", "multiple_choice": "1"}},
                ]
            },
            "$.mixes[1].name",
        ),
        (
            {
                "mixes": [
                    {"name": "a", "scores": {"general_qa": "1", "multiple_choice": "1"}},
                    {"name": "b", "scores": {"general_qa": "1", "math": "1"}},
                ]
            },
            "$.mixes[1].scores",
        ),
        (
            {"mixes": [{"name": "a", "scores": {"general_qa": "1", "math": "1"}}]},
            "$.general_domains[1]",
        ),
        ({"score_weights": {"math": "1"}}, "$.score_weights"),
        (
            {
                "score_weights": dict.fromkeys(
                    ("math", "code", "general_qa", "multiple_choice"), "0"
                )
            },
            "$.score_weights",
        ),
        ({"baseline": "nope"}, "$.baseline"),
        ({"budget": "1"}, "$.budget"),
        ({"min_weighted_score": "99"}, "$.min_weighted_score"),
    ],
)
def test_domain_mix_errors(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(AnalysisError) as info:
        analyse_domain_mix(_mixes(**overrides))
    assert info.value.field == field


def test_domain_mix_proportions_must_sum_to_one() -> None:
    body = msgspec.to_builtins(_mixes())
    body["mixes"][1]["proportions"] = {"math": "0.5", "code": "0.3"}
    with pytest.raises(AnalysisError) as info:
        analyse_domain_mix(msgspec.convert(body, DomainMixIn))
    assert info.value.field == "$.mixes[1].proportions"
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(
            {**body, "mixes": [{**body["mixes"][0], "rework_probability": "2"}]}, DomainMixIn
        )


_score = st.integers(min_value=0, max_value=10_000).map(lambda v: _d(Decimal(v) / 100))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=5),  # runs
            st.integers(min_value=0, max_value=100),  # P in %
            st.lists(_score, min_size=4, max_size=4),
        ),
        min_size=1,
        max_size=12,
    ),
    per_domain=st.booleans(),
)
def test_domain_mix_front_members_are_not_dominated(
    data: list[tuple[int, int, list[str]]], per_domain: bool
) -> None:
    domains = ("math", "code", "general_qa", "multiple_choice")
    req = msgspec.convert(
        {
            "cost_per_run": "1000",
            "rework_cost": "5000",
            "general_floor": "50",
            "pareto_on": "per_domain" if per_domain else "weighted_score",
            "mixes": [
                {
                    "name": f"m{i}",
                    "runs": runs,
                    "rework_probability": _d(Decimal(p) / 100),
                    "scores": dict(zip(domains, scores, strict=True)),
                }
                for i, (runs, p, scores) in enumerate(data)
            ],
        },
        DomainMixIn,
    )
    out = analyse_domain_mix(req)
    # Totals are whole cents and weighted scores exact to 4 decimals, so the strings are exact.
    cost = {o.name: Decimal(o.expected_total_cost) for o in out.options}
    score = {o.name: Decimal(o.weighted_score) for o in out.options}
    per = {o.name: {d: Decimal(v) for d, v in o.scores.items()} for o in out.options}

    def dominates(a: str, b: str) -> bool:
        if per_domain:
            ge = all(per[a][d] >= per[b][d] for d in domains)
            gt = any(per[a][d] > per[b][d] for d in domains)
        else:
            ge, gt = score[a] >= score[b], score[a] > score[b]
        return cost[a] <= cost[b] and ge and (cost[a] < cost[b] or gt)

    front = set(out.pareto_front)
    for name in cost:
        dominators = [o for o in cost if o != name and dominates(o, name)]
        assert (name in front) == (not dominators)
        if name not in front:  # every dominated mix is dominated by a front member
            assert any(dominates(f, name) for f in front)
    assert score[out.recommended] == max(score.values())
    assert out.recommended in front


# ======================================================================================
# checkpoint-interval
# ======================================================================================


def _ckpt(**overrides: Any) -> CheckpointIntervalIn:
    body: dict[str, Any] = {
        "accelerators": 100,
        "price_per_accelerator_hour": "2",
        "checkpoint_write_seconds": "360",  # C = 0.1 h
        "run_hours": "1000",
        "accelerator_mtbf_hours": "2000",  # M = 2000 / 100 = 20 h
    }
    body.update(overrides)
    return msgspec.convert({k: v for k, v in body.items() if v is not None}, CheckpointIntervalIn)


def test_checkpoint_young_daly_and_cost_curve() -> None:
    out = analyse_checkpoint_interval(
        _ckpt(restart_seconds="180", current_interval_hours="6")  # R = 0.05 h
    )
    assert out.job_mtbf_hours == "20"
    # Young: sqrt(2 × 0.1 × 20) = sqrt(4) = 2 h. No fees, no storage: the model optimum is Young.
    assert out.young_interval_hours == "2"
    assert out.closed_form_interval_hours == "2"
    assert out.recommended == "optimum"
    assert _option(out, "optimum").interval_hours == "2"
    assert (out.break_even.value, out.break_even.unit) == ("2", "hours")
    # Daly: C/(2M) = 0.1/40 = 0.0025, sqrt = 0.05;
    # 2 × (1 + 0.05/3 + 0.0025/9) − 0.1 = 2 × 1.0169444… − 0.1 = 1.9338888… → 1.933889.
    assert out.daly_interval_hours == "1.933889"
    # Cost at τ = 2: T/τ = 500 checkpoints × 0.1 h × 100 × 2 USD = 10 000 stalled;
    # failures T/M = 50 × (τ/2 + R = 1.05 h) × 200 USD/h = 10 500 rework; total 20 500.
    best = _option(out, "optimum")
    assert (best.checkpoints_written, best.expected_failures) == ("500", "50")
    assert _line(best, "checkpoint_stall") == "10000.00"
    assert _line(best, "expected_rework") == "10500.00"
    assert best.total_cost == "20500.00"
    # In general cost(τ) = 20 000/τ + 5 000·τ + 500 (restart: 50 × 0.05 × 200).
    # Current τ = 6: 3 333.33… + 30 000 + 500 = 33 833.33; savings 13 333.33,
    # 13 333.33… / 33 833.33… = 39.41 %.
    assert _option(out, "current").total_cost == "33833.33"
    assert (out.savings.versus, out.savings.amount, out.savings.percent) == (
        "current",
        "13333.33",
        "39.41",
    )
    # Curve: 0.5 h: 40 000 + 2 500 + 500 = 43 000 (+22 500, +109.76 %);
    # 1 h: 20 000 + 5 000 + 500 = 25 500 (+5 000, 5 000/20 500 = +24.39 %); 4 h: 5 000 + 20 000
    # + 500 = 25 500; 8 h: 2 500 + 40 000 + 500 = 43 000.
    curve = {p.multiple_of_optimum: p for p in out.cost_curve}
    assert [curve[k].interval_hours for k in ("0.25", "0.5", "1", "2", "4")] == [
        "0.5",
        "1",
        "2",
        "4",
        "8",
    ]
    assert [curve[k].total_cost for k in ("0.25", "0.5", "1", "2", "4")] == [
        "43000.00",
        "25500.00",
        "20500.00",
        "25500.00",
        "43000.00",
    ]
    assert (curve["0.25"].extra_cost, curve["0.25"].extra_percent) == ("22500.00", "109.76")
    assert (curve["2"].extra_cost, curve["2"].extra_percent) == ("5000.00", "24.39")
    # The grid optimum agrees with the closed form to well under a minute.
    assert abs(Decimal(out.grid_optimum_interval_hours) - 2) < Decimal("0.01")
    assert any("Young (1974)" in a for a in out.assumptions)
    assert any("Daly (2006)" in a for a in out.assumptions)


def test_checkpoint_fees_and_storage_move_the_optimum() -> None:
    out = analyse_checkpoint_interval(
        _ckpt(
            accelerator_mtbf_hours=None,
            job_mtbf_hours="20",
            write_cost_per_checkpoint="20",
            checkpoint_size_gb="1000",
            storage_price_per_gb_month="0.073",
            retained_checkpoints=400,
        )
    )
    # a = T(CNp + w) = 1000 × (0.1 × 100 × 2 + 20) = 40 000; b = TNp/(2M) = 1000 × 200/40
    # = 5 000; storage per retained checkpoint over the run s = 1000 GB × 0.073 × 1000/730 = 100.
    # Without storage: sqrt(a/b) = sqrt(8) = 2.828427 h.
    assert out.closed_form_interval_hours == "2.828427"
    # T/K = 1000/400 = 2.5 h. For τ ≤ 2.5 all 400 are kept: a/τ + bτ + 40 000, minimum at the
    # clamp τ = 2.5: 16 000 + 12 500 + 40 000 = 68 500. For τ ≥ 2.5 only T/τ are kept:
    # (a + 100 × 1000)/τ + bτ → τ = sqrt(140 000 / 5 000) = sqrt(28) = 5.291503 h and
    # cost 2·sqrt(140 000 × 5 000) = 52 915.026… → 52 915.03, below 68 500.
    best = _option(out, "optimum")
    assert best.interval_hours == "5.291503"
    assert best.total_cost == "52915.03"
    # Its parts: n = 1000/5.2915 = 188.982 checkpoints; stall = fees = 20n = 3 779.64;
    # storage 100n = 18 898.22; rework 5 000τ = 26 457.51.
    assert _line(best, "checkpoint_stall") == "3779.64"
    assert _line(best, "checkpoint_fees") == "3779.64"
    assert _line(best, "checkpoint_storage") == "18898.22"
    assert _line(best, "expected_rework") == "26457.51"
    # Young's τ = 2 h: 40 000/2 + 5 000 × 2 + 400 × 100 = 70 000. Savings vs Young (no current
    # interval given): 70 000 − 52 915.03 = 17 084.97; 17 084.97 / 70 000 = 24.41 %.
    assert _option(out, "young").total_cost == "70000.00"
    assert (out.savings.versus, out.savings.amount, out.savings.percent) == (
        "young",
        "17084.97",
        "24.41",
    )
    assert abs(Decimal(out.grid_optimum_interval_hours) - Decimal("5.291503")) < Decimal("0.01")


def test_checkpoint_short_run_checkpoints_once() -> None:
    # T = 1 h < Young's 2 h: the best interval is the whole run.
    out = analyse_checkpoint_interval(_ckpt(run_hours="1"))
    assert _option(out, "optimum").interval_hours == "1"
    assert _option(out, "young").exceeds_run
    assert any("whole run" in w for w in out.warnings)
    # cost(1) = (1/1) × 0.1 × 200 + (1/20) × 0.5 × 200 = 20 + 5 = 25.
    assert _option(out, "optimum").total_cost == "25.00"


def test_checkpoint_daly_when_write_time_exceeds_twice_mtbf() -> None:
    # C = 2 h ≥ 2M = 1.8 h → Daly's estimate is M = 0.9 h.
    out = analyse_checkpoint_interval(
        _ckpt(accelerator_mtbf_hours=None, job_mtbf_hours="0.9", checkpoint_write_seconds="7200")
    )
    assert out.daly_interval_hours == "0.9"
    assert out.warnings  # write time is a large share of the interval


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"job_mtbf_hours": "20"}, "$.job_mtbf_hours"),  # both MTBFs
        ({"accelerator_mtbf_hours": None}, "$.job_mtbf_hours"),  # neither
        ({"price_per_accelerator_hour": "0"}, "$.price_per_accelerator_hour"),
        ({"checkpoint_write_seconds": "0"}, "$.checkpoint_write_seconds"),
        ({"run_hours": "0.0"}, "$.run_hours"),
        ({"current_interval_hours": "0"}, "$.current_interval_hours"),
        ({"accelerator_mtbf_hours": "0"}, "$.accelerator_mtbf_hours"),
    ],
)
def test_checkpoint_errors(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(AnalysisError) as info:
        analyse_checkpoint_interval(_ckpt(**overrides))
    assert info.value.field == field


def test_checkpoint_schema_and_cost_function_errors() -> None:
    with pytest.raises(msgspec.ValidationError, match="accelerators"):
        msgspec.convert({**msgspec.to_builtins(_ckpt()), "accelerators": 0}, CheckpointIntervalIn)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({**msgspec.to_builtins(_ckpt()), "mtbf": "1"}, CheckpointIntervalIn)
    with pytest.raises(AnalysisError):
        checkpoint_total_cost(_ckpt(), "0")
    # The public cost function is the model: 20 000/τ + 5 000·τ at τ = 4 → 25 000.
    assert checkpoint_total_cost(_ckpt(), "4") == Decimal(25000)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    accelerators=st.integers(min_value=1, max_value=100_000),
    price_cents=st.integers(min_value=1, max_value=10_000),
    write_s=st.integers(min_value=1, max_value=3_600),
    mtbf_h=st.integers(min_value=1, max_value=10_000),
    run_h=st.integers(min_value=1, max_value=20_000),
    restart_s=st.integers(min_value=0, max_value=3_600),
    size_gb=st.integers(min_value=0, max_value=100_000),
    keep=st.integers(min_value=1, max_value=1_000),
    storage_milli=st.integers(min_value=0, max_value=1_000),
    fee=st.integers(min_value=0, max_value=1_000),
    probe=st.floats(min_value=0.001, max_value=1.0),
)
def test_checkpoint_optimum_is_never_beaten(
    accelerators: int,
    price_cents: int,
    write_s: int,
    mtbf_h: int,
    run_h: int,
    restart_s: int,
    size_gb: int,
    keep: int,
    storage_milli: int,
    fee: int,
    probe: float,
) -> None:
    req = _ckpt(
        accelerators=accelerators,
        price_per_accelerator_hour=_d(Decimal(price_cents) / 100),
        checkpoint_write_seconds=str(write_s),
        accelerator_mtbf_hours=None,
        job_mtbf_hours=str(mtbf_h),
        run_hours=str(run_h),
        restart_seconds=str(restart_s),
        checkpoint_size_gb=str(size_gb),
        retained_checkpoints=keep,
        storage_price_per_gb_month=_d(Decimal(storage_milli) / 1000),
        write_cost_per_checkpoint=str(fee),
    )
    out = analyse_checkpoint_interval(req)

    def cost(tau: Decimal) -> Decimal:
        return checkpoint_total_cost(req, tau)

    best = cost(Decimal(_option(out, "optimum").interval_hours))
    slack = best * Decimal("1e-9") + Decimal("1e-9")  # the reported interval has 6 decimals
    # The optimum is not beaten anywhere in (0, T] ...
    tau = Decimal(run_h) * Decimal(repr(probe))
    assert best <= cost(tau) + slack
    # ... nor by Young's, Daly's or the grid's interval, within the run.
    for name in ("young", "daly", "grid_optimum"):
        option = _option(out, name)
        if not option.exceeds_run and Decimal(option.interval_hours) > 0:
            assert best <= cost(Decimal(option.interval_hours)) + slack
    # The grid optimum is never worse than its grid neighbours (one step, 2^(1/16), each way)
    # and is within 0.1 % of the exact optimum's cost.
    grid = Decimal(out.grid_optimum_interval_hours)
    at_grid = cost(grid)
    step = Decimal(2) ** (Decimal(1) / 16)
    for neighbour in (grid / step, grid * step):
        if neighbour <= Decimal(run_h):
            assert at_grid <= cost(neighbour) + slack
    assert at_grid <= best * Decimal("1.001") + slack


# ======================================================================================
# storage-lifecycle
# ======================================================================================

_TIERS: dict[str, Any] = {
    "hot": {"price_per_gb_month": "0.02"},
    "warm": {"price_per_gb_month": "0.01", "retrieval_per_gb": "0.01", "restore_hours": "0"},
    "archive": {
        "price_per_gb_month": "0.002",
        "retrieval_per_gb": "0.02",
        "transition_per_gb": "0.01",
        "restore_hours": "12",
    },
}


def _storage(
    classes: list[dict[str, Any]], horizon: int, tiers: dict[str, Any] | None = None
) -> StorageLifecycleIn:
    return msgspec.convert(
        {"horizon_months": horizon, "tiers": tiers or _TIERS, "classes": classes},
        StorageLifecycleIn,
    )


def test_storage_tiering_and_retention_month_by_month() -> None:
    checkpoints = {
        "name": "checkpoints",
        "initial_gb": "1000",
        "growth_gb_per_month": "500",
        "warm_after_days": 30,
        "archive_after_days": 60,
        "delete_after_days": 120,
        "reads_gb_per_month": "15",
    }
    out = analyse_storage_lifecycle(_storage([checkpoints], 6))
    # Cohorts: c0 = 1000 GB (month 1), c1…c5 = 500 GB (months 2…6). Age at a month start, in
    # 30-day months: 0 → hot, 1 (30 d) → warm, 2-3 (60-90 d) → archive, 4 (120 d) → deleted.
    # Month 1: hot 1000 × 0.02 = 20; nothing cold, reads priced hot (0) → 20.00.
    # Month 2: warm 1000 × 0.01 = 10, hot 500 × 0.02 = 10; reads 15 × 0.01 = 0.15 → 20.15.
    # Month 3: archive c0 1000 × 0.002 = 2, warm c1 5, hot c2 10; c0 moves to archive:
    #   1000 × 0.01 = 10; reads 15 × (500×0.01 + 1000×0.02) / 1500 = 0.25 → 27.25.
    # Month 4: archive c0+c1 1500 → 3, warm 5, hot 10; c1 moves: 5; reads
    #   15 × (5 + 30) / 2000 = 0.2625 → 23.2625 → 23.26.
    # Months 5, 6: one cohort deleted, archive 1000 → 2, warm 5, hot 10, one move 5;
    #   reads 15 × (5 + 20) / 1500 = 0.25 → 22.25 each.
    rows = out.monthly
    assert [r.with_rules_cost for r in rows] == [
        "20.00",
        "20.15",
        "27.25",
        "23.26",
        "22.25",
        "22.25",
    ]
    # Baseline: all hot, (1000 + 500·m) × 0.02 = 20, 30, 40, 50, 60, 70.
    assert [r.baseline_cost for r in rows] == ["20.00", "30.00", "40.00", "50.00", "60.00", "70.00"]
    assert (rows[4].deleted_gb, rows[5].deleted_gb, rows[5].baseline_gb) == ("1000", "1500", "3500")
    assert (rows[3].hot_gb, rows[3].warm_gb, rows[3].archive_gb) == ("500", "500", "1500")
    # Totals: with rules 20 + 20.15 + 27.25 + 23.2625 + 22.25 + 22.25 = 135.1625 → 135.16;
    # baseline 270. Savings 134.8375 → 134.84, 134.8375/270 = 49.94 %.
    assert _option(out, "with_rules").total_cost == "135.16"
    assert _option(out, "baseline").total_cost == "270.00"
    assert out.recommended == "with_rules"
    assert (out.savings.versus, out.savings.amount, out.savings.percent) == (
        "baseline",
        "134.84",
        "49.94",
    )
    wr = _option(out, "with_rules")
    # Transitions 10 + 5 + 5 + 5 = 25; retrieval 0.15 + 0.25 + 0.2625 + 0.25 + 0.25 = 1.1625.
    assert _line(wr, "checkpoints.transitions") == "25.00"
    assert _line(wr, "checkpoints.retrieval") == "1.16"
    # Cumulative with rules 20 = 20 in month 1, then below the baseline from month 2 on.
    assert (out.break_even.quantity, out.break_even.value) == ("payback_month", "2")
    # Restore at the horizon end (month 6): warm 500 GB × 0.01 = 5.00 in 0 h, archive
    # 1000 GB × 0.02 = 20.00 in 12 h.
    restore = {(r.data_class, r.tier): r for r in out.restore}
    assert restore["checkpoints", "warm"].retrieval_cost_all == "5.00"
    assert restore["checkpoints", "archive"].gb_at_horizon_end == "1000"
    assert restore["checkpoints", "archive"].restore_hours == "12"
    assert restore["checkpoints", "archive"].retrieval_cost_all == "20.00"
    assert "cannot be restored" in out.restore_trade_off[0]
    assert "restore 12 h" in out.restore_trade_off[0]


_TIERS_B: dict[str, Any] = {
    "hot": {"price_per_gb_month": "0.023"},
    "warm": {"price_per_gb_month": "0.0125"},
    "archive": {
        "price_per_gb_month": "0.001",
        "transition_per_gb": "0.05",
        "retrieval_per_gb": "0.03",
        "restore_hours": "48",
    },
}
_CLASSES_B: list[dict[str, Any]] = [
    {"name": "corpus", "initial_gb": "10000", "archive_after_days": 30},
    {"name": "scratch", "initial_gb": "100", "growth_gb_per_month": "100"},
]


def test_storage_transition_fees_delay_payback() -> None:
    out = analyse_storage_lifecycle(_storage(_CLASSES_B, 4, _TIERS_B))
    # corpus with rules: month 1 hot 10 000 × 0.023 = 230; month 2 archived 10 000 × 0.001 = 10
    # + move 10 000 × 0.05 = 500 → 510; months 3, 4: 10. Baseline 230 every month.
    # scratch (no rules, both ways): 100, 200, 300, 400 GB × 0.023 = 2.3, 4.6, 6.9, 9.2.
    # with:     232.3, 514.6, 16.9, 19.2 → cumulative 232.3, 746.9, 763.8, 783.0
    # baseline: 232.3, 234.6, 236.9, 239.2 → cumulative 232.3, 466.9, 703.8, 943.0
    assert [r.cumulative_with_rules for r in out.monthly] == [
        "232.30",
        "746.90",
        "763.80",
        "783.00",
    ]
    assert [r.cumulative_baseline for r in out.monthly] == ["232.30", "466.90", "703.80", "943.00"]
    # Only in month 4 is the rules' cumulative below the baseline: payback month 4.
    assert out.break_even.value == "4"
    # Savings 943 − 783 = 160; 160/943 = 16.97 %.
    assert out.recommended == "with_rules"
    assert (out.savings.amount, out.savings.percent) == ("160.00", "16.97")
    assert "scratch: no rules" in out.restore_trade_off[1]

    # Over three months the move fee is not yet paid back: 763.8 vs 703.8 → keep the baseline,
    # which is 60.00 cheaper, and there is no payback month.
    short = analyse_storage_lifecycle(_storage(_CLASSES_B, 3, _TIERS_B))
    assert short.recommended == "baseline"
    assert (short.savings.versus, short.savings.amount) == ("with_rules", "60.00")
    assert short.break_even.value is None


@pytest.mark.parametrize(
    ("classes", "field"),
    [
        (
            [{"name": "a", "initial_gb": "1"}, {"name": "a", "initial_gb": "2"}],
            "$.classes[1].name",
        ),
        (
            [{"name": "a", "initial_gb": "1", "warm_after_days": 60, "archive_after_days": 30}],
            "$.classes[0].archive_after_days",
        ),
        (
            [{"name": "a", "initial_gb": "1", "archive_after_days": 90, "delete_after_days": 90}],
            "$.classes[0].delete_after_days",
        ),
    ],
)
def test_storage_errors(classes: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(AnalysisError) as info:
        analyse_storage_lifecycle(_storage(classes, 3))
    assert info.value.field == field


def test_storage_schema_errors() -> None:
    with pytest.raises(msgspec.ValidationError, match="horizon_months"):
        _storage([{"name": "a", "initial_gb": "1"}], 0)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        _storage([{"name": "a", "initial_gb": "1", "tier": "hot"}], 1)
    with pytest.raises(msgspec.ValidationError, match="initial_gb"):
        _storage([{"name": "a", "initial_gb": "-1"}], 1)


_gb = st.integers(min_value=0, max_value=100_000).map(str)
_days = st.one_of(st.none(), st.integers(min_value=0, max_value=400))


@settings(max_examples=60, deadline=None)
@given(
    prices=st.lists(st.integers(min_value=0, max_value=100), min_size=3, max_size=3),
    classes=st.lists(st.tuples(_gb, _gb, _days, _days, _days), min_size=1, max_size=3),
    horizon=st.integers(min_value=1, max_value=24),
)
def test_storage_rules_without_fees_never_cost_more(
    prices: list[int],
    classes: list[tuple[str, str, int | None, int | None, int | None]],
    horizon: int,
) -> None:
    archive, warm, hot = sorted(prices)  # hot ≥ warm ≥ archive, no move or read fees
    tiers = {
        "hot": {"price_per_gb_month": _d(Decimal(hot) / 1000)},
        "warm": {"price_per_gb_month": _d(Decimal(warm) / 1000)},
        "archive": {"price_per_gb_month": _d(Decimal(archive) / 1000)},
    }
    body = []
    keys = ("warm_after_days", "archive_after_days", "delete_after_days")
    for i, (initial, growth, *ages) in enumerate(classes):
        present = [k for k, a in zip(keys, ages, strict=True) if a is not None]
        values = sorted(a for a in ages if a is not None)
        assume(len(set(values)) == len(values))  # lifecycle ages must strictly increase
        rule = dict(zip(present, values, strict=True))
        body.append({"name": f"c{i}", "initial_gb": initial, "growth_gb_per_month": growth, **rule})
    out = analyse_storage_lifecycle(_storage(body, horizon, tiers))
    for row in out.monthly:
        assert Decimal(row.with_rules_cost) <= Decimal(row.baseline_cost)
    assert Decimal(_option(out, "with_rules").total_cost) <= Decimal(
        _option(out, "baseline").total_cost
    )


# ======================================================================================
# registry
# ======================================================================================


def test_registry_names_every_analysis_and_its_schema() -> None:
    assert set(ANALYSES) == {
        "data-strategy",
        "domain-mix",
        "checkpoint-interval",
        "storage-lifecycle",
    }
    for request_type, function in ANALYSES.values():
        schema = msgspec.json.schema(request_type)
        assert schema["$defs"][request_type.__name__]["additionalProperties"] is False
        assert callable(function)


def test_money_is_never_a_float() -> None:
    outs = [
        analyse_data_strategy(_data()),
        analyse_domain_mix(_mixes()),
        analyse_checkpoint_interval(_ckpt()),
        analyse_storage_lifecycle(_storage(_CLASSES_B, 2, _TIERS_B)),
    ]
    for out in outs:
        encoded = msgspec.json.decode(msgspec.json.encode(out))

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
            else:
                assert not isinstance(node, float)

        walk(encoded)
        assert encoded["assumptions"]
    assert math.isclose(float(_option(outs[2], "optimum").interval_hours), 2.0)
