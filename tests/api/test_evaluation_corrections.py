"""Evaluation results over real HTTP: their times held to the events' rule (RFC 3339 strings
within the events' range; numeric Unix times refused), and a stored result corrected (a higher
`version` of its id) or deleted, audited, with the cost-effect report and the regression state
following. A typo dated 2062 once became an experiment's latest value for good."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.conftest import Api

NOW = datetime.now(UTC).replace(microsecond=0)
SETTINGS = {"baseline": "base", "benchmarks": {"qa": "general"}, "tolerance": "1"}


def ago(hours: float) -> str:
    return (NOW - timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


def result(rid: str, exp: str, value: str, hours: float = 2, **extra: Any) -> dict[str, Any]:
    base = {"id": rid, "experiment": exp, "benchmark": "qa", "value": value, "time": ago(hours)}
    return base | extra


async def post_results(c: httpx.AsyncClient, *results: dict[str, Any]) -> httpx.Response:
    return await c.post("/v1/evaluations", json={"project": "llm", "results": list(results)})


async def qa_cell(c: httpx.AsyncClient, experiment: str) -> dict[str, Any] | None:
    r = await c.get("/v1/reports/cost-effect", params={"project": "llm"})
    assert r.status_code == 200, r.text
    for row in r.json()["rows"]:
        if row["experiment"] == experiment:
            cells = [b for b in row["benchmarks"] if b["benchmark"] == "qa"]
            return cells[0] if cells else None
    return None


async def regression_alerts(c: httpx.AsyncClient) -> int:
    r = await c.get("/v1/alerts", params={"project": "llm", "kind": "evaluation_regression"})
    assert r.status_code == 200, r.text
    return len(r.json())


REFUSED_TIMES: tuple[Any, ...] = (
    "9999-12-31T23:59:59Z",
    "2062-01-01T00:00:00Z",
    (NOW - timedelta(days=40)).isoformat(),  # older than the deduplication window (35 days)
    (NOW + timedelta(hours=25)).isoformat(),  # further ahead than the future skew (24 h)
    ago(1).replace("T", " "),
    ago(1).removesuffix("Z"),
    0,
    1.5,
    253402300799,
    True,
)


async def test_evaluation_times_are_refused_as_events_are(api: Api) -> None:
    async with api.client() as c:
        for when in REFUSED_TIMES:
            bad = result("t", "mix", "1") | {"time": when}
            r = await post_results(c, result("ok", "mix", "1"), bad)
            assert r.status_code == 400, (when, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "results[1].time" in r.text, r.text
        page = await c.get("/v1/evaluations", params={"project": "llm"})
        assert page.json()["total"] == 0, "a refused batch stores nothing"
        # The events' grammar allows an offset and lower-case letters.
        fine = (NOW - timedelta(hours=1)).isoformat().replace("T", "t")
        r = await post_results(c, result("ok", "mix", "1", time=fine))
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text


async def test_a_result_corrected_and_the_report_and_regression_follow(api: Api) -> None:
    async with api.client() as c:
        r = await c.put("/v1/evaluations/settings", params={"project": "llm"}, json=SETTINGS)
        assert r.status_code == 200, r.text
        # A typo: 95.0 for 59.5 (within tolerance of the baseline's 60 either way).
        r = await post_results(c, result("b-qa", "base", "60"), result("m-qa", "mix", "95.0"))
        assert r.json()["accepted"] == 2, r.text
        # The same id again, without a version or at version 1: a duplicate, nothing changes.
        r = await post_results(c, result("m-qa", "mix", "50"))
        assert (r.json()["duplicates"], r.json()["corrected"]) == (1, 0), r.text
        assert (await qa_cell(c, "mix") or {})["value"] == "95.0"
        # Corrected to a regression (50 < 60 - 1): the report follows and the alert fires.
        r = await post_results(c, result("m-qa", "mix", "50", version=2))
        assert r.status_code == 200, r.text
        assert (r.json()["corrected"], r.json()["corrected_ids"]) == (1, ["m-qa"]), r.text
        cell = await qa_cell(c, "mix")
        assert cell is not None and (cell["value"], cell["regression"]) == ("50", True)
        assert await regression_alerts(c) == 1
        # Version 2 again, or an older one: duplicates.
        for version in (2, 1):
            r = await post_results(c, result("m-qa", "mix", "10", version=version))
            assert (r.json()["duplicates"], r.json()["corrected"]) == (1, 0), r.text
        # Corrected once more (with a new time): no longer a regression; nothing new fires.
        r = await post_results(c, result("m-qa", "mix", "59.5", hours=1, version=3))
        assert r.json()["corrected"] == 1, r.text
        cell = await qa_cell(c, "mix")
        assert cell is not None and (cell["value"], cell["regression"]) == ("59.5", False)
        assert cell["time"] == ago(1)
        assert await regression_alerts(c) == 1
        # The listing holds the result once, at its new version and place.
        page = (await c.get("/v1/evaluations", params={"project": "llm"})).json()
        assert [(i["id"], i.get("version", 1)) for i in page["items"]] == [
            ("b-qa", 1),
            ("m-qa", 3),
        ]
        # Audited: who, when, what, newest first.
        audit = (await c.get("/v1/evaluations/audit", params={"project": "llm"})).json()
        assert [
            (a["action"], a["before"]["value"], a["after"]["value"]) for a in audit["items"]
        ] == [
            ("corrected", "50", "59.5"),
            ("corrected", "95.0", "50"),
        ]
        assert all(a["token_id"] and a["at"] for a in audit["items"])


async def test_a_deleted_result_disappears_from_the_report(api: Api) -> None:
    reader = await api.token("read", ["llm"])
    async with api.client() as c:
        r = await c.put("/v1/evaluations/settings", params={"project": "llm"}, json=SETTINGS)
        assert r.status_code == 200, r.text
        r = await post_results(
            c,
            result("b-qa", "base", "60"),
            result("m-qa-1", "mix", "50", hours=3),  # a regression ...
            result("m-qa-2", "mix", "61", hours=1),  # ... hidden behind a later result
        )
        assert r.json()["accepted"] == 3, r.text
        assert (await qa_cell(c, "mix") or {})["regression"] is False
        assert await regression_alerts(c) == 0
        async with api.client(reader) as ro:
            r = await ro.delete("/v1/evaluations/m-qa-2", params={"project": "llm"})
            assert r.status_code == 403, r.text
        r = await c.delete("/v1/evaluations/m-qa-2", params={"project": "llm"})
        assert r.status_code == 200, r.text
        assert (r.json()["action"], r.json()["before"]["value"]) == ("deleted", "61")
        # The report and the regression state follow: the earlier result is the latest now.
        cell = await qa_cell(c, "mix")
        assert cell is not None and (cell["value"], cell["regression"]) == ("50", True)
        assert await regression_alerts(c) == 1
        r = await c.delete("/v1/evaluations/m-qa-1", params={"project": "llm"})
        assert r.status_code == 200, r.text
        assert await qa_cell(c, "mix") is None
        page = (await c.get("/v1/evaluations", params={"project": "llm"})).json()
        assert [i["id"] for i in page["items"]] == ["b-qa"] and page["total"] == 1
        r = await c.delete("/v1/evaluations/m-qa-1", params={"project": "llm"})
        assert r.status_code == 404 and "result_id" in r.text, r.text
        audit = (await c.get("/v1/evaluations/audit", params={"project": "llm"})).json()
        assert [(a["action"], a["id"]) for a in audit["items"]] == [
            ("deleted", "m-qa-1"),
            ("deleted", "m-qa-2"),
        ]
        # Posted again, a deleted id is stored anew.
        r = await post_results(c, result("m-qa-1", "mix", "59.5"))
        assert r.json()["accepted"] == 1, r.text
