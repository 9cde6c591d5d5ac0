"""The shipped Grafana dashboard and Prometheus alert rules (deploy/) query only metrics the
service exports: every PromQL expression in them is read (tests/promql.py) and its metric
names looked up in a live /metrics page of a real service, scraped with a token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families
from trainledger.spend_metrics.settings import OPTIONAL_DIMENSIONS, SpendConfig

from tests.api.test_ingest import post, put_card
from tests.api.test_spend_metrics import FIGURES_WAIT_S, serve, settled, this_month
from tests.conftest import Api, event
from tests.promql import metric_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "kubernetes" / "components" / "monitoring" / "trainledger-spend.json"
RULES = DEPLOY / "prometheus" / "trainledger-rules.yaml"


def dashboard_queries(node: Any) -> Iterator[str]:
    """Every PromQL text of a dashboard: targets' `expr`, variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and "query" in value:
                yield str(value["query"])
            elif key == "query" and isinstance(value, str) and node.get("type") == "query":
                yield value
            else:
                yield from dashboard_queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_queries(item)


def rule_queries(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for group in doc["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule["record"], rule["expr"]


async def exported_names(api: Api) -> set[str]:
    """The metric names of a live /metrics page with every spend family in it."""
    await put_card(api)
    assert (await post(api, [event("d1", "2", stage="pretrain", time=this_month())]))["accepted"]
    async with api.client() as c:
        r = await c.post("/v1/budgets", json={"project": "llm", "name": "b", "amount": "10"})
        assert r.status_code == 201, r.text
    await settled(api, "llm")
    async with api.client() as c:
        page = await c.get("/metrics")
    assert page.status_code == 200
    names = set()
    for family in text_string_to_metric_families(page.text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


async def test_every_query_names_exported_metrics(clean_redis: str) -> None:
    config = SpendConfig(
        dimensions=OPTIONAL_DIMENSIONS, ttl_seconds=0, deadline_seconds=FIGURES_WAIT_S
    )
    async for api in serve(clean_redis, config):
        exported = await exported_names(api)
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(RULES.read_text())
    queries = [("dashboard", q) for q in dashboard_queries(dashboard)]
    queries += list(rule_queries(rules))
    read: set[str] = set()
    for where, query in queries:
        names = metric_names(query)
        assert names, f"{where}: {query!r} reads no metric"
        assert names <= exported, f"{where}: {query!r} reads {sorted(names - exported)}"
        read |= names
    # What the dashboard and the rules exist for is in them.
    for name in (
        "trainledger_spend_month_to_date",
        "trainledger_budget_use_ratio",
        "trainledger_budget_forecast",
        "trainledger_budget_limit",
        "trainledger_spend_read_ok",
    ):
        assert name in read
    alerts = {name for name, _ in rule_queries(rules)}
    assert {
        "TrainledgerBudgetOver80Percent",
        "TrainledgerBudgetExhausted",
        "TrainledgerBudgetForecastOverLimit",
        "TrainledgerSpendScrapeFailing",
    } <= alerts


async def test_the_public_page_has_no_spend(clean_redis: str) -> None:
    """What the rules need is on the page a token scrapes, never on the public one."""
    async for api in serve(
        clean_redis, SpendConfig(ttl_seconds=0, deadline_seconds=FIGURES_WAIT_S)
    ):
        async with httpx.AsyncClient(base_url=api.base_url, timeout=120) as c:
            page = await c.get("/metrics")
        public = {f.name for f in text_string_to_metric_families(page.text)}
        rules = yaml.safe_load(RULES.read_text())
        for _, query in rule_queries(rules):
            assert not metric_names(query) & public, query
