"""The regression alert: which (experiment, general benchmark) pairs alert, and the rule that
fires each exactly once (pure; the store runs the rule in Lua).

**What alerts.** A row of the cost-effect report (over every event and result, no filters;
the rules: `effect.py`) alerts for each benchmark cell marked `regression` there (a general
benchmark whose latest value's gain against the baseline's latest value is below
−tolerance), unless the row is the baseline's own or its experiment is finished. An
experiment is **running** unless its `planned_tokens` are set and its results have seen that
many tokens (the report's `running` is False); one without planned tokens is running.

**Its identity** is (project, experiment, benchmark, baseline), hashed into the alert id
(`regression_id`): an id holds only characters a Standard Webhooks `webhook-id` may, and
the names may not. It fires once: a recovery within tolerance and a later regression of the
same pair against the same baseline fire nothing new, and neither does a new tolerance.
Naming a new baseline makes new identities (a regression against it fires once more).

**The rule that fires** (`fire_reference`; `fire_regressions.lua` does the same, atomically,
held equal by tests/integration/evaluations/test_regression_reference.py): in order, each
candidate whose id is not in the fired hash is recorded there (id -> its record) and
appended to the alerts stream; a fired id, or one earlier in the same list, does nothing.
The check runs on every POST of results (duplicates too: a retry after a crash between
storing and firing fires what is missing) and on every change of the settings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from ..budgets.model import REGRESSION_KIND, AlertRecord, RegressionFacts
from .effect import CostEffectReport

__all__ = ["fire_reference", "regression_alerts", "regression_id"]


def regression_id(project: str, experiment: str, benchmark: str, baseline: str) -> str:
    """The alert id of a regression: ``evr_`` and 24 hex digits of its identity's hash."""
    identity = "\x1f".join((project, experiment, benchmark, baseline)).encode()
    return "evr_" + hashlib.sha256(identity).hexdigest()[:24]


def regression_alerts(report: CostEffectReport) -> list[AlertRecord]:
    """The regression alerts the report calls for, in row then benchmark order (the rules:
    this module's docstring). Fired or not: the store's script fires each once."""
    baseline = report.baseline
    if baseline is None:
        return []
    alerts = []
    for row in report.rows:
        if row.is_baseline or row.running is False or not row.regressions:
            continue
        for cell in row.benchmarks:
            if not cell.regression or cell.baseline_value is None or cell.gain is None:
                continue
            facts = RegressionFacts(
                experiment=row.experiment,
                benchmark=cell.benchmark,
                baseline=baseline,
                value=cell.value,
                baseline_value=cell.baseline_value,
                gain=cell.gain,
                tolerance=report.tolerance,
                higher_is_better=cell.higher_is_better,
                measured_at=cell.time,
                step=cell.step,
                tokens_seen=cell.tokens_seen,
                rework_exposure=row.rework_exposure or row.cost,
                rework_since=row.rework_since,
            )
            alerts.append(
                AlertRecord(
                    id=regression_id(report.project, row.experiment, cell.benchmark, baseline),
                    kind=REGRESSION_KIND,
                    project=report.project,
                    scope={"experiment": row.experiment, "benchmark": cell.benchmark},
                    currency=report.currency,
                    regression=facts,
                )
            )
    return alerts


def fire_reference(
    candidates: Sequence[tuple[str, bytes]], fired: Mapping[str, bytes]
) -> tuple[list[str], dict[str, bytes]]:
    """The reference of `fire_regressions.lua`: from the candidates (alert id, record JSON)
    in order and the fired hash before, the ids fired (each appended to the alerts stream
    with its record, in this order) and the fired hash after."""
    now_fired = dict(fired)
    new: list[str] = []
    for alert_id, record in candidates:
        if alert_id not in now_fired:
            now_fired[alert_id] = record
            new.append(alert_id)
    return new, now_fired
