"""The cost-effect report as CSV: one row per experiment, as the JSON answer has them.

Columns: the experiment's own figures, then its cost per category (`cost.<category>`) and per
stage (`cost.stage.<stage>`), then five per benchmark (`<benchmark>.value`, `.change`,
`.cost_per_point`, `.regression`, `.on_front`), benchmarks in name order. Money is the exact
figure of the JSON answer (to the nano, no grouping) in the report's currency; an empty cell
is a figure that does not apply. Names (experiments, benchmarks, stages) pass through the
CSV-injection guard; numbers never do (a negative change keeps its `-`).
"""

from __future__ import annotations

import csv
import io

from ..evaluations.effect import CostEffectReport
from .csvsafe import neutralise

__all__ = ["cost_effect_csv", "cost_effect_filename"]

_LEAD = (
    "experiment",
    "is_baseline",
    "currency",
    "cost",
    "events",
    "accelerator_hours",
    "tokens_seen",
    "regressions",
    "rework_exposure",
    "rework_since",
    "planned_tokens",
    "running",
    "forecast_cost_at_completion",
)
_PER_BENCHMARK = ("value", "change", "cost_per_point", "regression", "on_front")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def cost_effect_csv(report: CostEffectReport) -> str:
    """The report as RFC 4180 CSV text, header row first."""
    categories = sorted({c for r in report.rows for c in r.cost_by_category})
    stages = sorted({s for r in report.rows for s in r.cost_by_stage})
    benchmarks = sorted({c.benchmark for r in report.rows for c in r.benchmarks})
    header = [
        *_LEAD,
        *(f"cost.{c}" for c in categories),
        *(f"cost.stage.{s}" for s in stages),
        *(f"{b}.{part}" for b in benchmarks for part in _PER_BENCHMARK),
    ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([neutralise(h) for h in header])
    for row in report.rows:
        cells = {c.benchmark: c for c in row.benchmarks}
        lead = [
            neutralise(row.experiment),
            row.is_baseline,
            neutralise(report.currency),
            row.cost,
            row.events,
            row.accelerator_hours,
            row.tokens_seen,
            neutralise(";".join(row.regressions)),
            row.rework_exposure,
            row.rework_since.isoformat() if row.rework_since else None,
            row.planned_tokens,
            row.running,
            row.forecast_cost_at_completion,
        ]
        per_benchmark: list[object] = []
        for b in benchmarks:
            c = cells.get(b)
            per_benchmark += (
                [c.value, c.change, c.cost_per_point, c.regression, c.on_front]
                if c is not None
                else [None] * len(_PER_BENCHMARK)
            )
        writer.writerow(
            _cell(v)
            for v in [
                *lead,
                *(row.cost_by_category.get(c) for c in categories),
                *(row.cost_by_stage.get(s) for s in stages),
                *per_benchmark,
            ]
        )
    return out.getvalue()


def cost_effect_filename(project: str) -> str:
    return f"cost-effect-{project}.csv"
