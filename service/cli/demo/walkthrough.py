"""The demo's walkthrough against any running service: its steps, in order."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console

from . import costeffect, preparation, replay, report
from .receiver import Receiver
from .scenario import Scenario, load_example_card
from .session import DemoOutcome, DemoSession

# What the demo does, in the order it does it; each step prints what it did and why.
STEPS: tuple[Callable[[DemoSession], None], ...] = (
    preparation.intro,
    preparation.rate_card,
    preparation.plan,
    preparation.budgets,
    preparation.webhook,
    replay.replay,
    replay.progress,
    replay.wait_for_deliveries,
    report.spend,
    report.plan_vs_actual,
    report.alerts,
    report.waste,
    costeffect.cost_effect,
    report.wrap_up,
)


class Demo(DemoSession):
    """Runs the steps against `base_url` with an admin token, printing to `console`."""

    def run(self) -> DemoOutcome:
        for step in STEPS:
            step(self)
        return self.outcome


def run_demo(
    base_url: str,
    token: str,
    scenario: Scenario,
    receiver: Receiver | None,
    console: Console,
    card: Mapping[str, Any] | None = None,
    delivery_timeout_s: float = 30.0,
) -> DemoOutcome:
    demo = Demo(
        base_url,
        token,
        scenario,
        receiver,
        console,
        card or load_example_card(),
        delivery_timeout_s,
    )
    try:
        outcome = demo.run()
    finally:
        demo.http.close()
    return outcome
