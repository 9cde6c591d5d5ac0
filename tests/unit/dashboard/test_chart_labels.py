"""The dashboard's chart labels, as the page draws them: cost-versus-score labels never cover
one another, plan-versus-actual stage labels fit their room (the browser test measures what a
browser lays out; these pin the placement rules without one)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
from trainledger.dashboard.charts import PlanBar, plan_vs_actual
from trainledger.dashboard.effect import effect_section, label_width
from trainledger.evaluations.effect import CostEffectReport

_TEXT = re.compile(r"<text ([^>]*)>([^<]*)</text>")
_ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def _row(name: str, cost: str, value: str) -> dict[str, object]:
    cell = {
        "benchmark": "gsm8k", "kind": "target", "value": value, "higher_is_better": True,
        "time": datetime(2026, 11, 1, tzinfo=UTC), "step": None, "tokens_seen": None,
        "baseline_value": None, "change": None, "gain": None, "cost_per_point": None,
        "regression": False, "on_front": True,
    }  # fmt: skip
    return {
        "experiment": name, "is_baseline": False, "cost": cost, "cost_by_category": {},
        "cost_by_stage": {}, "events": 1, "accelerator_hours": "4032", "tokens_seen": None,
        "benchmarks": [cell], "regressions": [], "rework_exposure": None, "rework_since": None,
        "planned_tokens": None, "running": None, "forecast_cost_at_completion": None,
    }  # fmt: skip


def _boxes(svg: str) -> list[tuple[str, float, float, float, float]]:
    out = []
    for attrs, text in _TEXT.findall(svg):
        a = dict(_ATTR.findall(attrs))
        s = int(a.get("font-size", "12"))
        w = label_width(text, s)
        left = (
            float(a["x"]) - {"start": 0, "middle": w / 2, "end": w}[a.get("text-anchor", "start")]
        )
        out.append((text, left, float(a["y"]) - s, left + w, float(a["y"]) + s * 0.25))
    return out


def test_cost_score_labels_of_close_points_do_not_overlap() -> None:
    rows = [_row(f"mix-{i}", f"{1000 + i * 3}", f"{50 + i * 0.05:.2f}") for i in range(4)]
    report = msgspec.convert(
        {"project": "p", "currency": "USD", "baseline": None, "tolerance": "1",
         "total_cost": "4018", "rows": rows,
         "fronts": [{"benchmark": "gsm8k", "higher_is_better": True, "experiments": []}]},
        CostEffectReport,
    )  # fmt: skip
    html = effect_section(report)
    labels = [b for b in _boxes(html) if b[0].startswith("mix-")]
    assert len(labels) == 4
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            assert a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2], (a, b)
    assert "4,032" in html  # accelerator hours grouped


def test_a_long_stage_label_is_not_cut_at_the_left() -> None:
    label = "quality_scoring (score every document through a hosted 8B judge)"
    svg = plan_vs_actual("plan", [PlanBar(label, "100", "50", "120")], "USD")
    lines = [b for b in _boxes(svg) if b[0] and b[0] in label]
    assert " ".join(b[0] for b in lines) == label  # all of it, in lines
    assert all(b[1] >= 0 for b in lines), lines
