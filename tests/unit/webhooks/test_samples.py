"""The made-up messages of `POST /v1/webhooks/{id}/test?kind=...` (service/webhooks/samples.py):
one of each alert kind, each a valid message in every format, a new id each time."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import get_args

import pytest
from trainledger.webhooks.formats.build import build_request
from trainledger.webhooks.formats.message import RegressionMessage
from trainledger.webhooks.formats.signing import generate_secret
from trainledger.webhooks.formats.table import HTTP_NAMES
from trainledger.webhooks.registry import AlertKindName
from trainledger.webhooks.samples import sample_for

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KINDS = get_args(AlertKindName)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", HTTP_NAMES)
def test_every_kind_is_a_valid_test_message_in_every_format(kind: AlertKindName, fmt: str) -> None:
    message = sample_for(kind, "llm", "https://ledger.example.test/", NOW)
    assert message.kind == kind and message.test is True and message.project == "llm"
    secret = generate_secret() if fmt == "standard" else None
    request = build_request(message, fmt, "https://hooks.example.test/x", secret, now=NOW)
    body = json.loads(request.body)
    if fmt == "standard":
        assert body["data"]["test"] is True and body["data"]["id"] == message.id
    else:
        assert "Test message (a sample, not an alert)" in json.dumps(body, ensure_ascii=False)


def test_ids_are_new_each_time_and_the_regression_is_past_its_tolerance() -> None:
    ids = {sample_for(k, None, "https://x.test", NOW).id for k in KINDS for _ in range(3)}
    assert len(ids) == 3 * len(KINDS) and all(i.startswith("test_") for i in ids)
    message = sample_for("evaluation_regression", None, "https://x.test", NOW)
    assert isinstance(message, RegressionMessage) and message.project == "sample-project"
    r = message.regression
    assert Decimal(r.value) - Decimal(r.baseline_value) == Decimal(r.gain)
    assert Decimal(r.gain) < -Decimal(r.tolerance)
    assert message.scope == {"experiment": r.experiment, "benchmark": r.benchmark}
    assert r.rework_since is not None and r.rework_since < r.measured_at < message.occurred_at
    assert message.links["alerts"].endswith("kind=evaluation_regression")
