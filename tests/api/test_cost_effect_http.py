"""Evaluation results and the cost-effect report over HTTP, on events through the real ingest.

The project `llm` (rate card: the test card, its GPU declaring 700 W, so an accelerator):
`base` ran 10 GPU-hours (25.00) and 100 GB-days of hot storage (0.20); `mixA` 4 GPU-hours
(10.00) before its first evaluation and 2 after it (5.00). gsm8k is the target, mmlu general,
tolerance 0.5: mixA gains 12 points of gsm8k (15.00 / 12 = 1.25 a point), loses 2 of mmlu
after a first evaluation within tolerance, so the 2 GPU-hours after it (5.00) are exposed.
"""

from __future__ import annotations

import copy
import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.test_ingest import post, put_card
from tests.conftest import TEST_CARD, Api, event

NOW = datetime.now(UTC).replace(microsecond=0)


def ago(hours: int) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def _card() -> dict[str, Any]:
    card = copy.deepcopy(TEST_CARD)
    card["skus"][0]["power_watts"] = 700  # type: ignore[index]
    return card


def result(rid: str, exp: str, bench: str, value: str, hours: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "experiment": exp,
        "benchmark": bench,
        "value": value,
        "time": ago(hours),
        **extra,
    }


RESULTS = [
    result("b-gsm", "base", "gsm8k", "40.0", 20, tokens_seen=1000),
    result("b-mmlu", "base", "mmlu", "60.0", 20, tokens_seen=1000),
    result("a-mmlu-1", "mixA", "mmlu", "59.8", 6, tokens_seen=2000, step=100),
    result("a-gsm", "mixA", "gsm8k", "52.0", 2, tokens_seen=3000, step=150),
    result("a-mmlu-2", "mixA", "mmlu", "58.0", 2, tokens_seen=3000, step=150),
]


async def _project(api: Api) -> None:
    await put_card(api, card=_card())
    await post(
        api,
        [
            event("b1", "10", time=ago(24), experiment="base", stage="pretrain"),
            event("b2", "100", sku="storage.hot.gb_day", time=ago(23), experiment="base"),
            event("a1", "4", time=ago(8), experiment="mixA", stage="midtrain"),
            event("a2", "2", time=ago(4), experiment="mixA", stage="midtrain"),
        ],
    )
    async with api.client() as c:
        r = await c.put(
            "/v1/evaluations/settings",
            params={"project": "llm"},
            json={
                "baseline": "base",
                "benchmarks": {"gsm8k": "target", "mmlu": "general"},
                "tolerance": "0.5",
                "planned_tokens": {"mixA": 4000},
            },
        )
        assert r.status_code == 200, r.text
        r = await c.post("/v1/evaluations", json={"project": "llm", "results": RESULTS})
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == 5


async def test_results_are_idempotent_by_id(api: Api) -> None:
    await _project(api)
    changed = [dict(RESULTS[0], value="99"), result("new", "mixA", "gsm8k", "53", 1)]
    async with api.client() as c:
        r = await c.post("/v1/evaluations", json={"project": "llm", "results": changed})
        assert r.json() == {
            "project": "llm",
            "accepted": 1,
            "duplicates": 1,
            "duplicate_ids": ["b-gsm"],
            "corrected": 0,
            "corrected_ids": [],
        }
        listed = (await c.get("/v1/evaluations", params={"project": "llm"})).json()
        base = (
            await c.get("/v1/evaluations", params={"project": "llm", "experiment": "base"})
        ).json()
    assert (listed["total"], len(listed["items"]), listed["next_cursor"]) == (6, 6, None)
    assert base["total"] == 2
    assert [(x["id"], x["value"]) for x in base["items"]] == [("b-gsm", "40.0"), ("b-mmlu", "60.0")]


