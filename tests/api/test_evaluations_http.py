"""`GET /v1/evaluations` pages and `POST /v1/evaluations` keeps to the project's limit, over
real HTTP: every result is on exactly one page (by cursor and by offset, all results and one
experiment's), a bad `limit`, `offset` or `after` is a 400 naming it, and a batch past
`TRAINLEDGER_MAX_EVALUATION_RESULTS` is a 409 problem naming `results` that stores nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from trainledger.config import Settings

from tests.conftest import Api, ServerThread, make_admin_token

# Within the events' range, as every result's time must be (ten days back, a whole day).
T0 = (datetime.now(UTC) - timedelta(days=10)).replace(hour=0, minute=0, second=0, microsecond=0)


def result(n: int, experiment: str = "mix-a", hours: int | None = None) -> dict[str, Any]:
    return {
        "id": f"{experiment}.gsm8k.{n}",
        "experiment": experiment,
        "benchmark": "gsm8k",
        "value": f"{n}.5",
        "step": n,
        # Several results share a time: the id orders them.
        "time": (T0 + timedelta(hours=n // 3 if hours is None else hours)).isoformat(),
    }


async def post_results(c: httpx.AsyncClient, results: list[dict[str, Any]]) -> httpx.Response:
    return await c.post("/v1/evaluations", json={"project": "llm", "results": results})


async def walk(c: httpx.AsyncClient, by_cursor: bool, **params: Any) -> list[str]:
    ids: list[str] = []
    query: dict[str, Any] = {"project": "llm", **params}
    while True:
        r = await c.get("/v1/evaluations", params=query)
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["offset"] == len(ids)
        ids += [item["id"] for item in page["items"]]
        if page["next_cursor"] is None:
            assert page["next_offset"] is None and len(ids) == page["total"]
            return ids
        if by_cursor:
            query = {"project": "llm", **params, "after": page["next_cursor"]}
        else:
            query = {"project": "llm", **params, "offset": page["next_offset"]}


@pytest.mark.parametrize("by_cursor", [True, False])
async def test_every_result_is_on_exactly_one_page_in_time_then_id_order(
    api: Api, by_cursor: bool
) -> None:
    results = [result(n) for n in range(17)] + [result(n, "mix-b") for n in range(9)]
    async with api.client() as c:
        assert (await post_results(c, results[1::2])).status_code == 200
        assert (await post_results(c, results[::2])).status_code == 200
        everything = sorted(results, key=lambda r: (r["time"], r["id"]))
        for limit in (1, 4, 1000):
            assert await walk(c, by_cursor, limit=limit) == [r["id"] for r in everything]
            mix_b = [r["id"] for r in everything if r["experiment"] == "mix-b"]
            assert await walk(c, by_cursor, limit=limit, experiment="mix-b") == mix_b
        page = (await c.get("/v1/evaluations", params={"project": "llm"})).json()
    assert (page["limit"], page["total"], len(page["items"])) == (100, 26, 26)
    assert page["items"][0] == {
        "id": "mix-a.gsm8k.0",
        "experiment": "mix-a",
        "benchmark": "gsm8k",
        "value": "0.5",
        "higher_is_better": True,
        "time": T0.isoformat().replace("+00:00", "Z"),
        "step": 0,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("limit", "0"),
        ("limit", "1001"),
        ("limit", "ten"),
        ("offset", "-1"),
        ("after", "not-a-cursor"),
        ("after", "2026-05-01T00:00:00Z|mix-a"),  # not the cursor's fixed-width time
    ],
)
async def test_a_bad_page_parameter_is_a_problem_naming_it(
    api: Api, field: str, value: str
) -> None:
    async with api.client() as c:
        r = await c.get("/v1/evaluations", params={"project": "llm", field: value})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert [e["field"] for e in r.json()["errors"]] == [field]


@pytest.fixture
async def capped(clean_redis: str) -> AsyncIterator[Api]:
    settings = Settings(redis_url=clean_redis, max_evaluation_results=5)
    server = ServerThread(clean_redis, settings).start()
    try:
        yield Api(server.base_url, await make_admin_token(clean_redis), clean_redis)
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_batch_past_the_limit_is_refused_whole_and_stores_nothing(capped: Api) -> None:
    async with capped.client() as c:
        r = await post_results(c, [result(n) for n in range(4)])  # the limit less one
        assert r.json()["accepted"] == 4
        r = await post_results(c, [result(n) for n in range(3, 6)])  # 1 stored, 2 new: 6 > 5
        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["type"] == "https://trainledger.dev/problems/evaluation-results-limit"
        assert (problem["limit"], problem["stored"], problem["new"]) == (5, 4, 2)
        assert [e["field"] for e in problem["errors"]] == ["results"]
        assert "more than the 5 a project may keep" in problem["detail"]
        assert (await c.get("/v1/evaluations", params={"project": "llm"})).json()["total"] == 4
        r = await post_results(c, [result(n) for n in range(5)])  # 4 stored, 1 new: the limit
        assert (r.status_code, r.json()["accepted"], r.json()["duplicates"]) == (200, 1, 4)
        r = await post_results(c, [result(n) for n in range(5)])  # at the limit, all repeats
        assert (r.status_code, r.json()["accepted"], r.json()["duplicates"]) == (200, 0, 5)
        r = await post_results(c, [result(9)])
        assert r.status_code == 409, r.text
        listed = (await c.get("/v1/evaluations", params={"project": "llm"})).json()
    assert [i["id"] for i in listed["items"]] == [f"mix-a.gsm8k.{n}" for n in range(5)]
