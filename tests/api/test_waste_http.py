"""The waste report over HTTP, on events posted through the real ingest path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event


def at(days_ago: int, hour: int = 10) -> str:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (day - timedelta(days=days_ago) + timedelta(hours=hour)).isoformat()


async def report(api: Api, **params: Any) -> dict[str, Any]:
    async with api.client() as c:
        r = await c.get("/v1/reports/waste", params={"project": "llm", **params})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_idle_reservation_and_repeated_pull(api: Api) -> None:
    await put_card(api)
    reserved = "gpu.h100.reserved.hour"  # fixed, 1.80 an hour
    await post(
        api,
        [
            # Two days ago: 8 reserved hours paid (14.40), 5 used (tagged usage on any SKU).
            event("paid-2", "8", sku=reserved, time=at(2)),
            event("use-2", "5", time=at(2), tags={"reservation": reserved}),
            # Three days ago: 8 paid, 8 used: nothing idle.
            event("paid-3", "8", sku=reserved, time=at(3)),
            event("use-3", "8", time=at(3), tags={"reservation": reserved}),
            # The same dataset pulled to the same region twice: 500 GB at 0.02 = 10.00 wasted.
            event(
                "pull-1",
                "500",
                sku="network.cross_region.gb",
                time=at(4),
                tags={"dataset": "fineweb", "dest_region": "eu"},
            ),
            event(
                "pull-2",
                "500",
                sku="network.cross_region.gb",
                time=at(1),
                tags={"dataset": "fineweb", "dest_region": "eu"},
            ),
        ],
    )
    out = await report(api)
    found = {f["kind"]: f for f in out["findings"]}
    # Idle: 3 of 8 paid hours two days ago: 14.40 × 3 / 8 = 5.40.
    assert found["reserved_idle"]["cost_so_far"] == "5.40"
    assert found["cross_region_repull"]["cost_so_far"] == "10.00"
    assert "pull-2" in found["cross_region_repull"]["evidence"]["event_ids"]
    assert out["total_waste"] == "15.40"
    assert all(f["action"] for f in out["findings"])


async def test_policy_and_experiment_progress(api: Api) -> None:
    await put_card(api)
    async with api.client() as c:
        default = (await c.get("/v1/reports/waste/policy", params={"project": "llm"})).json()
        assert default["idle_days"] == 2
        r = await c.put(
            "/v1/reports/waste/policy", params={"project": "llm"}, json={"idle_days": 1}
        )
        assert r.status_code == 200 and r.json()["idle_days"] == 1
        bad = await c.put(
            "/v1/reports/waste/policy", params={"project": "llm"}, json={"idle_dayz": 1}
        )
        assert bad.status_code == 400
    # An experiment spending for three days with no progress report at all, the last time two
    # hours ago: inside the 1-day idle window at any time of day (a fixed 10:00 UTC was not,
    # after 10:00).
    now = datetime.now(UTC)
    await post(
        api,
        [
            event(
                f"x{k}",
                "2",
                time=(now - timedelta(days=k, hours=2)).isoformat(),
                experiment="mix-b",
            )
            for k in (0, 1, 2)
        ],
    )
    out = await report(api)
    kinds = [f["kind"] for f in out["findings"]]
    assert kinds == ["experiment_no_progress"]
    # After it reports progress today, it is no longer "without progress".
    async with api.client() as c:
        r = await c.post(
            "/v1/experiments/progress",
            params={"project": "llm"},
            json={"experiment": "mix-b", "metric": "eval_loss", "value": "2.31"},
        )
        assert r.status_code == 200, r.text
    assert [f["kind"] for f in (await report(api))["findings"]] == []
