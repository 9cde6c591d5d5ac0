"""The data-strategy and domain-mix analyses from experiment names: the same answer as from
the equivalent typed-in figures, read from the ledger (events through the real ingest) and
the reported evaluation results."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event

NOW = datetime.now(UTC).replace(microsecond=0)


def ago(hours: int) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def _result(rid: str, exp: str, bench: str, value: str, tokens: int, hours: int) -> dict[str, Any]:
    return {
        "id": rid,
        "experiment": exp,
        "benchmark": bench,
        "value": value,
        "tokens_seen": tokens,
        "time": ago(hours),
    }


async def _measured_project(api: Api) -> None:
    """GPU-hours at 2.50: mix-general 4 h (10.00), mix-mathcode 3 h (7.50), each pilot 2 h
    (5.00)."""
    await put_card(api)
    await post(
        api,
        [
            event("g1", "4", experiment="mix-general", time=ago(10)),
            event("m1", "3", experiment="mix-mathcode", time=ago(10)),
            event("f1", "2", experiment="pilot-flat", time=ago(10)),
            event("u1", "2", experiment="pilot-scored", time=ago(10)),
        ],
    )
    results = [
        _result("g-math", "mix-general", "math", "40", 1000, 5),
        _result("g-qa", "mix-general", "general_qa", "70", 1000, 5),
        _result("m-math", "mix-mathcode", "math", "60", 1000, 5),
        _result("m-qa", "mix-mathcode", "general_qa", "62", 1000, 5),
        _result("f-100", "pilot-flat", "quality", "50", 100, 6),
        _result("f-200", "pilot-flat", "quality", "60", 200, 5),
        _result("u-100", "pilot-scored", "quality", "55", 100, 6),
        _result("u-200", "pilot-scored", "quality", "65", 200, 5),
        _result("u-200b", "pilot-scored", "quality", "66", 200, 4),  # later at 200: it counts
    ]
    async with api.client() as c:
        r = await c.post("/v1/evaluations", json={"project": "llm", "results": results})
        assert r.status_code == 200 and r.json()["accepted"] == len(results), r.text
        r = await c.put(
            "/v1/evaluations/settings",
            params={"project": "llm"},
            json={"benchmarks": {"math": "target", "general_qa": "general"}},
        )
        assert r.status_code == 200, r.text


MIX_COMMON: dict[str, Any] = {
    "rework_cost": "50",
    "general_floor": "65",
    "general_domains": ["general_qa"],
}


async def _answer(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with api.client() as c:
        r = await c.post(f"/v1/analysis/{path}", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_domain_mix_from_experiments_equals_typed_in(api: Api) -> None:
    await _measured_project(api)
    by_name = await _answer(
        api,
        "domain-mix",
        {
            "project": "llm",
            **MIX_COMMON,
            "mixes": [
                {"name": "general", "experiment": "mix-general", "rework_probability": "0.05"},
                {"name": "mathcode", "experiment": "mix-mathcode", "rework_probability": "0.2"},
            ],
        },
    )
    typed = await _answer(
        api,
        "domain-mix",
        {
            **MIX_COMMON,
            "mixes": [
                {
                    "name": "general",
                    "scores": {"math": "40", "general_qa": "70"},
                    "cost_per_run": "10.00",
                    "rework_probability": "0.05",
                },
                {
                    "name": "mathcode",
                    "scores": {"math": "60", "general_qa": "62"},
                    "cost_per_run": "7.50",
                    "rework_probability": "0.2",
                },
            ],
        },
    )
    assert by_name == typed
    # 7.50 + 0.2 × 50 = 17.50 against 10.00 + 0.05 × 50 = 12.50
    totals = {o["name"]: o["expected_total_cost"] for o in by_name["options"]}
    assert totals == {"general": "12.50", "mathcode": "17.50"}


DATA_COMMON: dict[str, Any] = {
    "corpus_tokens": 1000,
    "flat_keep_share": "0.5",
    "upsampling_curve": [{"share": "0.5", "repeats": "2"}, {"share": "0.5", "repeats": "0"}],
    "scoring_cost_per_token": "0.001",
    "target_score": "58",
}


async def test_data_strategy_from_experiments_equals_typed_in(api: Api) -> None:
    await _measured_project(api)
    by_name = await _answer(
        api,
        "data-strategy",
        {
            "project": "llm",
            **DATA_COMMON,
            "pilot_experiments": {"flat": "pilot-flat", "upsampled": "pilot-scored"},
            "pilot_benchmark": "quality",
        },
    )
    typed = await _answer(
        api,
        "data-strategy",
        {
            **DATA_COMMON,
            # (5.00 + 5.00) / (200 + 200) tokens
            "training_cost_per_token": "0.025",
            "pilot_results": [
                {"strategy": "flat", "tokens": 100, "score": "50"},
                {"strategy": "flat", "tokens": 200, "score": "60"},
                {"strategy": "upsampled", "tokens": 100, "score": "55"},
                {"strategy": "upsampled", "tokens": 200, "score": "66"},
            ],
        },
    )
    assert by_name == typed
    assert by_name["recommended"] in ("flat", "upsampled")


async def test_names_need_the_project_and_its_scope(api: Api) -> None:
    await _measured_project(api)
    body = {
        **MIX_COMMON,
        "cost_per_run": "1",
        "mixes": [{"name": "general", "experiment": "mix-general"}],
    }
    async with api.client() as c:
        r = await c.post("/v1/analysis/domain-mix", json=body)
        assert r.status_code == 422 and "$.project" in r.text
        r = await c.post(
            "/v1/analysis/domain-mix",
            json={**body, "project": "llm", "mixes": [{"name": "x", "experiment": "nope"}]},
        )
        assert r.status_code == 422 and "$.mixes[0].experiment" in r.text
    other = await api.token("read", ["other"])
    async with api.client(other) as c:
        r = await c.post("/v1/analysis/domain-mix", json={**body, "project": "llm"})
        assert r.status_code == 403
