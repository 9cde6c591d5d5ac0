"""One demo run's connection to the service: the HTTP client, the console it prints to, and
the outcome it gathers as the steps go."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console

from .receiver import Delivery, Receiver
from .scenario import Scenario
from .simulation import generate_events


class DemoError(Exception):
    """A step failed; the message says which and why."""


@dataclass
class DemoOutcome:
    scenario: Scenario
    events: list[dict[str, Any]]
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    plan_id: str = ""
    webhook_id: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    waste: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    card: dict[str, Any] = field(default_factory=dict)
    cost_effect: dict[str, Any] = field(default_factory=dict)


class DemoSession:
    """The service at `base_url` with an admin token, and `console` to print to; each step of
    the walkthrough is a function of it."""

    def __init__(
        self,
        base_url: str,
        token: str,
        scenario: Scenario,
        receiver: Receiver | None,
        console: Console,
        card: Mapping[str, Any],
        delivery_timeout_s: float = 30.0,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=120.0,
            trust_env=False,
        )
        self.base_url = base_url.rstrip("/")
        self.sc = scenario
        self.receiver = receiver
        self.console = console
        self.example_card = card
        self.delivery_timeout_s = delivery_timeout_s
        self.outcome = DemoOutcome(scenario, generate_events(scenario))

    def call(self, method: str, path: str, step: str, **kwargs: Any) -> Any:
        for _ in range(10):
            response = self.http.request(method, path, **kwargs)
            if response.status_code == 503 and "retry-after" in response.headers:
                time.sleep(min(float(response.headers["retry-after"]), 5.0))
                continue
            break
        if response.status_code >= 400:
            raise DemoError(
                f"{step}: {method} {path} answered {response.status_code}: {response.text[:800]}"
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def heading(self, number: int, title: str, why: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]{number}. {title}", align="left")
        self.console.print(f"[dim]{why}[/]")

    def say(self, text: str) -> None:
        self.console.print(text)

    def means(self, text: str) -> None:
        self.console.print(f"  [bold green]what it means:[/] {text}")

    @property
    def project_q(self) -> dict[str, str]:
        return {"project": self.sc.project}
