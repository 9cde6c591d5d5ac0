"""The demo's cost-and-effect study as data: the story its numbers tell (the math/code-heavy
mix breaks the general benchmarks late, the balanced mix holds them), its usage, and how the
demo reads a cost-effect answer. The report's own figures are checked end to end in
tests/system/test_demo.py."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from trainledger.cli.demo import BATCH_EVENTS, Scenario, generate_events
from trainledger.cli.demo.costeffect import read_verdict
from trainledger.cli.demo.replay import schedule
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


def test_results_are_posted_as_the_replay_reaches_their_checkpoint() -> None:
    events, results = generate_events(SC), evaluation_results(SC)
    requests = schedule(events, results, BATCH_EVENTS)
    assert schedule(events, results, BATCH_EVENTS) == requests  # deterministic
    # Every event once, in order, at most a batch a request; every result once.
    assert [e for batch, _ in requests for e in batch] == events
    assert all(len(batch) <= BATCH_EVENTS for batch, _ in requests)
    assert sorted(r["id"] for _, rs in requests for r in rs) == sorted(r["id"] for r in results)

    def when(item: dict[str, Any]) -> datetime:
        return datetime.fromisoformat(item["time"].replace("Z", "+00:00"))

    # A result follows every event up to its time and comes before every later one.
    stamps = [[when(e) for e in batch] for batch, _ in requests]
    for i, (_, rs) in enumerate(requests):
        before = max((t for ts in stamps[: i + 1] for t in ts), default=None)
        after = min((t for ts in stamps[i + 1 :] for t in ts), default=None)
        for r in rs:
            assert before is None or before <= when(r)
            assert after is None or when(r) < after
    # One checkpoint a results request (the study's runs do not share a checkpoint time):
    # each regressing checkpoint of the math/code mix is posted before its last one.
    assert len(requests) < 3 * len(events) // BATCH_EVENTS + 2 * len({r["time"] for r in results})
    for _, rs in requests:
        assert len({r["time"] for r in rs}) <= 1
    order = {r["id"]: i for i, (_, rs) in enumerate(requests) for r in rs}
    last = max(order[f"{MATH_MIX}-{b}-ckpt8"] for b in BENCHMARKS)
    assert order[f"{MATH_MIX}-triviaqa-ckpt4"] < order[f"{MATH_MIX}-mmlu-ckpt5"] < last


def test_schedule_on_a_small_stream() -> None:
    def ev(i: int, t: str) -> dict[str, Any]:
        return {"id": f"e{i}", "time": t}

    events = [ev(0, "2026-01-01T00:00:00Z"), ev(1, "2026-01-01T01:00:00Z")]
    events += [ev(2, "2026-01-01T01:00:00Z"), ev(3, "2026-01-01T05:00:00Z")]
    results = [
        {"id": "late", "time": "2026-01-02T00:00:00Z"},
        {"id": "r1", "time": "2026-01-01T01:00:00Z"},
        {"id": "early", "time": "2025-12-31T00:00:00Z"},
    ]
    got = [([e["id"] for e in b], [r["id"] for r in rs]) for b, rs in schedule(events, results, 2)]
    assert got == [
        ([], ["early"]),  # before any event
        (["e0", "e1"], []),  # a full batch
        (["e2"], ["r1"]),  # the events at its time, then the result
        (["e3"], ["late"]),  # after the last event
    ]
