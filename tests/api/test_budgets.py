"""Budgets and their alerts, decided atomically where the totals change."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, ServerThread, event

# gpu.h100.hour costs 2.50 on the test card: quantities below are in hours.


async def make_budget(api: Api, **fields: Any) -> dict[str, Any]:
    body = {"project": "llm", "name": "llm monthly", "amount": "100", **fields}
    async with api.client() as c:
        r = await c.post("/v1/budgets", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def alerts(api: Api, **params: Any) -> list[dict[str, Any]]:
    async with api.client() as c:
        r = await c.get("/v1/alerts", params={"project": "llm", **params})
    assert r.status_code == 200, r.text
    return list(r.json())


def this_month(hour: int = 1) -> str:
    """A time inside the current calendar month and in the past."""
    now = datetime.now(UTC)
    return max(now.replace(day=1, hour=0, minute=0), now - timedelta(hours=hour)).isoformat()


async def test_each_threshold_fires_once_under_concurrent_workers(api: Api) -> None:
    await put_card(api)
    budget = await make_budget(api)  # 100.00 a month, thresholds 50/80/100 %
    second = await asyncio.to_thread(lambda: ServerThread(api.redis_url).start())
    try:
        other = Api(second.base_url, api.admin_token, api.redis_url)
        # 60 events of 2 hours (5.00 each) = 300.00, posted concurrently to two servers.
        sends = [
            post(api if i % 2 else other, event(f"b{i}", "2", time=this_month())) for i in range(60)
        ]
        await asyncio.gather(*sends)
    finally:
        await asyncio.to_thread(second.stop)
    fired = await alerts(api)
    assert sorted(a["threshold_pct"] for a in fired) == [50, 80, 100]
    for a in fired:
        assert a["kind"] == "threshold" and a["budget_id"] == budget["id"]
        limit = {50: "50.00", 80: "80.00", 100: "100.00"}[a["threshold_pct"]]
        assert a["limit"] == limit
        # The alert records the spend right after the crossing: at most one event (5.00) past.
        spent = float(a["spent"])
        assert float(limit) <= spent < float(limit) + 5
    async with api.client() as c:
        status = (await c.get(f"/v1/budgets/{budget['id']}", params={"project": "llm"})).json()
    assert status["spent"] == "300.00" and status["used_pct"] == "300.00"
    assert len(status["fired"]) == 3


async def test_no_alert_for_a_crossing_that_did_not_happen(api: Api) -> None:
    await put_card(api)
    await make_budget(api)
    await post(api, [event("a", "31.996", time=this_month())])  # 79.99 of 100.00
    fired = await alerts(api)
    assert [a["threshold_pct"] for a in fired] == [50]
    await post(api, [event("b", "0.004", time=this_month())])  # exactly 80.00
    assert [a["threshold_pct"] for a in await alerts(api)] == [50, 80]


async def test_scoped_budget_counts_only_its_scope(api: Api) -> None:
    await put_card(api)
    await make_budget(
        api, amount="10", scope={"stage": "pretrain", "tags": {"team": "data"}}, thresholds=[100]
    )
    when = this_month()
    await post(
        api,
        [
            event("x1", "3", time=when, stage="pretrain", tags={"team": "data"}),  # 7.50 counts
            event("x2", "9", time=when, stage="midtrain", tags={"team": "data"}),  # other stage
            event("x3", "9", time=when, stage="pretrain", tags={"team": "eval"}),  # other tag
            event("x4", "9", time=when, stage="pretrain"),  # no tag
        ],
    )
    assert await alerts(api) == []
    await post(api, [event("x5", "1", time=when, stage="pretrain", tags={"team": "data"})])
    fired = await alerts(api)
    assert len(fired) == 1 and fired[0]["spent"] == "10.00"
    assert fired[0]["scope"] == {"stage": "pretrain", "tag.team": "data"}


async def test_budget_created_late_counts_what_was_spent(api: Api) -> None:
    await put_card(api)
    await post(api, [event(f"e{i}", "4", time=this_month()) for i in range(9)])  # 90.00
    budget = await make_budget(api)
    fired = await alerts(api)
    assert sorted(a["threshold_pct"] for a in fired) == [50, 80]
    await post(api, [event("e9", "4", time=this_month())])  # 100.00
    assert sorted(a["threshold_pct"] for a in await alerts(api)) == [50, 80, 100]
    async with api.client() as c:
        status = (await c.get(f"/v1/budgets/{budget['id']}", params={"project": "llm"})).json()
    assert status["spent"] == "100.00"


async def test_forecast_alert_fires_on_a_steep_run_and_not_on_a_flat_one(api: Api) -> None:
    await put_card(api)
    now = datetime.now(UTC)
    window = {
        "period": "window",
        "window_start": (now - timedelta(days=10)).isoformat(),
        "window_end": (now + timedelta(days=10)).isoformat(),
        "thresholds": [100],
        "forecast": {"min_elapsed_pct": 10},
    }
    flat = await make_budget(api, name="flat", scope={"stage": "eval"}, **window)
    steep = await make_budget(api, name="steep", scope={"stage": "pretrain"}, **window)
    when = (now - timedelta(hours=2)).isoformat()
    # Half the window has passed. Eval spends 40.00 (forecast 80.00: quiet); pretrain 60.00
    # (forecast 120.00 > 100.00: fires). Neither crosses its 100 % threshold.
    await post(api, [event("f1", "16", time=when, stage="eval")])
    await post(api, [event("f2", "24", time=when, stage="pretrain")])
    fired = await alerts(api, kind="forecast")
    assert [a["budget_id"] for a in fired] == [steep["id"]]
    assert fired[0]["spent"] == "60.00"
    # It fires once per period, not on every batch after.
    await post(api, [event("f3", "1", time=when, stage="pretrain")])
    assert len(await alerts(api, kind="forecast")) == 1
    async with api.client() as c:
        status = (await c.get(f"/v1/budgets/{flat['id']}", params={"project": "llm"})).json()
    assert status["forecast_over_budget"] is False


async def test_growth_alert_on_an_abnormal_day_only(api: Api) -> None:
    await put_card(api)
    await make_budget(
        api, amount="100000", thresholds=[100], growth={"multiple": "3", "trailing_days": 7}
    )
    today = datetime.now(UTC).replace(hour=0, minute=30, second=0, microsecond=0)
    # Seven days at 10.00 each (4 hours), then today.
    await post(
        api,
        [event(f"d{k}", "4", time=(today - timedelta(days=k)).isoformat()) for k in range(1, 8)],
    )
    await post(api, [event("t1", "12", time=today.isoformat())])  # 30.00 = 3 × average: quiet
    assert await alerts(api, kind="growth") == []
    await post(api, [event("t2", "0.004", time=today.isoformat())])  # 30.01 > 30.00: fires
    fired = await alerts(api, kind="growth")
    assert len(fired) == 1 and fired[0]["limit"] == "30.00" and fired[0]["spent"] == "30.01"
    await post(api, [event("t3", "8", time=today.isoformat())])  # once per day
    assert len(await alerts(api, kind="growth")) == 1


async def test_growth_alerts_do_not_depend_on_how_days_are_batched(api: Api) -> None:
    """The same days posted as one batch and one by one, in two projects with the same
    rule, raise growth alerts on the same days (a batch's earlier days are its history)."""
    await put_card(api)
    rule = {"multiple": "2", "trailing_days": 3}
    for project in ("one-batch", "day-by-day"):
        await make_budget(api, project=project, name=project, amount="1000000", growth=rule)
    today = datetime.now(UTC).replace(hour=0, minute=30, second=0, microsecond=0)
    hours = ["4", "4", "4", "4", "12", "4", "4", "4", "20", "4"]  # spikes on days 5 and 9
    days = [today - timedelta(days=len(hours) - i) for i in range(len(hours))]

    def usage(project: str, i: int) -> dict[str, object]:
        return event(f"{project}-{i}", hours[i], project=project, time=days[i].isoformat())

    await post(api, [usage("one-batch", i) for i in range(len(hours))])
    for i in range(len(hours)):
        await post(api, [usage("day-by-day", i)])
    fired = {}
    for project in ("one-batch", "day-by-day"):
        found = await alerts(api, project=project, kind="growth")
        fired[project] = sorted(a["period"] for a in found)
    assert fired["one-batch"] == fired["day-by-day"]
    spikes = {days[4].strftime("%Y%m%d"), days[8].strftime("%Y%m%d")}
    assert spikes <= set(fired["one-batch"])


async def test_alert_history_filters_and_pages(api: Api) -> None:
    await put_card(api)
    await make_budget(api, thresholds=[10, 20, 30, 40])
    await post(api, [event("p", "20", time=this_month())])  # 50.00 crosses all four
    first = await alerts(api, limit=2)
    assert [a["threshold_pct"] for a in first] == [10, 20]
    rest = await alerts(api, after=first[-1]["cursor"])
    assert [a["threshold_pct"] for a in rest] == [30, 40]
    assert await alerts(api, kind="growth") == []
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert await alerts(api, **{"from": future}) == []


async def test_invalid_budgets_name_the_field(api: Api) -> None:
    async with api.client() as c:
        r = await c.post("/v1/budgets", json={"project": "llm", "name": "x", "amount": "0"})
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "$.amount"
        r = await c.post(
            "/v1/budgets", json={"project": "llm", "name": "x", "amount": "5", "period": "window"}
        )
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "$.window_start"
        r = await c.post(
            "/v1/budgets",
            json={"project": "llm", "name": "x", "amount": "5", "scope": {"stage": "train"}},
        )
        assert r.json()["errors"][0]["field"] == "$.scope.stage"


async def test_a_batch_priced_before_a_budget_existed_still_counts_for_it(
    api: Api, store: Any
) -> None:
    """The ingest script refuses a batch priced with an old list of budgets (it is priced
    again), so a budget created between pricing and applying does not miss it."""
    from trainledger.ingest.store import IngestPlan

    await put_card(api)
    await post(api, [event("first", "4", time=this_month())])  # 10.00, before any budget
    meta = await store.projects.project_meta("llm")
    stale_rev = meta.get("budgets_rev", "0")
    await make_budget(api, thresholds=[100])
    plan = IngestPlan(
        project="llm",
        event_ids=["x"],
        seen_shards=[0],
        expiry_days=[99999],
        tier_checks=[],
        increments=[],
        log_blob=b"",
        currency="USD",
        rate_card="default",
        duplicates_seen=0,
        log_min_id="",
        budgets_rev=stale_rev,
    )
    outcome = await store.ingest.apply_batch(plan)
    assert outcome.status == 3 and outcome.budgets_rev != stale_rev
    # Through the real path (the ingestor reads the budgets again on status 3): the budget
    # counts both the spend before it existed and the new batch.
    await post(api, [event("second", "40", time=this_month())])  # 100.00
    fired = await alerts(api)
    assert [a["spent"] for a in fired] == ["110.00"]
