"""One counter, one truth: the project's duplicate counter is the sum of the duplicates the
ingest answers reported (duplicates inside one body included), and hour granularity counts the
same events as day granularity (hours whose events cost nothing included)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import msgspec

from tests.conftest import TEST_CARD, Api, event

FREE_CARD = {
    **TEST_CARD,
    "skus": [
        *TEST_CARD["skus"],  # type: ignore[list-item]
        {"code": "free.probe", "category": "ops", "unit": "call", "unit_price": "0"},
    ],
}


async def _post(c: Any, body: Any, media: str = "application/json") -> dict[str, Any]:
    data = msgspec.msgpack.encode(body) if media == "application/msgpack" else None
    if media == "application/x-ndjson":
        data = b"\n".join(json.dumps(e).encode() for e in body)
    r = await c.post(
        "/v1/events",
        content=data if data is not None else json.dumps(body).encode(),
        headers={"content-type": media},
    )
    assert r.status_code in (200, 422), r.text
    return dict(r.json())


async def test_duplicate_events_is_the_sum_of_the_duplicates_answered(api: Api) -> None:
    async with api.client() as c:
        assert (await c.put("/v1/rate-cards/default", json=FREE_CARD)).status_code == 201
        bodies: list[tuple[Any, str]] = [
            ([event("a"), event("a")], "application/json"),  # the issue's: [a, a] ...
            ([event("a")], "application/json"),  # ... then [a]
            ([event("b"), event("b", "2"), event("b"), event("c")], "application/msgpack"),
            ([event("c"), event("d"), event("d")], "application/x-ndjson"),
            (event("d"), "application/json"),  # a single event, already seen
            # Unpriceable twice: the first is rejected, the second is a duplicate of it.
            ([event("e", sku="tpu.v9.hour"), event("e", sku="tpu.v9.hour")], "application/json"),
            # Another project in the same body: counted there.
            (
                [event("f", project="other"), event("f", project="other"), event("g")],
                "application/json",
            ),
        ]
        answered: dict[str, int] = {"llm": 0, "other": 0}
        total = 0
        for body, media in bodies:
            report = await _post(c, body, media)
            total += report["duplicates"]
            # Which project the duplicates were in: this test's bodies put them in one each.
            events = body if isinstance(body, list) else [body]
            project = "other" if any(e["project"] == "other" for e in events) else "llm"
            answered[project] += report["duplicates"]
        assert total == 1 + 1 + 2 + 2 + 1 + 1 + 1
        for project, count in answered.items():
            r = await c.get(f"/v1/projects/{project}")
            assert r.status_code == 200, r.text
            assert r.json()["duplicate_events"] == count, (project, r.json())


async def test_hour_granularity_counts_the_events_day_granularity_counts(api: Api) -> None:
    async with api.client() as c:
        assert (await c.put("/v1/rate-cards/default", json=FREE_CARD)).status_code == 201
        from datetime import UTC, datetime, timedelta

        base = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=10, second=0, microsecond=0)
        at = [
            base,
            base + timedelta(minutes=5),
            base + timedelta(hours=1),
            base + timedelta(hours=2),
        ]
        events = [
            event("h1", "1", time=at[0].isoformat(), stage="pretrain"),
            event("h2", "2", time=at[1].isoformat(), stage="pretrain"),
            event("h3", "1", "free.probe", time=at[1].isoformat(), stage="eval"),
            # An hour whose only events cost nothing.
            event("h4", "5", "free.probe", time=at[2].isoformat(), stage="eval"),
            event("h5", "7", "free.probe", time=at[2].isoformat(), stage="eval"),
            event("h6", "1", "network.cross_region.gb", time=at[3].isoformat()),
        ]
        assert (await _post(c, events))["accepted"] == 6
        day0 = base.date().isoformat()
        day1 = ((base + timedelta(hours=2)).date() + timedelta(days=1)).isoformat()
        params = {"project": "llm", "from": day0, "to": day1}
        by_hour = await c.get("/v1/costs", params={**params, "granularity": "hour"})
        by_day = await c.get("/v1/costs", params={**params, "granularity": "day"})
        assert by_hour.status_code == 200 and by_day.status_code == 200, by_hour.text

        got: dict[str, tuple[int, Decimal]] = {}
        for row in by_hour.json()["rows"]:  # (rows by hour and category: summed by hour)
            events_, cost = got.get(row["key"]["period"][:13], (0, Decimal(0)))
            got[row["key"]["period"][:13]] = (events_ + row["events"], cost + Decimal(row["cost"]))
        expected = {
            at[0].strftime("%Y-%m-%dT%H"): (3, Decimal("7.50")),
            at[2].strftime("%Y-%m-%dT%H"): (2, Decimal("0")),
            at[3].strftime("%Y-%m-%dT%H"): (1, Decimal("0.02")),
        }
        assert got == expected, by_hour.json()
        assert (
            sum(r["events"] for r in by_hour.json()["rows"])
            == sum(r["events"] for r in by_day.json()["rows"])
            == by_hour.json()["total_events"]
            == 6
        )
        # Grouped by stage too.
        by_stage = await c.get(
            "/v1/costs", params={**params, "granularity": "hour", "group_by": "stage"}
        )
        rows = by_stage.json()["rows"]
        eval_hour = [r for r in rows if r["key"].get("stage") == "eval"]
        assert sorted(r["events"] for r in eval_hour) == [1, 2]
