"""Totals rebuilt from the accepted-event log equal the incrementally kept ones, exactly."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from trainledger.ledger.eventlog import decode_log
from trainledger.ledger.folding import settle
from trainledger.stores import Stores

from tests.api.test_ingest import post, put_card, total
from tests.api.test_repricing import wait_for_job
from tests.conftest import TEST_CARD, Api, event, sync_client


def snapshot(url: str, project: str = "llm") -> dict[bytes, dict[bytes, bytes]]:
    """Every totals hash of the project (per-day totals, the daily index, tier counters,
    hourly totals, roll-ups)."""
    client = sync_client(url)
    keys = [
        k
        for k in client.keys(f"tl:{{p:{project}}}:*")
        if any(part in k for part in (b":tot:", b":tier:", b":hr:", b":ru:"))
        or k.endswith(b":daily")
    ]
    return {k: client.hgetall(k) for k in sorted(keys)}


def random_events(rng: random.Random, n: int) -> list[dict[str, object]]:
    now = datetime.now(UTC)
    skus = [
        "gpu.h100.hour",
        "gpu.h100.reserved.hour",
        "storage.hot.gb_day",
        "network.cross_region.gb",
    ]
    out = []
    for i in range(n):
        when = now - timedelta(days=rng.randint(0, 33), minutes=rng.randint(1, 1000))
        qty = Decimal(rng.randint(0, 400_000_000)) / Decimal(1_000_000)
        out.append(
            event(
                f"r{i}",
                str(qty),
                sku=rng.choice(skus),
                time=when.isoformat(),
                stage=rng.choice(["pretrain", "midtrain", "eval"]),
                experiment=rng.choice(["", "mix-a", "mix-b"]),
                owner=rng.choice(["alice", "bob"]),
            )
        )
    return out


async def test_rebuild_reproduces_incremental_totals_exactly(api: Api, store: Stores) -> None:
    await put_card(api)
    rng = random.Random(7)
    events = random_events(rng, 600)
    batches = [events[i : i + 40] for i in range(0, len(events), 40)]
    # Concurrent batches, plus a retry of some of them, so the log order is not the send order.
    results = await asyncio.gather(*[post(api, b) for b in batches + batches[:3]])
    assert sum(int(r["accepted"]) for r in results) == 600  # type: ignore[call-overload]
    await settle(store, "llm")  # the totals queued by the batches, folded in
    before = snapshot(api.redis_url)
    assert any(b":tier:" in k for k in before)  # graduated tiers were exercised
    # Roll-ups at day and month grain, and their coverage counter, were written too.
    assert any(b":ru:exp:" in k and len(k.rsplit(b":", 1)[1]) == 6 for k in before)
    assert any(b":ru:xsku:" in k and len(k.rsplit(b":", 1)[1]) == 8 for k in before)
    assert any(k.endswith(b":ru:events") for k in before)
    # The cost-effect sums too (service/ledger/effectsums.py), with their coverage.
    assert any(b":ru:eff:" in k and len(k.rsplit(b":", 1)[1]) == 6 for k in before)
    assert any(b":ru:effq:" in k and len(k.rsplit(b":", 1)[1]) == 8 for k in before)
    assert any(b"eff1" in fields for k, fields in before.items() if k.endswith(b":ru:events"))

    # Each logged event carries its cost: their sum is the running total.
    logged = 0
    after = "-"
    while page := await store.ledger.log_entries("llm", after=after):
        for entry_id, blob in page:
            after = entry_id
            logged += sum(row[8] for row in decode_log(blob))
    daily_total = sum((await store.ledger.daily_costs("llm")).values())
    assert logged == daily_total

    async with api.client() as c:
        r = await c.post("/v1/projects/llm/rebuild")
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["events"] == 600 and report["changed"] is False
    assert snapshot(api.redis_url) == before


async def test_rebuild_applies_a_retroactive_rate_card_fix(api: Api) -> None:
    await put_card(api)
    events = [event(f"g{i}", "10") for i in range(30)]  # 300 GPU-hours at 2.50
    await post(api, events)
    assert (await total(api))["total_cost"] == "750.00"
    fixed = json.loads(json.dumps(TEST_CARD))
    fixed["skus"][0]["unit_price"] = "2.00"  # the contract price was 2.00 all along
    fixed["effective_from"] = "2020-01-01T00:00:00Z"
    async with api.client() as c:
        # A version that changes priced figures is refused unless they are repriced with it ...
        assert (await c.put("/v1/rate-cards/default", json=fixed)).status_code == 409
        assert (await total(api))["total_cost"] == "750.00"
        r = await c.put("/v1/rate-cards/default", json=dict(fixed, reprice=True))
        assert r.status_code == 202, r.text
        job = await wait_for_job(c, r.json()["jobs"][0]["href"])
    assert job["state"] == "succeeded", job
    assert job["result"]["cost_before"] == "750.00" and job["result"]["cost_after"] == "600.00"
    assert (await total(api))["total_cost"] == "600.00"
    # ... and ingestion continues on the rebuilt counters.
    await post(api, [event("late", "1")])
    assert (await total(api))["total_cost"] == "602.00"


async def test_rebuild_refuses_when_an_event_can_no_longer_be_priced(api: Api) -> None:
    await put_card(api)
    await post(api, [event("x", "1", sku="network.cross_region.gb")])
    card = json.loads(json.dumps(TEST_CARD))
    card["skus"] = [s for s in card["skus"] if s["code"] != "network.cross_region.gb"]
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=dict(card, reprice=True))
        assert r.status_code == 202, r.text
        job = await wait_for_job(c, r.json()["jobs"][0]["href"])
        assert job["state"] == "failed" and "network.cross_region.gb" in job["error"], job
        r = await c.post("/v1/projects/llm/rebuild")
    assert r.status_code == 409
    assert "network.cross_region.gb" in r.json()["detail"]
    assert (await total(api))["total_cost"] == "0.02"


async def test_rebuild_as_a_job(api: Api) -> None:
    """`?async=true` or `Prefer: respond-async`: 202 and a job that does the same rebuild."""
    await put_card(api)
    await post(api, [event(f"j{i}", "2") for i in range(5)])  # 10 GPU-hours at 2.50
    async with api.client() as c:
        for kwargs in (
            {"params": {"async": "true"}},
            {"headers": {"Prefer": "wait=5, respond-async"}},
        ):
            r = await c.post("/v1/projects/llm/rebuild", **kwargs)
            assert r.status_code == 202, r.text
            queued = r.json()
            assert queued["kind"] == "rebuild" and queued["progress"]["total"] == 5
            assert r.headers["location"] == queued["href"]
            job = await wait_for_job(c, queued["href"])
            assert job["state"] == "succeeded", job
            assert job["progress"] == {"done": 5, "total": 5}
            assert job["result"]["events"] == 5 and job["result"]["cost_after"] == "25.00"
            assert job["result"]["changed"] is False
        # Without either, the answer is the report, as before.
        r = await c.post("/v1/projects/llm/rebuild")
        assert r.status_code == 200 and r.json()["cost_after"] == "25.00", r.text
    assert (await total(api))["total_cost"] == "25.00"
