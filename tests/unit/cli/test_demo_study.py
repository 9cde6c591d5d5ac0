"""The demo's cost-and-effect study as data: the story its numbers tell (the math/code-heavy
mix breaks the general benchmarks late, the balanced mix holds them), its usage, and how the
demo reads a cost-effect answer. The report's own figures are checked end to end in
tests/system/test_demo.py."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from trainledger.cli.demo import Scenario, generate_events
from trainledger.cli.demo.costeffect import read_verdict
from trainledger.cli.demo.study import (
    BALANCED_MIX,
    BASELINE,
    BENCHMARKS,
    MATH_MIX,
    MIXES,
    PIPELINES,
    RUNS,
    SCORED,
    STUDY_TAG,
    TOLERANCE,
    evaluation_results,
    evaluation_settings,
)

SC = Scenario.for_now("llm-7b", "default", datetime.fromisoformat("2026-11-30T10:00:00+00:00"))


def _series() -> dict[tuple[str, str], list[dict[str, Any]]]:
    series: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in evaluation_results(SC):
        series[(r["experiment"], r["benchmark"])].append(r)
    return series


def test_results_are_deterministic_unique_and_inside_the_replay() -> None:
    results = evaluation_results(SC)
    assert results == evaluation_results(SC)
    assert len({r["id"] for r in results}) == len(results) <= 1000  # one batch
    assert all(
        SC.start < datetime.fromisoformat(r["time"].replace("Z", "+00:00")) < SC.end
        for r in results
    )
    planned = evaluation_settings()["planned_tokens"]
    for (experiment, _), points in _series().items():
        tokens = [p["tokens_seen"] for p in points]
        assert tokens == sorted(set(tokens)) and tokens[-1] == planned[experiment]
        assert [p["step"] for p in points] == sorted({p["step"] for p in points})


def test_the_story_the_scores_tell() -> None:
    series = _series()
    tolerance = Decimal(TOLERANCE)
    base = {b: Decimal(series[(BASELINE, b)][-1]["value"]) for b in BENCHMARKS}
    generals = [b for b, (kind, _) in BENCHMARKS.items() if kind == "general"]
    targets = [b for b, (kind, _) in BENCHMARKS.items() if kind == "target"]
    assert generals and targets and evaluation_settings()["baseline"] == BASELINE
    for b in generals:
        math = [Decimal(p["value"]) - base[b] for p in series[(MATH_MIX, b)]]
        # within tolerance at first, past it at the end: a restart point exists
        assert math[0] >= -tolerance and math[-1] < -tolerance
        for name in (BALANCED_MIX, SCORED):
            assert all(Decimal(p["value"]) - base[b] >= -tolerance for p in series[(name, b)])
    for b in targets:
        for name in (MATH_MIX, BALANCED_MIX):
            values = [Decimal(p["value"]) for p in series[(name, b)]]
            assert values == sorted(values) and values[-1] > base[b]
        # the math/code mix gains most on the targets (but is not the cheapest point: the
        # report says so in the end-to-end test)
        assert series[(MATH_MIX, b)][-1]["value"] > series[(BALANCED_MIX, b)][-1]["value"]


def test_the_study_events_are_tagged_labelled_and_over_before_the_end() -> None:
    key, value = STUDY_TAG
    events = [e for e in generate_events(SC) if (e.get("tags") or {}).get(key) == value]
    assert {e["experiment"] for e in events} == {*MIXES, *PIPELINES} == {r.experiment for r in RUNS}
    skus = {e["sku"] for e in events}
    assert skus == {"gpu.h100.hour", "inference.quality_score.mtok"}
    scoring = [e for e in events if e["sku"] == "inference.quality_score.mtok"]
    assert {e["experiment"] for e in scoring} == {SCORED}
    # One node of 8 GPUs: never more than 8 GPU-hours of the study in an hour.
    per_hour: dict[str, Decimal] = defaultdict(Decimal)
    for e in events:
        if e["sku"] == "gpu.h100.hour":
            per_hour[e["time"]] += Decimal(e["quantity"])
    assert max(per_hour.values()) == 8
    # All over more than 2 days before the replay's end: not waste (no progress expected).
    last = max(datetime.fromisoformat(e["time"].replace("Z", "+00:00")) for e in events)
    assert (SC.end - last).days >= 2


def _row(
    name: str, cells: list[tuple[str, str, str | None]], exposure: str | None = None
) -> dict[str, Any]:
    return {
        "experiment": name,
        "benchmarks": [
            {"benchmark": b, "kind": kind, "cost_per_point": cpp} for b, kind, cpp in cells
        ],
        "rework_exposure": exposure,
        "regressions": ["mmlu"] if exposure else [],
    }


def test_the_verdict_is_read_from_the_report() -> None:
    report = {
        "rows": [
            _row("a", [("gsm8k", "target", "12.50"), ("mmlu", "general", None)]),
            _row("b", [("gsm8k", "target", "9.999999999"), ("humaneval", "target", None)]),
            _row("c", [("gsm8k", "target", None), ("humaneval", "target", "3")], "41.20"),
            _row("d", [("mmlu", "general", None)]),
        ]
    }
    verdict = read_verdict(report)
    assert verdict.cheapest == {"gsm8k": ("b", "9.999999999"), "humaneval": ("c", "3")}
    assert verdict.exposed == [("c", "41.20", ["mmlu"])]
    assert read_verdict({"rows": []}).cheapest == {}
