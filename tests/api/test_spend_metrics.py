"""Spend in Prometheus: the gauges of /metrics against the exact totals, over real HTTP, with
real events on a real Redis-protocol server (service/spend_metrics)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainledger.budgets.service import budget_status, list_budgets
from trainledger.config import Settings, spend_settings
from trainledger.ratecards.catalog import RateCards
from trainledger.spend_metrics.model import OTHER
from trainledger.spend_metrics.service import read_snapshot
from trainledger.spend_metrics.settings import SpendConfig
from trainledger.stores import Stores

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, ServerThread, event, make_admin_token

Series = dict[str, dict[tuple[tuple[str, str], ...], float]]


# A scrape here waits for its read as long as it takes: these tests are about the figures, not
# the deadline (tests/integration/spend_metrics/test_reads.py holds that), and a loaded machine
# must not turn a slow read into a page without spend.
FIGURES_WAIT_S = 120.0


def this_month() -> str:
    """A time inside the current calendar month (UTC) and in the past."""
    now = datetime.now(UTC)
    return max(now.replace(day=1, hour=0, minute=0, second=0), now - timedelta(hours=1)).isoformat()


def last_month() -> str:
    first = datetime.now(UTC).replace(day=1, hour=12, minute=0, second=0, microsecond=0)
    return (first - timedelta(days=1)).isoformat()


def usd(text: str) -> float:
    """The float a gauge shows for an exact amount: the exact figure rounded once."""
    return float(Decimal(text))


async def scrape(api: Api, token: str | None) -> tuple[int, Series]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=api.base_url, headers=headers, timeout=120) as c:
        for _ in range(10):
            r = await c.get("/metrics")
            # On a cluster a scrape still waiting for its read when the store's deadline
            # passes is answered 503 (retry); the read goes on, and the retry waits for it.
            if r.status_code != 503:
                break
            await asyncio.sleep(0.5)
    if r.status_code != 200:
        return r.status_code, {}
    series: Series = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            series.setdefault(sample.name, {})[key] = sample.value
    return 200, series


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


async def settled(api: Api, *projects: str) -> None:
    """A cost query folds what is pending, so the totals hold every event posted."""
    async with api.client() as c:
        for project in projects:
            r = await c.get("/v1/costs", params={"project": project})
            assert r.status_code == 200, r.text


async def serve(redis_url: str, config: SpendConfig) -> AsyncIterator[Api]:
    settings = Settings(redis_url=redis_url, **spend_settings(config))
    assert settings.metrics_spend == config
    server = await asyncio.to_thread(lambda: ServerThread(redis_url, settings).start())
    try:
        yield Api(server.base_url, await make_admin_token(redis_url), redis_url)
    finally:
        await asyncio.to_thread(server.stop)


@pytest.fixture
async def fresh(clean_redis: str) -> AsyncIterator[Api]:
    """A service whose scrapes always read the totals anew (TTL 0), default dimensions."""
    async for api in serve(
        clean_redis, SpendConfig(ttl_seconds=0, deadline_seconds=FIGURES_WAIT_S)
    ):
        yield api


async def post_hand_worked(api: Api) -> None:
    await put_card(api)
    now = this_month()
    events = [
        event("e1", "3", stage="pretrain", experiment="exp-a", time=now),  # 3 h × 2.50 = 7.50
        event("e2", "1.2", stage="eval", experiment="exp-b", time=now),  # 1.2 h × 2.50 = 3.00
        event("e3", "50", sku="storage.hot.gb_day", stage="data_prep", time=now),  # 0.10
        event("e4", "0.7", sku="network.cross_region.gb", stage="pretrain", time=now),  # 0.014
        event("e0", "2", stage="pretrain", time=last_month()),  # 5.00, not this month
        event("o1", "1", project="other", stage="pretrain", time=now),  # another project
    ]
    reply = await post(api, events)
    assert reply["accepted"] == 6, reply


async def test_gauges_equal_the_hand_worked_totals_and_budget_use(fresh: Api) -> None:
    api = fresh
    await post_hand_worked(api)
    async with api.client() as c:
        whole = await c.post("/v1/budgets", json={"project": "llm", "name": "all", "amount": "40"})
        pre = await c.post(
            "/v1/budgets",
            json={"project": "llm", "name": "pre", "amount": "10", "scope": {"stage": "pretrain"}},
        )
    assert whole.status_code == pre.status_code == 201
    await settled(api, "llm", "other")
    status, found = await scrape(api, api.admin_token)
    assert status == 200
    llm = {"project": "llm", "currency": "USD"}
    month = found["trainledger_spend_month_to_date"]
    assert month == {
        labels(**llm, stage="pretrain"): usd("7.514"),
        labels(**llm, stage="eval"): usd("3.00"),
        labels(**llm, stage="data_prep"): usd("0.10"),
        labels(project="other", currency="USD", stage="pretrain"): usd("2.50"),
    }
    assert found["trainledger_spend_to_date"][labels(**llm)] == usd("15.614")
    for budget, limit, spent in ((whole, "40", "10.614"), (pre, "10", "7.514")):
        key = labels(
            **llm, budget=budget.json()["id"], name=budget.json()["name"], period="monthly"
        )
        assert found["trainledger_budget_limit"][key] == usd(limit)
        assert found["trainledger_budget_spend"][key] == usd(spent)
        ratio = Fraction(Decimal(spent)) / Fraction(Decimal(limit))
        assert found["trainledger_budget_use_ratio"][key] == float(ratio)
        # A linear forecast from part of the month: at least what is spent already.
        assert found["trainledger_budget_forecast"][key] >= usd(spent)
    assert found["trainledger_spend_read_ok"][()] == 1.0


async def test_a_scrape_shows_only_what_its_token_may_read(fresh: Api) -> None:
    api = fresh
    await post_hand_worked(api)
    await settled(api, "llm", "other")
    status, public = await scrape(api, None)  # no token: the page as it always was
    assert status == 200 and "trainledger_events_accepted_total" in public
    assert not any("spend" in name or "budget" in name for name in public)
    status, scoped = await scrape(api, await api.token("read", ["other"]))
    assert status == 200
    projects = {dict(k)["project"] for k in scoped["trainledger_spend_month_to_date"]}
    assert projects == {"other"}
    assert {dict(k)["project"] for k in scoped["trainledger_spend_to_date"]} == {"other"}
    assert (await scrape(api, await api.token("ingest")))[0] == 403
    assert (await scrape(api, "tl_not-a-token"))[0] == 401


async def test_experiments_stay_within_the_cap_and_sum_exactly(clean_redis: str) -> None:
    config = SpendConfig(
        dimensions=("experiment", "owner"), top=5, ttl_seconds=0, deadline_seconds=FIGURES_WAIT_S
    )
    async for api in serve(clean_redis, config):
        await put_card(api)
        now = this_month()
        # 30 experiments, experiment i costs (i + 1) hours × 2.50; owners: 3.
        events = [
            event(
                f"x{i}",
                str(i + 1),
                stage="pretrain",
                experiment=f"exp-{i:02d}",
                owner=f"o{i % 3}",
                time=now,
            )
            for i in range(30)
        ]
        assert (await post(api, events))["accepted"] == 30
        await settled(api, "llm")
        _, found = await scrape(api, api.admin_token)
        by_experiment = {
            dict(k)["experiment"]: v
            for k, v in found["trainledger_experiment_spend_month_to_date"].items()
        }
        assert len(by_experiment) == 5
        # The four largest by name and cost, the other 26 summed exactly into one series.
        hours = {f"exp-{i:02d}": i + 1 for i in range(30)}
        top = {f"exp-{i}": usd(str(Decimal("2.50") * (i + 1))) for i in (29, 28, 27, 26)}
        rest = sum(h for name, h in hours.items() if name not in top) * Decimal("2.50")
        assert by_experiment == {**top, OTHER: usd(str(rest))}
        owners = {
            dict(k)["owner"]: v for k, v in found["trainledger_owner_spend_month_to_date"].items()
        }
        expected = {f"o{r}": sum(i + 1 for i in range(30) if i % 3 == r) for r in range(3)}
        assert owners == {o: usd(str(Decimal("2.50") * h)) for o, h in expected.items()}
        # Stage series keep their labels: the opt-in dimensions have their own families.
        assert list(found["trainledger_spend_month_to_date"]) == [
            labels(project="llm", currency="USD", stage="pretrain")
        ]


async def test_category_is_opt_in(clean_redis: str) -> None:
    config = SpendConfig(dimensions=("category",), ttl_seconds=0, deadline_seconds=FIGURES_WAIT_S)
    async for api in serve(clean_redis, config):
        await post_hand_worked(api)
        await settled(api, "llm")
        _, found = await scrape(api, api.admin_token)
        llm = {"project": "llm", "currency": "USD"}
        assert {
            k: v
            for k, v in found["trainledger_spend_month_to_date"].items()
            if ("project", "llm") in k
        } == {
            labels(**llm, stage="pretrain", category="compute"): usd("7.50"),
            labels(**llm, stage="pretrain", category="network"): usd("0.014"),
            labels(**llm, stage="eval", category="compute"): usd("3.00"),
            labels(**llm, stage="data_prep", category="storage"): usd("0.10"),
        }
        assert "trainledger_experiment_spend_month_to_date" not in found


async def test_many_projects_each_get_their_own_exact_figures(fresh: Api) -> None:
    """One read of many projects (a few pipelines): every project's series are its own, those
    with budgets and those without, those with spend this month and those without."""
    api = fresh
    await put_card(api)
    now, before = this_month(), last_month()
    events = []
    for p in range(40):
        events.append(event(f"m{p}", str(p + 1), project=f"p{p:02d}", stage="pretrain", time=now))
        if p % 3 == 0:  # some spent last month only, on top
            events.append(event(f"l{p}", "1", project=f"p{p:02d}", stage="eval", time=before))
    assert (await post(api, events))["accepted"] == len(events)
    async with api.client() as c:
        for p in range(0, 40, 4):
            r = await c.post(
                "/v1/budgets", json={"project": f"p{p:02d}", "name": "b", "amount": "7"}
            )
            assert r.status_code == 201, r.text
        r = await c.post("/v1/budgets", json={"project": "empty", "name": "b", "amount": "1"})
        assert r.status_code == 201, r.text
    await settled(api, *(f"p{p:02d}" for p in range(40)))
    _, found = await scrape(api, api.admin_token)
    for p in range(40):
        project = {"project": f"p{p:02d}", "currency": "USD"}
        month = Decimal("2.50") * (p + 1)
        to_date = month + (Decimal("2.50") if p % 3 == 0 else 0)
        stage = found["trainledger_spend_month_to_date"][labels(**project, stage="pretrain")]
        assert stage == usd(str(month))
        assert found["trainledger_spend_to_date"][labels(**project)] == usd(str(to_date))
        budgets = {
            dict(k)["budget"]: v
            for k, v in found["trainledger_budget_spend"].items()
            if dict(k)["project"] == project["project"]
        }
        assert list(budgets.values()) == ([usd(str(month))] if p % 4 == 0 else [])
    empty = [dict(k) for k in found["trainledger_budget_use_ratio"] if ("project", "empty") in k]
    assert (
        len(empty) == 1
        and found["trainledger_budget_use_ratio"][tuple(sorted(empty[0].items()))] == 0
    )
    assert not any(("project", "empty") in k for k in found["trainledger_spend_month_to_date"])


async def test_the_forecast_is_the_budget_status_forecast_at_the_same_time(fresh: Api) -> None:
    """At one instant the gauge's forecast is the exact linear forecast the budget API gives."""
    api = fresh
    await post_hand_worked(api)
    async with api.client() as c:
        r = await c.post("/v1/budgets", json={"project": "llm", "name": "all", "amount": "40"})
    assert r.status_code == 201
    await settled(api, "llm")
    store = Stores.from_url(api.redis_url)
    try:
        now = datetime.now(UTC)
        snapshot = await read_snapshot(store, RateCards(store), SpendConfig(), now=now)
        (budget,) = await list_budgets(store, "llm")
        status = await budget_status(store, budget, "USD", now=now)
    finally:
        await store.close()
    (llm,) = [p for p in snapshot.projects if p.project == "llm"]
    (figures,) = llm.budgets
    assert figures.spent == 10_614_000_000 and figures.limit == 40_000_000_000
    assert status.forecast is not None and figures.forecast is not None
    assert Decimal(status.forecast) == Decimal(figures.forecast).scaleb(-9)
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    length = int(((first + timedelta(days=32)).replace(day=1) - first).total_seconds())
    elapsed = max(int((now - first).total_seconds()), 1)
    assert figures.forecast == 10_614_000_000 * length // elapsed
