"""Events posted while a repricing is queued (issue 33, item 6): counted at once, but no budget
alert is decided on the figure that mixes two prices; once the job's rebuild settles, each
threshold the repriced figures reach fires exactly once, and none they do not reach ever does.

The job is kept queued by holding the project's lease as another worker would (the test
server's worker cannot claim it), then let go."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from trainledger.storage.keys import Keys

from tests.api.test_repricing import _ledger_at_old_price, alert_ids, card, wait_for_job
from tests.conftest import Api, event, sync_client


@contextmanager
def worker_busy(api: Api, project: str = "llm") -> Iterator[None]:
    """Another worker holds the project's lease meanwhile: its jobs stay queued."""
    client = sync_client(api.redis_url)
    client.set(Keys.job_lease(project), "another-worker", px=60_000)
    try:
        yield
    finally:
        client.delete(Keys.job_lease(project))
        client.close()


async def alerts(c: httpx.AsyncClient) -> list[dict[str, Any]]:
    r = await c.get("/v1/alerts", params={"project": "llm"})
    assert r.status_code == 200, r.text
    return list(r.json())


async def spent(c: httpx.AsyncClient, budget_id: str) -> str:
    r = await c.get(f"/v1/budgets/{budget_id}", params={"project": "llm"})
    assert r.status_code == 200, r.text
    return str(r.json()["spent"])


async def _reprice_while_queued(
    api: Api, c: httpx.AsyncClient, price: str, now: datetime
) -> tuple[str, dict[str, Any]]:
    """80.00 at the old price (50 % and 80 % fired), a version at `price` from 2 h back
    repriced, and 4 more identical events (at the new price) posted while its job is queued.
    Returns the budget id and the job."""
    budget_id, effective = await _ledger_at_old_price(c, now)
    r = await c.put("/v1/rate-cards/default", json=dict(card(price, effective), reprice=True))
    assert r.status_code == 202, r.text
    (job,) = r.json()["jobs"]
    when = (now - timedelta(hours=1)).isoformat()
    r = await c.post("/v1/events", json=[event(f"q{i}", "4", time=when) for i in range(4)])
    assert r.status_code == 200 and r.json()["accepted"] == 4, r.text
    assert (await c.get(job["href"])).json()["state"] == "queued"
    return budget_id, job


async def test_a_price_rise_fires_on_the_repriced_figure_once_not_on_the_mixed(
    api: Api,
) -> None:
    now = datetime.now(UTC)
    async with api.client() as c:
        with worker_busy(api):
            budget_id, job = await _reprice_while_queued(api, c, "5.00", now)
            # Counted at once: 80.00 at the old price + 4 x 20.00 = 160.00 mixed. Nothing is
            # decided on it (100 % reached on it would fire with a figure that is neither).
            assert await spent(c, budget_id) == "160.00"
            assert await alert_ids(c) == [f"{budget_id}:window:t50", f"{budget_id}:window:t80"]
        done = await wait_for_job(c, job["href"])
        assert done["state"] == "succeeded", done
        # Repriced: 4 x 10.00 + 8 x 20.00 = 200.00; the 100 % threshold fires once, on it.
        assert await spent(c, budget_id) == "200.00"
        fired = await alerts(c)
        assert [a["id"] for a in fired] == [
            f"{budget_id}:window:{t}" for t in ("t50", "t80", "t100")
        ]
        assert fired[-1]["spent"] == "200.00"
        assert done["result"]["alerts_fired"] == [f"{budget_id}:window:t100"]
        # Later batches are decided as usual again, and nothing fires twice.
        when = (now - timedelta(hours=1)).isoformat()
        r = await c.post("/v1/events", json=[event("late", "4", time=when)])
        assert r.status_code == 200, r.text
        assert await spent(c, budget_id) == "220.00"
        assert len(await alerts(c)) == 3


async def test_a_price_cut_never_fires_what_the_repriced_figures_do_not_reach(
    api: Api,
) -> None:
    now = datetime.now(UTC)
    async with api.client() as c:
        with worker_busy(api):
            budget_id, job = await _reprice_while_queued(api, c, "1.25", now)
            # Mixed: 80.00 + 4 x 5.00 = 100.00, the 100 % threshold reached on it: held.
            assert await spent(c, budget_id) == "100.00"
            assert await alert_ids(c) == [f"{budget_id}:window:t50", f"{budget_id}:window:t80"]
            # A budget created meanwhile fires nothing on the mixed figure either (90.00:
            # 100 % of it is reached only there).
            r = await c.post(
                "/v1/budgets",
                json={
                    "project": "llm",
                    "name": "second",
                    "amount": "90",
                    "period": "window",
                    "window_start": (now - timedelta(days=1)).isoformat(),
                    "window_end": (now + timedelta(days=1)).isoformat(),
                },
            )
            assert r.status_code == 201, r.text
            second = r.json()["id"]
            assert len(await alert_ids(c)) == 2
        done = await wait_for_job(c, job["href"])
        assert done["state"] == "succeeded", done
        # Repriced: 4 x 10.00 + 8 x 5.00 = 80.00: 100 % is not reached and never fired; the
        # second budget's 50 % and 80 % are, and fire once, on 80.00.
        assert await spent(c, budget_id) == "80.00"
        assert done["result"]["alerts_fired"] == [f"{second}:window:t50", f"{second}:window:t80"]
        fired = await alerts(c)
        assert sorted(a["id"] for a in fired) == sorted(
            [f"{b}:window:t{t}" for b in (budget_id, second) for t in (50, 80)]
        )
        assert {a["spent"] for a in fired[2:]} == {"80.00"}
        # Only the first budget's from here on.
        r = await c.delete(f"/v1/budgets/{second}", params={"project": "llm"})
        assert r.status_code == 204, r.text
        assert len(await alerts(c)) == 4
        # Only a batch that takes the repriced figure there fires it: 80.00 + 4 x 5.00.
        when = (now - timedelta(hours=1)).isoformat()
        r = await c.post("/v1/events", json=[event(f"z{i}", "4", time=when) for i in range(3)])
        assert r.status_code == 200, r.text
        assert len(await alerts(c)) == 4
        r = await c.post("/v1/events", json=[event("z3", "4", time=when)])
        assert r.status_code == 200, r.text
        fired = await alerts(c)
        assert [a["id"] for a in fired][-1] == f"{budget_id}:window:t100"
        assert fired[-1]["spent"] == "100.00" and len(fired) == 5


async def test_a_cancelled_repricing_releases_the_hold_and_decides_on_the_figures(
    api: Api,
) -> None:
    now = datetime.now(UTC)
    async with api.client() as c:
        with worker_busy(api):
            budget_id, job = await _reprice_while_queued(api, c, "5.00", now)
            assert len(await alert_ids(c)) == 2
            r = await c.post(f"/v1/jobs/{job['id']}/cancel", params={"project": "llm"})
            assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
            # Not repriced: the figures stand mixed (160.00), and the threshold they reach
            # fires now, once, as the batches held would have fired it.
            fired = await alerts(c)
            assert [a["id"] for a in fired][-1] == f"{budget_id}:window:t100"
            assert fired[-1]["spent"] == "160.00" and len(fired) == 3
        r = await c.post(
            "/v1/events", json=[event("after", "4", time=(now - timedelta(hours=1)).isoformat())]
        )
        assert r.status_code == 200, r.text
        assert len(await alert_ids(c)) == 3
