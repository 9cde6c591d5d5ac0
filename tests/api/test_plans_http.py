"""Plans over HTTP: the dry-run estimate, registration with budgets, progress and plan vs actual."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from trainledger.ratecards.catalog import RateCards
from trainledger.spend_metrics.service import read_snapshot
from trainledger.spend_metrics.settings import SpendConfig
from trainledger.stores import Stores

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event


def window(days_before: int = 10, days_after: int = 10) -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "window_start": (now - timedelta(days=days_before)).isoformat(),
        "window_end": (now + timedelta(days=days_after)).isoformat(),
    }


def plan_body(**extra: Any) -> dict[str, Any]:
    return {
        "project": "llm",
        "name": "7b-run",
        "rate_card": "default",
        "currency": "USD",
        **window(),
        "stages": [
            {"stage": "pretrain", "resources": [{"sku": "gpu.h100.hour", "quantity": "400"}]},
            {"stage": "eval", "resources": [{"sku": "gpu.h100.hour", "quantity": "40"}]},
        ],
        **extra,
    }


async def test_estimate_turns_model_terms_into_hours_by_6nd(api: Api) -> None:
    await put_card(api)
    body = plan_body(
        stages=[
            {
                "stage": "pretrain",
                "model": {
                    "parameters": 7_000_000_000,
                    "tokens": 1_000_000_000_000,
                    "accelerator_sku": "gpu.h100.hour",
                    "peak_flops_per_accelerator": "1e15",
                    "mfu": "0.5",
                },
            }
        ]
    )
    async with api.client() as c:
        r = await c.post("/v1/plans/estimate", json=body)
    assert r.status_code == 200, r.text
    est = r.json()
    step = est["stages"][0]["derivation"]
    # 6 × 7e9 × 1e12 = 4.2e22 FLOPs; at 1e15 × 0.5 FLOP/s that is 8.4e7 s = 23,333.333333 h
    # (micro-hours, half-even); at 2.50 per hour: 23,333,333,333 µh × 2.5 = 58,333.3333325.
    assert same_number(step["flops"], "42000000000000000000000")
    assert step["accelerator_hours"] == "23333.333333"
    assert est["total"] == "58333.3333325"
    # Nothing was saved.
    async with api.client() as c:
        assert (await c.get("/v1/plans", params={"project": "llm"})).json() == []


def same_number(text: str, expected: str) -> bool:
    return Decimal(text) == Decimal(expected)


async def test_register_creates_budgets_and_status_tracks_earned_value(api: Api) -> None:
    await put_card(api)
    async with api.client() as c:
        r = await c.post("/v1/plans", json=plan_body())
        assert r.status_code == 201, r.text
        plan = r.json()
        assert plan["estimate"]["total"] == "1100.00"  # 440 hours at 2.50
        budgets = (await c.get("/v1/budgets", params={"project": "llm"})).json()
    amounts = sorted((b["name"], b["amount"], b.get("scope", {}).get("stage")) for b in budgets)
    assert amounts == [
        ("plan 7b-run", "1100.00", None),
        ("plan 7b-run / eval", "100.00", "eval"),
        ("plan 7b-run / pretrain", "1000.00", "pretrain"),
    ]
    assert {b["id"] for b in budgets} == set(plan["budget_ids"])

    when = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    await post(
        api,
        [
            event("p1", "200", time=when, stage="pretrain"),  # 500.00
            event("e1", "10", time=when, stage="eval"),  # 25.00
            event("x1", "4", time=when, stage="data_prep"),  # 10.00, a stage the plan lacks
        ],
    )
    async with api.client() as c:
        r = await c.post(
            f"/v1/plans/{plan['id']}/progress",
            params={"project": "llm"},
            json={"stage": "pretrain", "fraction_done": "0.4"},
        )
        assert r.status_code == 200, r.text
        status = (await c.get(f"/v1/plans/{plan['id']}/status", params={"project": "llm"})).json()
    pretrain, evaluation = status["stages"]
    # Pretrain: BAC 1000, AC 500, 40 % done: EV 400, CPI 0.8, EAC 500 / 0.4 = 1250, VAC -250.
    assert pretrain["actual"] == "500.00" and pretrain["earned_value"] == "400.00"
    assert pretrain["cpi"] == "0.8000"
    assert pretrain["forecast_at_completion"] == "1250.00" and pretrain["variance"] == "-250.00"
    # Eval: no progress yet: EAC = max(BAC 100, AC 25) = 100.
    assert evaluation["forecast_at_completion"] == "100.00" and evaluation["variance"] == "0.00"
    assert status["actual"] == "535.00"
    assert status["actual_outside_plan_stages"] == "10.00"
    assert status["forecast_at_completion"] == "1360.00"  # 1250 + 100 + 10
    assert status["variance"] == "-260.00"
    assert status["actual_by_category"] == {"compute": "535.00"}


async def test_progress_in_tokens_and_its_errors(api: Api) -> None:
    await put_card(api)
    body = plan_body(
        stages=[
            {
                "stage": "pretrain",
                "model": {
                    "parameters": 1_000_000_000,
                    "tokens": 4_000_000,
                    "accelerator_sku": "gpu.h100.hour",
                    "peak_flops_per_accelerator": "1e12",
                    "mfu": "0.5",
                },
            },
            {"stage": "eval", "resources": [{"sku": "gpu.h100.hour", "quantity": "1"}]},
            {"stage": "eval", "resources": [{"sku": "gpu.h100.hour", "quantity": "1"}]},
        ]
    )
    async with api.client() as c:
        plan = (await c.post("/v1/plans", json=body)).json()
        url = f"/v1/plans/{plan['id']}/progress"
        ok = await c.post(
            url, params={"project": "llm"}, json={"stage": "pretrain", "tokens_done": 1_000_000}
        )
        assert ok.status_code == 200 and ok.json()["fraction"] == "0.250000"
        for bad, field in [
            ({"stage": "midtrain", "fraction_done": "0.1"}, "$.stage"),
            ({"stage": "eval", "fraction_done": "0.1"}, "$.stage"),  # two eval stages
            ({"stage_index": 1, "tokens_done": 5}, "$.tokens_done"),  # eval is not in tokens
            ({"stage_index": 0, "fraction_done": "1.5"}, "$"),
            ({"stage_index": 9, "fraction_done": "0.5"}, "$.stage_index"),
        ]:
            r = await c.post(url, params={"project": "llm"}, json=bad)
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["errors"][0]["field"] == field
        missing = await c.get("/v1/plans/pln_nope/status", params={"project": "llm"})
        assert missing.status_code == 404


async def test_plan_errors_name_the_field(api: Api) -> None:
    await put_card(api)
    async with api.client() as c:
        r = await c.post("/v1/plans/estimate", json=plan_body(rate_card="nope"))
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "$.rate_card"
        bad_sku = plan_body(
            stages=[{"stage": "eval", "resources": [{"sku": "gpu.x.hour", "quantity": "1"}]}]
        )
        r = await c.post("/v1/plans/estimate", json=bad_sku)
        assert r.status_code == 422 and "stages[0]" in r.json()["errors"][0]["field"]


async def test_plan_budgets_forecast_by_earned_value_everywhere(api: Api) -> None:
    """A plan's budgets forecast from the plan's progress, and the budget status (which the
    dashboard shows), the spend gauge and the forecast alert read the same figure."""
    await put_card(api)
    async with api.client() as c:
        plan = (await c.post("/v1/plans", json=plan_body())).json()
    when = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    await post(
        api,
        [
            event("p1", "200", time=when, stage="pretrain"),  # 500.00
            event("e1", "10", time=when, stage="eval"),  # 25.00
            event("x1", "4", time=when, stage="data_prep"),  # 10.00
        ],
    )
    async with api.client() as c:
        for stage, done in (("pretrain", "0.4"), ("eval", "1")):
            r = await c.post(
                f"/v1/plans/{plan['id']}/progress",
                params={"project": "llm"},
                json={"stage": stage, "fraction_done": done},
            )
            assert r.status_code == 200, r.text
        # Halfway through the window a linear projection of the plan's 540.00 stays under
        # 1,100.00 × 0.5; by earned value (EV 400 + 100 of 1,100) it is 540 / 0.4545... over.
        await post(api, [event("p2", "2", time=when, stage="pretrain")])  # 5.00
        by_name = {}
        for b in (await c.get("/v1/budgets", params={"project": "llm"})).json():
            by_name[b["name"]] = (
                await c.get(f"/v1/budgets/{b['id']}", params={"project": "llm"})
            ).json()
        fired = (await c.get("/v1/alerts", params={"project": "llm", "kind": "forecast"})).json()
    pretrain, evaluation = by_name["plan 7b-run / pretrain"], by_name["plan 7b-run / eval"]
    # Pretrain: 505.00 spent, 40 % done: 1,262.50, over its 1,000.00.
    assert pretrain["budget"]["earned"] == "0.400000000"
    assert pretrain["forecast"] == "1262.50" and pretrain["forecast_over_budget"] is True
    # Eval: finished at 25.00: forecast its spend (a linear projection said 50.00).
    assert evaluation["forecast"] == "25.00" and evaluation["forecast_over_budget"] is False
    whole = by_name["plan 7b-run"]
    assert whole["budget"]["earned"] == "0.454545455"  # (400 + 100) / 1100
    assert Decimal(whole["forecast"]) == Decimal("1187.999998812")  # 540 / 0.454545455, to the nano
    assert whole["forecast_over_budget"] is True
    assert [a["budget_name"] for a in fired] == ["plan 7b-run"]

    store = Stores.from_url(api.redis_url)
    try:
        snapshot = await read_snapshot(store, RateCards(store), SpendConfig())
    finally:
        await store.close()
    (llm,) = [p for p in snapshot.projects if p.project == "llm"]
    gauges = {f.name: f.forecast for f in llm.budgets}
    for name, status in by_name.items():
        assert gauges[name] is not None
        assert Decimal(gauges[name]).scaleb(-9) == Decimal(status["forecast"]), name
