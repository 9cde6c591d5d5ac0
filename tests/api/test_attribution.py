"""Attribution: filters, tags, granularity, sorting, top-N; summary peaks and rework."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event

# The test card: gpu.h100.hour 2.50 (elastic), gpu.h100.reserved.hour 1.80 (fixed),
# network.cross_region.gb 0.02.


def at(days_ago: int, hour: int) -> str:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (day - timedelta(days=days_ago) + timedelta(hours=hour, minutes=5)).isoformat()


async def costs(api: Api, **params: Any) -> dict[str, Any]:
    async with api.client() as c:
        r = await c.get("/v1/costs", params={"project": "llm", **params})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def seed(api: Api) -> None:
    await put_card(api)
    await post(
        api,
        [
            # Three days ago: 10 h pretrain (25.00) by alice for team data, hour 02.
            event("a", "10", time=at(3, 2), stage="pretrain", owner="alice", tags={"team": "data"}),
            # Two days ago: 4 h eval (10.00) by bob, a rework of a failed run, hour 05.
            event("b", "4", time=at(2, 5), stage="eval", owner="bob", tags={"rework": "true"}),
            # Two days ago: 20 reserved hours (36.00, fixed) pretrain, hour 05.
            event("c", "20", sku="gpu.h100.reserved.hour", time=at(2, 5), stage="pretrain"),
            # Two days ago, hour 06: 2 h pretrain rework (5.00) for team data.
            event("d", "2", time=at(2, 6), stage="pretrain", tags={"rework": "1", "team": "data"}),
            # One day ago: 500 GB cross-region (10.00), data_prep, hour 23.
            event("e", "500", sku="network.cross_region.gb", time=at(1, 23), stage="data_prep"),
        ],
    )


async def test_filters_tags_and_sorting(api: Api) -> None:
    await seed(api)
    pretrain = await costs(api, stage="pretrain", group_by="sku")
    assert pretrain["total_cost"] == "66.00"  # 25 + 36 + 5
    assert [(r["key"]["sku"], r["cost"]) for r in pretrain["rows"]] == [
        ("gpu.h100.reserved.hour", "36.00"),
        ("gpu.h100.hour", "30.00"),
    ]
    team = await costs(api, group_by="tag.team,stage")
    assert {(r["key"]["tag.team"], r["key"]["stage"]): r["cost"] for r in team["rows"]} == {
        ("data", "pretrain"): "30.00",
        ("", "pretrain"): "36.00",
        ("", "eval"): "10.00",
        ("", "data_prep"): "10.00",
    }
    assert (await costs(api, tag="team:data"))["total_cost"] == "30.00"
    assert (await costs(api, fixed="fixed"))["total_cost"] == "36.00"
    assert (await costs(api, owner="bob", stage="eval"))["total_cost"] == "10.00"
    by_key = await costs(api, group_by="stage", sort="key")
    assert [r["key"]["stage"] for r in by_key["rows"]] == ["data_prep", "eval", "pretrain"]
    top = await costs(api, group_by="sku", top=1)
    # gpu.h100.hour 25 + 10 + 5 = 40.00 leads; reserved 36.00 + transfer 10.00 = 46.00 rest.
    assert [(r["key"]["sku"], r["cost"]) for r in top["rows"]] == [
        ("gpu.h100.hour", "40.00"),
        ("(other)", "46.00"),
    ]
    page = await costs(api, group_by="stage", limit=2)
    assert page["total_rows"] == 3 and page["next_offset"] == 2
    rest = await costs(api, group_by="stage", limit=2, offset=2)
    assert len(rest["rows"]) == 1 and rest["next_offset"] is None


async def test_granularity(api: Api) -> None:
    await seed(api)
    daily = await costs(api, granularity="day", group_by="")
    assert [r["cost"] for r in sorted(daily["rows"], key=lambda r: r["key"]["period"])] == [
        "25.00",
        "51.00",
        "10.00",
    ]
    hourly = await costs(api, granularity="hour", group_by="stage")
    got = {(r["key"]["period"][-2:], r["key"]["stage"]): r["cost"] for r in hourly["rows"]}
    assert got == {
        ("02", "pretrain"): "25.00",
        ("05", "eval"): "10.00",
        ("05", "pretrain"): "36.00",
        ("06", "pretrain"): "5.00",
        ("23", "data_prep"): "10.00",
    }
    monthly = await costs(api, granularity="month", group_by="category")
    assert sum(float(r["cost"]) for r in monthly["rows"]) == 86.0
    async with api.client() as c:
        bad = await c.get(
            "/v1/costs", params={"project": "llm", "granularity": "hour", "group_by": "sku"}
        )
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "group_by"


async def test_summary_peaks_fixed_share_and_rework(api: Api) -> None:
    await seed(api)
    async with api.client() as c:
        s = (await c.get("/v1/costs/summary", params={"project": "llm"})).json()
    assert s["total_cost"] == "86.00"
    assert (s["fixed_cost"], s["elastic_cost"], s["fixed_share"]) == ("36.00", "50.00", "0.4186")
    # Days: 25.00, 51.00, 10.00 over 3 days: average 28.666… → 28.67; peak 51.00; 51 / 28.666…
    # = 1.7791.
    daily = s["peak_daily"]
    assert (daily["periods"], daily["average"], daily["peak"]) == (3, "28.666666667", "51.00")
    assert daily["headroom_ratio"] == "1.7791"
    # Hours: 72 of them; the busiest is hour 05 two days ago: 46.00; average 86 / 72.
    hourly = s["peak_hourly"]
    assert (hourly["periods"], hourly["peak"]) == (72, "46.00")
    assert hourly["peak_at"].endswith("T05:00Z")
    assert hourly["headroom_ratio"] == "38.5116"  # 46 × 72 / 86
    # Rework: eval 10.00 of 10.00, pretrain 5.00 of 66.00.
    assert s["rework_cost"] == "15.00" and s["rework_share"] == "0.1744"
    assert s["rework_by_stage"] == [
        {"stage": "eval", "rework_cost": "10.00", "stage_cost": "10.00", "share": "1.0000"},
        {"stage": "pretrain", "rework_cost": "5.00", "stage_cost": "66.00", "share": "0.0758"},
    ]


async def test_attribution_tags_are_set_per_project_and_applied_by_a_rebuild(api: Api) -> None:
    await seed(api)
    assert (await costs(api, tag="owner_team:x"))["total_cost"] == "0.00"
    await post(api, [event("f", "1", time=at(1, 1), tags={"run": "r7"})])
    assert (await costs(api, tag="run:r7"))["total_cost"] == "0.00"  # not attributed yet
    async with api.client() as c:
        r = await c.put("/v1/projects/llm", json={"attribution_tags": ["run", "team", "rework"]})
        assert r.status_code == 200 and r.json()["attribution_tags"] == ["rework", "run", "team"]
        assert (await c.post("/v1/projects/llm/rebuild")).status_code == 200
    assert (await costs(api, tag="run:r7"))["total_cost"] == "2.50"
    assert (await costs(api, tag="team:data"))["total_cost"] == "30.00"