async def test_the_report_joins_ledger_costs_and_results(api: Api) -> None:
    await _project(api)
    async with api.client() as c:
        r = await c.get("/v1/reports/cost-effect", params={"project": "llm"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["currency"], out["baseline"], out["total_cost"]) == ("USD", "base", "40.20")
    base, mix_a = out["rows"]
    assert base["cost"] == "25.20"
    assert base["cost_by_category"] == {"compute": "25.00", "storage": "0.20"}
    assert base["accelerator_hours"] == "10"
    assert mix_a["cost"] == "15.00" and mix_a["cost_by_stage"] == {"midtrain": "15.00"}
    assert mix_a["accelerator_hours"] == "6" and mix_a["tokens_seen"] == 3000
    cells = {cell["benchmark"]: cell for cell in mix_a["benchmarks"]}
    assert (cells["gsm8k"]["change"], cells["gsm8k"]["cost_per_point"]) == ("12.0", "1.25")
    assert cells["mmlu"]["regression"] and mix_a["regressions"] == ["mmlu"]
    # The last mmlu within tolerance (59.8) was 6 h ago: a2 (2 GPU-hours, 5.00) came after.
    assert mix_a["rework_exposure"] == "5.00"
    # 15.00 x 4000 / 3000 tokens
    assert (mix_a["running"], mix_a["forecast_cost_at_completion"]) == (True, "20.00")
    assert out["fronts"] == [
        {
            "benchmark": "gsm8k",
            "higher_is_better": True,
            "experiments": [{"experiment": "mixA", "cost": "15.00", "value": "52.0"}],
        }
    ]


async def test_filters_and_bad_input(api: Api) -> None:
    await _project(api)
    async with api.client() as c:
        r = await c.get("/v1/reports/cost-effect", params={"project": "llm", "stage": "midtrain"})
        assert [row["experiment"] for row in r.json()["rows"]] == ["mixA"]
        day = NOW.date().isoformat()
        r = await c.get(
            "/v1/reports/cost-effect", params={"project": "llm", "from": day, "to": day}
        )
        assert r.status_code == 400 and "to" in r.text
        r = await c.get("/v1/reports/cost-effect", params={"project": "llm", "tag": "nocolon"})
        assert r.status_code == 400 and "tag" in r.text
        r = await c.put(
            "/v1/evaluations/settings",
            params={"project": "llm"},
            json={"benchmarks": {"gsm8k": "important"}},
        )
        assert r.status_code == 400 and "benchmarks" in r.text
        r = await c.post(
            "/v1/evaluations",
            json={"project": "llm", "results": [dict(RESULTS[0], value="1e5")]},
        )
        assert r.status_code == 400 and "value" in r.text
        settings = (await c.get("/v1/evaluations/settings", params={"project": "llm"})).json()
    assert settings["tolerance"] == "0.5"  # the bad settings changed nothing


async def test_a_token_of_another_project_reaches_nothing(api: Api) -> None:
    await _project(api)
    other = await api.token("admin", ["other"])
    async with api.client(other) as c:
        r = await c.get("/v1/reports/cost-effect", params={"project": "llm"})
        assert r.status_code == 403
        r = await c.post("/v1/evaluations", json={"project": "llm", "results": RESULTS[:1]})
        assert r.status_code == 403


async def test_csv_by_format_or_accept(api: Api) -> None:
    await _project(api)
    async with api.client() as c:
        by_format = await c.get(
            "/v1/reports/cost-effect", params={"project": "llm", "format": "csv"}
        )
        by_accept = await c.get(
            "/v1/reports/cost-effect",
            params={"project": "llm"},
            headers={"Accept": "text/csv"},
        )
        json_answer = await c.get(
            "/v1/reports/cost-effect", params={"project": "llm"}, headers={"Accept": "*/*"}
        )
    assert by_format.status_code == 200, by_format.text
    assert by_format.headers["content-type"].startswith("text/csv")
    assert "cost-effect-llm.csv" in by_format.headers["content-disposition"]
    assert by_accept.text == by_format.text
    assert json_answer.headers["content-type"].startswith("application/json")
    rows = list(csv.DictReader(io.StringIO(by_format.text)))
    assert [(r["experiment"], r["cost"], r["cost.storage"]) for r in rows] == [
        ("base", "25.20", "0.20"),
        ("mixA", "15.00", ""),
    ]
    assert rows[1]["gsm8k.cost_per_point"] == "1.25" and rows[1]["rework_exposure"] == "5.00"
