"""A past-dated rate-card version over real HTTP (issue 33, item 6): refused while it would mix
two prices, stored and repriced as a job with `"reprice": true`, budgets and alerts settled on the
repriced figures exactly once."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.conftest import TEST_CARD, Api, event


def card(gpu_price: str, effective_from: datetime) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(TEST_CARD)
    body["skus"][0]["unit_price"] = gpu_price
    body["effective_from"] = effective_from.isoformat()
    return body


async def wait_for_job(c: httpx.AsyncClient, href: str) -> dict[str, Any]:
    """Poll a job until it ends (the test server's worker looks for work twice a second)."""
    for _ in range(400):
        r = await c.get(href)
        assert r.status_code == 200, r.text
        job = r.json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return dict(job)
        await asyncio.sleep(0.05)
    raise AssertionError(f"job did not end: {job}")


async def summary_total(c: httpx.AsyncClient, project: str = "llm") -> str:
    r = await c.get("/v1/costs", params={"project": project, "group_by": "sku"})
    assert r.status_code == 200, r.text
    return str(r.json()["total_cost"])


async def alert_ids(c: httpx.AsyncClient, project: str = "llm") -> list[str]:
    r = await c.get("/v1/alerts", params={"project": project})
    assert r.status_code == 200, r.text
    return [a["id"] for a in r.json()]


async def _ledger_at_old_price(c: httpx.AsyncClient, now: datetime) -> tuple[str, datetime]:
    """Card v1 at 2.50 a GPU-hour, a 100.00 budget over a window, and 4 identical events of 4
    GPU-hours before `now - 2h` and 4 after: 80.00, the 50 % and 80 % thresholds fired."""
    assert (
        await c.put("/v1/rate-cards/default", json=card("2.50", now - timedelta(days=30)))
    ).status_code == 201
    r = await c.post(
        "/v1/budgets",
        json={
            "project": "llm",
            "name": "window",
            "amount": "100",
            "period": "window",
            "window_start": (now - timedelta(days=1)).isoformat(),
            "window_end": (now + timedelta(days=1)).isoformat(),
        },
    )
    assert r.status_code == 201, r.text
    budget_id = r.json()["id"]
    before = [event(f"b{i}", "4", time=(now - timedelta(hours=3)).isoformat()) for i in range(4)]
    after = [event(f"a{i}", "4", time=(now - timedelta(hours=1)).isoformat()) for i in range(4)]
    for batch in (before, after):
        r = await c.post("/v1/events", json=batch)
        assert r.status_code == 200 and r.json()["accepted"] == 4, r.text
    assert await summary_total(c) == "80.00"
    return budget_id, now - timedelta(hours=2)


async def test_a_past_dated_version_is_refused_naming_what_it_affects(api: Api) -> None:
    now = datetime.now(UTC)
    async with api.client() as c:
        _, effective = await _ledger_at_old_price(c, now)
        fired = await alert_ids(c)
        r = await c.put("/v1/rate-cards/default", json=card("5.00", effective))
        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["type"].endswith("/repricing-needed")
        assert problem["field"] == "effective_from"
        day = (now - timedelta(hours=1)).strftime("%Y-%m-%d")
        assert problem["affected"] == [{"project": "llm", "days": [day], "events": 4}]
        # Nothing changed: no version 2, the same figures, no job, no alert.
        history = (await c.get("/v1/rate-cards/default")).json()["history"]
        assert [v["version"] for v in history] == [1]
        assert await summary_total(c) == "80.00"
        assert (await c.get("/v1/jobs", params={"project": "llm"})).json() == {"jobs": []}
        assert await alert_ids(c) == fired
        # A version effective after every priced event changes nothing priced: stored at once.
        r = await c.put("/v1/rate-cards/default", json=card("5.00", now + timedelta(minutes=1)))
        assert r.status_code == 201, r.text


async def test_a_past_dated_version_that_changes_no_priced_sku_is_stored_at_once(api: Api) -> None:
    """Adding a SKU (the getting-started's fix for a rejected event), editing a description or
    repricing a SKU no event used changes no figure: stored (201), no job; a version that also
    changes the used SKU's price is refused, naming only its events."""
    now = datetime.now(UTC)
    async with api.client() as c:
        _, effective = await _ledger_at_old_price(c, now)
        added = card("2.50", effective)
        added["skus"].append(
            {"code": "gpu.b300.hour", "category": "compute", "unit": "hour", "unit_price": "9.50"}
        )
        added["skus"][0]["description"] = "an H100 hour, list price"
        added["skus"][1]["unit_price"] = "1.70"  # the reserved SKU: no event of it
        r = await c.put("/v1/rate-cards/default", json=added)
        assert r.status_code == 201, r.text
        assert (await c.get("/v1/jobs", params={"project": "llm"})).json() == {"jobs": []}
        assert await summary_total(c) == "80.00"
        r = await c.post("/v1/events", json=[event("b300", "1", sku="gpu.b300.hour")])
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        # Now the b300 SKU has an event in the span: changing its price needs a repricing,
        # which names that one event (not the eight H100 events, whose price stays).
        added["skus"][-1]["unit_price"] = "9.00"
        r = await c.put("/v1/rate-cards/default", json=added)
        assert r.status_code == 409, r.text
        day = (now - timedelta(hours=1)).strftime("%Y-%m-%d")  # the event's default time
        assert r.json()["affected"] == [{"project": "llm", "days": [day], "events": 1}], r.text
        # A new currency changes every figure: all the span's events.
        r = await c.put("/v1/rate-cards/default", json=dict(added, currency="EUR"))
        assert r.status_code == 409, r.text
        assert r.json()["affected"][0]["events"] == 5, r.text


async def test_a_repriced_version_settles_totals_and_alerts_exactly_once(api: Api) -> None:
    now = datetime.now(UTC)
    async with api.client() as c:
        budget_id, effective = await _ledger_at_old_price(c, now)
        assert sorted(await alert_ids(c)) == [f"{budget_id}:window:t50", f"{budget_id}:window:t80"]
        r = await c.put("/v1/rate-cards/default", json=dict(card("5.00", effective), reprice=True))
        assert r.status_code == 202, r.text
        answer = r.json()
        assert answer["version"]["version"] == 2
        assert [a["project"] for a in answer["affected"]] == ["llm"]
        (job,) = answer["jobs"]
        assert job["project"] == "llm" and job["kind"] == "reprice"
        assert job["params"]["rate_card"] == "default" and job["params"]["version"] == 2
        done = await wait_for_job(c, job["href"])
        assert done["state"] == "succeeded", done
        # Another project's token never sees the job: its own project has no such job, and
        # llm is outside its list.
        async with api.client(await api.token("admin", ["other"])) as outsider:
            r = await outsider.get(f"/v1/jobs/{job['id']}", params={"project": "other"})
            assert r.status_code == 404, r.text
            r = await outsider.get(f"/v1/jobs/{job['id']}", params={"project": "llm"})
            assert r.status_code == 403, r.text
            r = await outsider.delete(f"/v1/jobs/{job['id']}", params={"project": "llm"})
            assert r.status_code == 403, r.text
        assert done["progress"] == {"done": 8, "total": 8}
        report = done["result"]
        assert report["cost_before"] == "80.00" and report["cost_after"] == "120.00"
        # The 100 % threshold the repriced spend reached fires now, once.
        assert report["alerts_fired"] == [f"{budget_id}:window:t100"]

        # Identical events, one price each side of the version's start: 4 x 10.00 + 4 x 20.00.
        assert await summary_total(c) == "120.00"
        status = (await c.get(f"/v1/budgets/{budget_id}", params={"project": "llm"})).json()
        assert status["spent"] == "120.00"
        # Ingestion goes on from the repriced counters: one more identical event at 5.00.
        r = await c.post(
            "/v1/events", json=[event("a-late", "4", time=(now - timedelta(hours=1)).isoformat())]
        )
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        assert await summary_total(c) == "140.00"
        status = (await c.get(f"/v1/budgets/{budget_id}", params={"project": "llm"})).json()
        assert status["spent"] == "140.00"
        # Every threshold fired exactly once, none on the mixed figure after the repricing.
        ids = await alert_ids(c)
        assert sorted(ids) == [f"{budget_id}:window:{t}" for t in ("t100", "t50", "t80")]
        # A rebuild now changes nothing and fires nothing again.
        r = await c.post("/v1/projects/llm/rebuild")
        assert r.status_code == 200, r.text
        assert r.json()["changed"] is False and r.json()["alerts_fired"] == []
        assert await alert_ids(c) == ids


async def test_a_price_cut_repriced_fires_nothing_twice_and_misses_nothing(api: Api) -> None:
    now = datetime.now(UTC)
    async with api.client() as c:
        budget_id, effective = await _ledger_at_old_price(c, now)
        r = await c.put("/v1/rate-cards/default", json=dict(card("1.25", effective), reprice=True))
        assert r.status_code == 202, r.text
        done = await wait_for_job(c, r.json()["jobs"][0]["href"])
        assert done["state"] == "succeeded", done
        # 4 x 10.00 before the version's start, 4 x 5.00 after; nothing newly reached.
        assert done["result"]["cost_after"] == "60.00" and done["result"]["alerts_fired"] == []
        assert await summary_total(c) == "60.00"
        when = (now - timedelta(hours=1)).isoformat()
        # 75.00, then 100.00: the batch crosses 80 % (fired on the old figures: not again) and
        # 100 %, reached on the repriced counters, which fires once.
        r = await c.post("/v1/events", json=[event(f"c{i}", "4", time=when) for i in range(3)])
        assert r.status_code == 200, r.text
        assert await alert_ids(c) == [f"{budget_id}:window:t50", f"{budget_id}:window:t80"]
        r = await c.post("/v1/events", json=[event(f"d{i}", "4", time=when) for i in range(5)])
        assert r.status_code == 200, r.text
        assert await summary_total(c) == "100.00"
        status = (await c.get(f"/v1/budgets/{budget_id}", params={"project": "llm"})).json()
        assert status["spent"] == "100.00"
        ids = await alert_ids(c)
        assert sorted(ids) == [f"{budget_id}:window:{t}" for t in ("t100", "t50", "t80")]


async def test_every_project_on_the_card_is_named_and_repriced_and_no_other(api: Api) -> None:
    now = datetime.now(UTC)
    when = (now - timedelta(hours=1)).isoformat()
    async with api.client() as c:
        for name in ("default", "premium"):
            r = await c.put(f"/v1/rate-cards/{name}", json=card("2.50", now - timedelta(days=30)))
            assert r.status_code == 201, r.text
        r = await c.put("/v1/projects/px", json={"rate_card": "premium"})
        assert r.status_code == 200, r.text
        for project in ("pa", "pb", "px"):
            r = await c.post(
                "/v1/events", json=[event(f"{project}-1", "4", project=project, time=when)]
            )
            assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        v2 = card("5.00", now - timedelta(hours=2))
        r = await c.put("/v1/rate-cards/default", json=v2)
        assert r.status_code == 409, r.text
        day = (now - timedelta(hours=1)).strftime("%Y-%m-%d")
        assert r.json()["affected"] == [
            {"project": p, "days": [day], "events": 1} for p in ("pa", "pb")
        ]
        r = await c.put("/v1/rate-cards/default", json=dict(v2, reprice=True))
        assert r.status_code == 202, r.text
        jobs = r.json()["jobs"]
        assert [j["project"] for j in jobs] == ["pa", "pb"]
        for job in jobs:
            assert (await wait_for_job(c, job["href"]))["state"] == "succeeded"
        assert [await summary_total(c, p) for p in ("pa", "pb", "px")] == [
            "20.00",
            "20.00",
            "10.00",
        ]
        assert (await c.get("/v1/jobs", params={"project": "px"})).json() == {"jobs": []}
