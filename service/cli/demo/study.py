"""The demo's cost-and-effect study, as data: two mid-training mixes against a baseline, and a
quality-scored against a flat-filtered data pipeline, each with a pilot run. Their usage (on a
second on-demand node, and hosted scoring), the evaluation settings and the results the eval
harness reports at each checkpoint. Pure data, no I/O; deterministic (seeded).

Every run continues the same pretraining checkpoint (day 20) on one node of 8 H100 at the
achieved MFU: about 257M tokens an hour. Scores move from the checkpoint's towards each run's
final value along a rising curve (the targets, and every benchmark of the runs that hold up)
or a late-falling one (the general benchmarks of the math/code-heavy mix, which stay within
tolerance for the first half of its run and then fall past it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Protocol

from .scenario import (
    ACTUAL_MFU,
    GPUS_PER_NODE,
    PARAMETERS,
    PEAK_FLOPS,
    SEED,
    Scenario,
    iso,
)

STUDY_NODE = "gpu-node-od2"
STUDY_TAG = ("study", "mix-and-data")  # on every event of the study: the report's filter
CHECKPOINT_EVERY_H = 3
# Tokens one node of 8 H100 trains a 7B model on in an hour, by 6·N·D at the achieved MFU.
TOKENS_PER_NODE_HOUR = int(GPUS_PER_NODE * PEAK_FLOPS * ACTUAL_MFU * 3600 / (6 * PARAMETERS))
BATCH_TOKENS = 1024 * 4096  # sequences of 4,096 tokens a step
TOLERANCE = "1.0"  # points a general benchmark may fall below the baseline

BASELINE = "midtrain-base"
MATH_MIX = "midtrain-mathcode"
BALANCED_MIX = "midtrain-balanced"
SCORED = "pilot-scored"
FLAT = "pilot-flat"
MIXES = (BASELINE, MATH_MIX, BALANCED_MIX)
PIPELINES = (SCORED, FLAT)

# benchmark -> (kind, what it measures); the order is the table's.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "gsm8k": ("target", "math"),
    "humaneval": ("target", "code"),
    "mmlu": ("general", "multiple-choice QA"),
    "triviaqa": ("general", "general QA"),
}
# The day-20 pretraining checkpoint every run starts from.
START_SCORES = {"gsm8k": "36.0", "humaneval": "22.0", "mmlu": "57.5", "triviaqa": "61.5"}


@dataclass(frozen=True)
class Run:
    """One experiment of the study: its training on the study node, and where it ends."""

    experiment: str
    label: str
    start: tuple[int, int]  # (day, hour) its training starts
    hours: int
    final: Mapping[str, str]  # benchmark -> its score at the last checkpoint
    late_fall: frozenset[str] = field(default_factory=frozenset)  # benchmarks falling late
    owner: str = "eli"


RUNS = (
    Run(
        BASELINE,
        "the current mix, 3B tokens",
        (21, 0),
        12,
        {"gsm8k": "38.0", "humaneval": "23.5", "mmlu": "58.0", "triviaqa": "62.0"},
    ),
    Run(
        MATH_MIX,
        "40 % math and code, 6B tokens",
        (21, 12),
        24,
        {"gsm8k": "48.5", "humaneval": "30.5", "mmlu": "55.4", "triviaqa": "59.0"},
        frozenset({"mmlu", "triviaqa"}),
    ),
    Run(
        BALANCED_MIX,
        "20 % math and code, 3B tokens",
        (22, 12),
        12,
        {"gsm8k": "44.0", "humaneval": "28.0", "mmlu": "58.4", "triviaqa": "61.7"},
    ),
    Run(
        FLAT,
        "pilot on the heuristically filtered slice, 3B tokens",
        (23, 3),
        12,
        {"gsm8k": "38.4", "humaneval": "23.3", "mmlu": "57.9", "triviaqa": "62.1"},
        owner="ana",
    ),
    Run(
        SCORED,
        "pilot on the quality-scored slice, 3B tokens",
        (23, 15),
        12,
        {"gsm8k": "40.0", "humaneval": "24.5", "mmlu": "58.6", "triviaqa": "62.5"},
        owner="ana",
    ),
)
# The two pipelines' filtering, before their pilots: flat heuristics on the study node for
# 3 hours; the quality scorer (the hosted judge) over a 9B-token slice, 4 workers for 12 hours.
FLAT_FILTER = ((23, 0), 3)
SCORING = ((22, 0), 12)


class EventSink(Protocol):
    def add(
        self,
        ident: str,
        when: datetime,
        sku: str,
        quantity: str,
        stage: str,
        *,
        experiment: str = "",
        owner: str = "",
        tags: dict[str, str] | None = None,
    ) -> None: ...


def study_events(sc: Scenario, log: EventSink) -> None:
    """The study's usage: each run's GPU-hours on the study node, the flat filter's, and the
    scored pipeline's hosted scoring requests (own seeded generator: the main run's draws
    stay as they were)."""
    rng = random.Random(SEED + 1)
    key, value = STUDY_TAG
    research = {"team": "research", "node": STUDY_NODE, key: value}
    for run in RUNS:
        stage = "midtrain" if run.experiment in MIXES else "data_prep"
        _node_hours(sc, log, run.experiment, run.start, run.hours, stage, run.owner, research)
    (day, hour), hours = FLAT_FILTER
    data = {"team": "data", "node": STUDY_NODE, "filter": "heuristic", key: value}
    _node_hours(sc, log, FLAT, (day, hour), hours, "data_prep", "ana", data, prefix="flatfilter")
    (day, hour), hours = SCORING
    for slot in range(hours * 6):
        for w in range(4):
            mtok = Decimal(rng.randint(28_000_000, 34_000_000)).scaleb(-6)
            log.add(
                f"study-score-d{day:02d}s{slot:03d}-w{w}",
                sc.at(day, hour, slot * 10 + w),
                "inference.quality_score.mtok",
                str(mtok),
                "quality_scoring",
                experiment=SCORED,
                owner="ana",
                tags={"team": "data", "judge": "llama-3.1-8b", key: value},
            )


def _node_hours(
    sc: Scenario,
    log: EventSink,
    experiment: str,
    start: tuple[int, int],
    hours: int,
    stage: str,
    owner: str,
    tags: dict[str, str],
    prefix: str = "",
) -> None:
    for i in range(hours):
        d, h = divmod(start[0] * 24 + start[1] + i, 24)
        when = sc.at(d, h)
        for g in range(GPUS_PER_NODE):
            log.add(
                f"{prefix or experiment}-d{d:02d}h{h:02d}-g{g}",
                when,
                "gpu.h100.hour",
                "1",
                stage,
                experiment=experiment,
                owner=owner,
                tags=tags,
            )


def evaluation_settings() -> dict[str, Any]:
    return {
        "baseline": BASELINE,
        "benchmarks": {name: kind for name, (kind, _) in BENCHMARKS.items()},
        "tolerance": TOLERANCE,
        "planned_tokens": {run.experiment: run.hours * TOKENS_PER_NODE_HOUR for run in RUNS},
    }


def _rising(f: Decimal) -> Decimal:
    return 1 - (1 - f) ** 2


def _late(f: Decimal) -> Decimal:
    return f**2


def evaluation_results(sc: Scenario) -> list[dict[str, Any]]:
    """What the eval harness reports: every benchmark at each run's checkpoints (every 3
    hours of training), stamped with the checkpoint's step, tokens seen and time."""
    results: list[dict[str, Any]] = []
    for run in RUNS:
        checkpoints = run.hours // CHECKPOINT_EVERY_H
        for k in range(1, checkpoints + 1):
            f = Decimal(k) / checkpoints
            trained = k * CHECKPOINT_EVERY_H
            tokens = trained * TOKENS_PER_NODE_HOUR
            for name in BENCHMARKS:
                curve: Callable[[Decimal], Decimal] = _late if name in run.late_fall else _rising
                start, end = Decimal(START_SCORES[name]), Decimal(run.final[name])
                value = (start + (end - start) * curve(f)).quantize(
                    Decimal("0.1"), rounding=ROUND_HALF_EVEN
                )
                results.append(
                    {
                        "id": f"{run.experiment}-{name}-ckpt{k}",
                        "experiment": run.experiment,
                        "benchmark": name,
                        "value": str(value),
                        "step": tokens // BATCH_TOKENS,
                        "tokens_seen": tokens,
                        "time": iso(sc.at(run.start[0], run.start[1] + trained)),
                    }
                )
    return results
