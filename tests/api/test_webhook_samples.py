"""`POST /v1/webhooks/{id}/test?kind=...`: a made-up message of each alert kind, against
real receivers (tests/api/test_webhooks.py's), the standard format's signature verified with
the ``standardwebhooks`` reference library, the Teams card against the Adaptive Card schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.test_teams_and_email import CARD
from tests.api.test_webhooks import (
    QUIET,
    Receiver,
    add_webhook,
    chat_text,
    check_standard,
    deliveries,
    ledger,
    receiving,
)

REGRESSION = "evaluation_regression"


async def test_the_regression_sample_in_standard_slack_and_teams(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    teams_path = "/workflows/wf-1/triggers/manual/paths/invoke"
    with receiving(Receiver().start()) as rx:
        rx.answers = {teams_path: [(202, {})]}
        async with ledger(clean_redis, monkeypatch, QUIET) as api:
            standard = await add_webhook(
                api, rx.url + "/standard", projects=["llm"], kinds=["threshold"]
            )
            slack = await add_webhook(api, rx.url + "/slack", "slack", kinds=[REGRESSION])
            teams = await add_webhook(api, rx.url + teams_path, "teams")
            answers: dict[str, list[dict[str, Any]]] = {}
            async with api.client() as c:
                for hook in (standard, slack, teams):
                    for _ in range(2):  # a new id each time
                        r = await c.post(f"/v1/webhooks/{hook['id']}/test?kind={REGRESSION}")
                        assert r.status_code == 200, r.text
                        answers.setdefault(hook["id"], []).append(r.json())
            assert (await deliveries(api))["total"] == 0  # never in the outbox

    first, again = answers[standard["id"]]
    assert (first["delivered"], first["status_code"], first["kind"]) == (True, 200, REGRESSION)
    assert first["message_id"] != again["message_id"]
    # Sent although the webhook only receives threshold alerts: it is a test, and says so.
    assert first["subscribed"] is False
    assert [a["subscribed"] for a in answers[slack["id"]]] == [True, True]
    assert [a["subscribed"] for a in answers[teams["id"]]] == [True, True]  # kinds: all

    request = rx.at("/standard")[0]
    payload = check_standard(standard["secret"], request)
    data = payload["data"]
    assert payload["type"] == "evaluation.regression"
    assert request.headers["webhook-id"] == first["message_id"] == data["id"]
    assert data["id"].startswith("test_") and data["test"] is True
    assert data["kind"] == REGRESSION and data["project"] == "llm"
    facts = data["regression"]
    assert data["scope"] == {"experiment": facts["experiment"], "benchmark": facts["benchmark"]}
    assert float(facts["gain"]) < -float(facts["tolerance"])  # past the tolerance
    assert facts["rework_exposure"] == "9562.50"  # exact in the payload
    assert set(data["links"]) == {"dashboard", "report", "evaluations", "alerts"}

    text = chat_text(rx.at("/slack")[0])
    for needle in ("Test message (a sample, not an alert)", "regressed in experiment exp-42",
                   "0.612", "0.655", "exp-base", "9,562.50 USD"):  # fmt: skip
        assert needle in text, needle
    assert "budget" not in text.lower()

    body = rx.at(teams_path)[0].json
    assert [e.message for e in CARD.iter_errors(body)] == []
    card = json.dumps(body["attachments"][0]["content"], ensure_ascii=False)
    for needle in ("Test message (a sample, not an alert)", "mmlu", "9,562.50 USD"):
        assert needle in card, needle


async def test_each_kind_is_sent_and_the_default_stays_the_budget_threshold(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api:
            hook = await add_webhook(api, rx.url + "/standard")
            async with api.client() as c:
                sent = {}
                for kind in (None, "threshold", "forecast", "growth", REGRESSION):
                    params = {} if kind is None else {"kind": kind}
                    r = await c.post(f"/v1/webhooks/{hook['id']}/test", params=params)
                    assert r.status_code == 200, r.text
                    assert r.json()["delivered"] is True, r.text
                    sent[kind] = r.json()
                bad = await c.post(f"/v1/webhooks/{hook['id']}/test", params={"kind": "waste"})
                missing = await c.post("/v1/webhooks/wh_nope/test", params={"kind": REGRESSION})
    assert sent[None]["kind"] == "threshold"
    types = [check_standard(hook["secret"], r)["type"] for r in rx.at("/standard")]
    assert types == ["budget.threshold", "budget.threshold", "budget.forecast",
                     "budget.growth", "evaluation.regression"]  # fmt: skip
    assert bad.status_code == 400, bad.text
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert [e["field"] for e in bad.json()["errors"]] == ["kind"]
    assert "waste" in bad.json()["errors"][0]["reason"]
    assert len(rx.at("/standard")) == 5  # the refused kind sent nothing
    assert missing.status_code == 404
