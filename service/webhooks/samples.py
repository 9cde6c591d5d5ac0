"""What `POST /v1/webhooks/{id}/test?kind=...` sends: a made-up message of the asked alert
kind, marked `test`, shaped as a real one, for a first look at how the endpoint shows it.
Every sample's id is new each time (``test_`` and random hex), so a receiver that drops
repeated ids shows every test. The budget threshold sample (the default) is
`messages.sample_message`; the others are here. No I/O."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from ..budgets.model import REGRESSION_KIND, RegressionFacts
from .formats.message import AlertMessage, Message, RegressionMessage
from .messages import dashboard_link, driver_name, sample_message
from .registry import AlertKindName

__all__ = ["sample_for"]

_SAMPLE_PROJECT = "sample-project"


def _drivers(rows: tuple[tuple[str, str, str, str], ...]) -> list[dict[str, str]]:
    return [
        {
            "name": driver_name(sku, stage, experiment),
            "stage": stage,
            "experiment": experiment,
            "sku": sku,
            "cost": cost,
        }
        for stage, experiment, sku, cost in rows
    ]


def _budget_links(base: str, project: str, budget_id: str) -> dict[str, str]:
    quoted = quote(project, safe="")
    return {
        "dashboard": f"{base}/ui/{quoted}",
        "costs": f"{base}/v1/costs?project={quoted}&group_by=sku,stage",
        "alerts": f"{base}/v1/alerts?project={quoted}",
        "budget": f"{base}/v1/budgets/{budget_id}?project={quoted}",
    }


def _forecast_sample(project: str, base: str, now: datetime) -> AlertMessage:
    """Half the month gone, 6,200.00 spent of a 10,000.00 budget: a forecast of 12,400.00."""
    return AlertMessage(
        id=f"test_{secrets.token_hex(8)}",
        kind="forecast",
        project=project,
        budget_id="bud_sample",
        budget_name="sample monthly budget",
        scope={"stage": "pretrain"},
        period=now.astimezone(UTC).strftime("%Y-%m"),
        threshold_pct=None,
        amount="10000.00",
        spent="6200.00",
        limit="5000.00",  # the spend above which the forecast passes the amount
        over_by="1200.00",
        currency="USD",
        forecast="12400.00",
        top_drivers=_drivers((("pretrain", "exp-42", "gpu.h100.hour", "5400.00"),)),
        occurred_at=now,
        links=_budget_links(base, project, "bud_sample"),
        test=True,
    )


def _growth_sample(project: str, base: str, now: datetime) -> AlertMessage:
    """A day's spend of 2,480.00 against a growth limit of 1,500.00 (3 × the trailing
    average)."""
    return AlertMessage(
        id=f"test_{secrets.token_hex(8)}",
        kind="growth",
        project=project,
        budget_id="bud_sample",
        budget_name="sample growth watch",
        scope={},
        period=now.astimezone(UTC).strftime("%Y%m%d"),
        threshold_pct=None,
        amount="1500.00",
        spent="2480.00",
        limit="1500.00",
        over_by="980.00",
        currency="USD",
        top_drivers=_drivers((("pretrain", "exp-42", "gpu.h100.hour", "2040.00"),)),
        occurred_at=now,
        links=_budget_links(base, project, "bud_sample"),
        test=True,
    )


def _regression_sample(project: str, base: str, now: datetime) -> RegressionMessage:
    """Experiment exp-42's mmlu at 0.612 against 0.655 for the baseline exp-base: a gain of
    −0.043, past a tolerance of 0.02; 8,160.00 of GPU time since its last good checkpoint."""
    quoted = quote(project, safe="")
    experiment = "exp-42"
    return RegressionMessage(
        id=f"test_{secrets.token_hex(8)}",
        kind=REGRESSION_KIND,
        project=project,
        scope={"experiment": experiment, "benchmark": "mmlu"},
        currency="USD",
        regression=RegressionFacts(
            experiment=experiment,
            benchmark="mmlu",
            baseline="exp-base",
            value="0.612",
            baseline_value="0.655",
            gain="-0.043",
            tolerance="0.02",
            higher_is_better=True,
            measured_at=now - timedelta(hours=1),
            step=20_000,
            tokens_seen=84_000_000_000,
            rework_exposure="9562.50",
            rework_since=now - timedelta(days=3),
        ),
        top_drivers=_drivers(
            (
                ("pretrain", experiment, "gpu.h100.hour", "8160.00"),
                ("pretrain", experiment, "storage.gb.month", "1402.50"),
            )
        ),
        occurred_at=now,
        links={
            "dashboard": dashboard_link(base, project, None, now.date()) + "#cost-effect",
            "report": f"{base}/v1/reports/cost-effect?project={quoted}",
            "evaluations": f"{base}/v1/evaluations?project={quoted}&experiment={experiment}",
            "alerts": f"{base}/v1/alerts?project={quoted}&kind={REGRESSION_KIND}",
        },
        test=True,
    )


def sample_for(kind: AlertKindName, project: str | None, public_url: str, now: datetime) -> Message:
    """A made-up message of alert kind ``kind`` for ``project`` (or a sample project's
    name), marked `test`, with a new id each time. ``threshold``: `messages.sample_message`
    (a batch that crossed 50, 80 and 100 % of a budget)."""
    if kind == "threshold":
        return sample_message(project, public_url, now)
    name = project or _SAMPLE_PROJECT
    base = public_url.rstrip("/")
    if kind == "forecast":
        return _forecast_sample(name, base, now)
    if kind == "growth":
        return _growth_sample(name, base, now)
    return _regression_sample(name, base, now)
