"""The cost-effect report as CSV: exact money, empty cells for what does not apply, the
CSV-injection guard on names and never on numbers."""

from __future__ import annotations

import csv
import io

from trainledger.evaluations.effect import ReportFilter, cost_effect
from trainledger.evaluations.model import EvaluationResult
from trainledger.export.cost_effect import cost_effect_csv

from tests.unit.evaluations.test_effect import EVENTS, GPU, RESULTS, SETTINGS, _r


def _table(results: list[EvaluationResult]) -> list[dict[str, str]]:
    report = cost_effect("p", "USD", SETTINGS, EVENTS, {GPU}, results, ReportFilter())
    return list(csv.DictReader(io.StringIO(cost_effect_csv(report))))


def test_one_row_per_experiment_with_exact_money() -> None:
    rows = {row["experiment"]: row for row in _table(RESULTS)}
    assert list(rows) == ["base", "mixA", "mixB", "mixD"]
    mix_a = rows["mixA"]
    assert mix_a["cost"] == "16.250000001"
    assert mix_a["cost.compute"] == "16.250000001" and mix_a["cost.storage"] == ""
    assert mix_a["cost.stage.midtrain"] == "15.000000001"
    assert mix_a["gsm8k.cost_per_point"] == "1.354166667"
    assert (mix_a["mmlu.change"], mix_a["mmlu.regression"]) == ("-3.0", "true")
    assert (mix_a["regressions"], mix_a["rework_exposure"]) == ("mmlu", "6.250000001")
    assert mix_a["rework_since"] == "2026-01-01T04:00:00+00:00"
    assert mix_a["forecast_cost_at_completion"] == "18.958333334"
    assert rows["base"]["cost.storage"] == "1.234567891"
    assert rows["base"]["is_baseline"] == "true" and rows["base"]["rework_exposure"] == ""
    assert rows["mixB"]["eval_loss.change"] == "-0.4"  # a number keeps its sign


def test_names_that_would_be_formulas_are_neutralised() -> None:
    results = [*RESULTS, _r("r99", "=1+2", "@SUM", "-5", 3)]
    text_rows = _table(results)
    assert "'=1+2" in {row["experiment"] for row in text_rows}
    formula = next(row for row in text_rows if row["experiment"] == "'=1+2")
    assert formula["'@SUM.value"] == "-5"
