"""The evaluation regression alert, end to end: results posted over HTTP, the alert through the
alerts stream, the dispatcher and the delivery worker, to real receivers (the receivers and
the ledger with its worker: tests/api/test_webhooks.py).

The project `llm` (the test card, USD): `base` ran 10 GPU-hours (25.00); `mixA` 4 GPU-hours
(10.00) before its first evaluation and 2 after it (5.00). mmlu is general, gsm8k the
target; `base` is the baseline with mmlu 60.0. mixA's mmlu falls from 59.8 (within a
tolerance of 0.5) to 58.0: a regression, whose rework exposure is the 5.00 after 59.8.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from trainledger.evaluations.model import ResultsIn
from trainledger.evaluations.regression import regression_id
from trainledger.evaluations.service import add_results

from tests.api.test_ingest import post, put_card
from tests.api.test_webhooks import (
    FAST,
    PUBLIC_URL,
    Receiver,
    add_webhook,
    check_standard,
    deliveries,
    ledger,
    receiving,
    store_of,
    wait_until,
)
from tests.conftest import Api, event

NOW = datetime.now(UTC).replace(microsecond=0)
KIND = "evaluation_regression"


def ago(hours: int) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def result(rid: str, exp: str, bench: str, value: str, hours: int) -> dict[str, Any]:
    return {"id": rid, "experiment": exp, "benchmark": bench, "value": value, "time": ago(hours)}


BASE = [result("b-gsm", "base", "gsm8k", "40.0", 20), result("b-mmlu", "base", "mmlu", "60.0", 20)]
MIX_A = [
    result("a-mmlu-1", "mixA", "mmlu", "59.8", 6),
    result("a-gsm", "mixA", "gsm8k", "52.0", 2),
    result("a-mmlu-2", "mixA", "mmlu", "58.0", 2),
]
SETTINGS = {
    "baseline": "base",
    "benchmarks": {"gsm8k": "target", "mmlu": "general"},
    "tolerance": "0.5",
    # mixF has seen its planned tokens: finished, it never alerts.
    "planned_tokens": {"mixA": 4000, "mixF": 1000},
}


async def put_settings(api: Api, **changes: Any) -> None:
    async with api.client() as c:
        r = await c.put(
            "/v1/evaluations/settings", params={"project": "llm"}, json=SETTINGS | changes
        )
    assert r.status_code == 200, r.text


async def post_results(api: Api, results: list[dict[str, Any]]) -> dict[str, Any]:
    async with api.client() as c:
        r = await c.post("/v1/evaluations", json={"project": "llm", "results": results})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def regression_alerts(api: Api) -> list[dict[str, Any]]:
    async with api.client() as c:
        r = await c.get("/v1/alerts", params={"project": "llm", "kind": KIND})
    assert r.status_code == 200, r.text
    return list(r.json())


async def spend(api: Api) -> None:
    await put_card(api)
    await post(
        api,
        [
            event("b1", "10", time=ago(24), experiment="base", stage="pretrain"),
            event("a1", "4", time=ago(8), experiment="mixA", stage="midtrain"),
            event("a2", "2", time=ago(4), experiment="mixA", stage="midtrain"),
        ],
    )


async def settled(api: Api, count: int) -> None:
    """Wait until `count` deliveries are delivered and none is pending."""

    async def done() -> bool:
        page = await deliveries(api, limit=1000)
        return page["total"] == count and {d["status"] for d in page["items"]} == {"delivered"}

    await wait_until(done, f"{count} deliveries delivered")


def ident(experiment: str, benchmark: str = "mmlu", baseline: str = "base") -> str:
    return regression_id("llm", experiment, benchmark, baseline)


async def test_a_regression_alerts_once_per_endpoint_and_nothing_else_does(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, FAST) as api:
            await spend(api)
            standard = await add_webhook(api, rx.url + "/standard", kinds=[KIND])
            await add_webhook(api, rx.url + "/slack", "slack")
            await add_webhook(api, rx.url + "/budgets", kinds=["threshold", "forecast"])
            await put_settings(api)
            assert (await post_results(api, BASE + MIX_A))["accepted"] == 5
            await settled(api, 2)
            (alert,) = await regression_alerts(api)
            assert alert["id"] == ident("mixA")

            # The same batch again, more regressing results of mixA, and a mixA result
            # back within tolerance then down again: no new alert.
            assert (await post_results(api, BASE + MIX_A))["duplicates"] == 5
            await post_results(api, [result("a-mmlu-3", "mixA", "mmlu", "57.0", 1)])
            await post_results(api, [result("a-mmlu-4", "mixA", "mmlu", "60.0", 0)])
            await post_results(api, [result("a-mmlu-5", "mixA", "mmlu", "50", 0)])
            # Within tolerance, a target benchmark that fell, a finished experiment and the
            # baseline's own later result: none alerts.
            await post_results(
                api,
                [
                    result("c-mmlu", "mixC", "mmlu", "59.5", 3),
                    result("c-gsm", "mixC", "gsm8k", "10.0", 3),
                    result("f-mmlu", "mixF", "mmlu", "40.0", 3) | {"tokens_seen": 1000},
                    result("b-mmlu-2", "base", "mmlu", "59.9", 3),
                ],
            )
            # Two concurrent posts that both regress mixB: one alert.
            await asyncio.gather(
                post_results(api, [result("x-mmlu-1", "mixB", "mmlu", "55.0", 2)]),
                post_results(api, [result("x-mmlu-2", "mixB", "mmlu", "54.0", 1)]),
            )
            await settled(api, 4)
            assert [a["id"] for a in await regression_alerts(api)] == [
                ident("mixA"),
                ident("mixB"),
            ]

    assert rx.at("/budgets") == []
    assert Counter(r.headers["webhook-id"] for r in rx.at("/standard")) == {
        ident("mixA"): 1,
        ident("mixB"): 1,
    }
    assert len(rx.at("/slack")) == 2
    first = next(r for r in rx.at("/standard") if r.headers["webhook-id"] == ident("mixA"))
    payload = check_standard(standard["secret"], first)
    assert payload["type"] == "evaluation.regression"
    data = payload["data"]
    assert (data["kind"], data["project"], data["currency"]) == (KIND, "llm", "USD")
    assert data["scope"] == {"experiment": "mixA", "benchmark": "mmlu"}
    facts = data["regression"]
    assert {k: facts[k] for k in ("experiment", "benchmark", "baseline", "value")} == {
        "experiment": "mixA",
        "benchmark": "mmlu",
        "baseline": "base",
        "value": "58.0",
    }
    assert (facts["baseline_value"], facts["gain"], facts["tolerance"]) == ("60.0", "-2.0", "0.5")
    # The last mmlu within tolerance (59.8) was 6 h ago: a2 (2 GPU-hours, 5.00) came after.
    assert facts["rework_exposure"] == "5.00"
    assert facts["rework_since"] == ago(6).replace("+00:00", "Z")
    assert [d["experiment"] for d in data["top_drivers"]] == ["mixA"]
    assert data["top_drivers"][0]["cost"] == "15.00"
    assert data["links"]["dashboard"] == f"{PUBLIC_URL}/ui/llm#cost-effect"
    assert data["links"]["report"] == f"{PUBLIC_URL}/v1/reports/cost-effect?project=llm"

    slack = next(r.json for r in rx.at("/slack") if "mixA" in r.json["text"])
    text = str(slack)
    for needle in ("mmlu regressed in experiment mixA", "58.0", "60.0", "5.00 USD", "15.00 USD"):
        assert needle in text, needle


async def test_new_settings_fire_what_they_reveal_and_a_retry_fires_what_a_crash_missed(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, FAST) as api:
            await spend(api)
            await add_webhook(api, rx.url + "/standard")
            # A tolerance of 5: mixA's 58.0 is no regression.
            await put_settings(api, tolerance="5")
            await post_results(api, BASE + MIX_A)
            assert await regression_alerts(api) == []
            # Tightened to 0.5, the settings alone reveal it.
            await put_settings(api)
            assert [a["id"] for a in await regression_alerts(api)] == [ident("mixA")]
            await put_settings(api)
            # A new baseline is a new identity (mixC's mmlu is 59.6): mixA alerts against it
            # (base, at 60.0, does not).
            await post_results(api, [result("c-mmlu", "mixC", "mmlu", "59.6", 3)])
            await put_settings(api, baseline="mixC")
            assert [a["id"] for a in await regression_alerts(api)] == [
                ident("mixA"),
                ident("mixA", baseline="mixC"),
            ]

            # A crash between storing a batch and firing: the batch is stored (here by the
            # use case that stores, alone), its alert never fired; the client's retry (every
            # result a duplicate) fires it.
            crashed = [result("d-mmlu", "mixD", "mmlu", "50.0", 1)]
            async with store_of(clean_redis) as store:
                batch = msgspec.convert({"project": "llm", "results": crashed}, ResultsIn)
                assert (await add_results(store, batch)).accepted == 1
            assert len(await regression_alerts(api)) == 2
            assert (await post_results(api, crashed))["duplicates"] == 1
            ids = [a["id"] for a in await regression_alerts(api)]
            assert ids[-1] == ident("mixD", baseline="mixC") and len(ids) == 3
            await settled(api, 3)

    assert Counter(r.headers["webhook-id"] for r in rx.at("/standard")) == dict.fromkeys(ids, 1)
