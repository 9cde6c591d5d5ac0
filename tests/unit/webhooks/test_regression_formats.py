"""The evaluation regression alert in every format: the standard payload (signed, typed
``evaluation.regression``), the four chat formats, the Teams card (against the Adaptive Card
schema subset) and the email: what regressed, by how much against the baseline, the
tolerance, the rework exposure as money for people, the experiment's drivers and the links;
hostile names escaped. No I/O."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
import standardwebhooks
from trainledger.budgets.model import RegressionFacts
from trainledger.webhooks.formats.build import build_request
from trainledger.webhooks.formats.mail import build_email
from trainledger.webhooks.formats.message import RegressionMessage

from tests.unit.webhooks.test_channel_formats import CARD, SETTINGS, TEAMS_URL, card_text, parsed
from tests.unit.webhooks.test_webhook_formats import HOSTILE, NOW, SECRET, message_text

URL = "https://hooks.example/x"
SECRETS: dict[str, str | None] = {"slack": None, "feishu": "s", "dingtalk": "s", "wecom": None}
REPORT = "https://ledger.example/v1/reports/cost-effect?project=llm-7b"


def make_regression(**changes: Any) -> RegressionMessage:
    facts: dict[str, Any] = {
        "experiment": "mix-a",
        "benchmark": "mmlu-pro",
        "baseline": "flat",
        "value": "58.0",
        "baseline_value": "60.25",
        "gain": "-2.25",
        "tolerance": "1.5",
        "higher_is_better": True,
        "measured_at": datetime(2026, 11, 20, 9, 0, tzinfo=UTC),
        "step": 20000,
        "tokens_seen": 84_000_000_000,
        "rework_exposure": "12345.6789",
        "rework_since": datetime(2026, 11, 19, 18, 30, tzinfo=UTC),
    }
    facts.update(changes.pop("facts", {}))
    fields: dict[str, Any] = {
        "id": "evr_0123456789abcdef01234567",
        "kind": "evaluation_regression",
        "project": "llm-7b",
        "scope": {"experiment": facts["experiment"], "benchmark": facts["benchmark"]},
        "currency": "USD",
        "regression": RegressionFacts(**facts),
        "top_drivers": [{"name": "gpu.h100.hour / pretrain / mix-a", "cost": "9000.5"}],
        "occurred_at": NOW,
        "links": {"dashboard": "https://ledger.example/ui/llm-7b#cost-effect", "report": REPORT},
    }
    fields.update(changes)
    return RegressionMessage(**fields)


def test_the_standard_payload_is_signed_and_carries_the_exact_facts() -> None:
    alert = make_regression()
    request = build_request(alert, "standard", URL, SECRET)  # signed now: the library checks
    payload = standardwebhooks.Webhook(SECRET).verify(request.body, request.headers)
    assert request.headers["webhook-id"] == alert.id
    assert payload["type"] == "evaluation.regression"
    data = payload["data"]
    assert (data["kind"], data["scope"]) == (
        "evaluation_regression",
        {"experiment": "mix-a", "benchmark": "mmlu-pro"},
    )
    assert data["regression"]["rework_exposure"] == "12345.6789"  # exact, not for people
    assert data["regression"]["gain"] == "-2.25"
    assert data["regression"]["rework_since"] == "2026-11-19T18:30:00Z"
    assert data["links"]["report"] == REPORT
    assert "budget_id" not in data and "spent" not in data


@pytest.mark.parametrize("fmt", list(SECRETS))
def test_chat_formats_say_what_regressed_and_what_rework_costs(fmt: str) -> None:
    request = build_request(make_regression(), fmt, URL, SECRETS[fmt], now=NOW)
    text = message_text(fmt, request)
    for needle in (
        "mmlu-pro",
        "mix-a",
        "flat",
        "58.0",
        "60.25",
        "-2.25",
        "1.5",
        "12,345.68 USD",  # the rework exposure, for people
        "9,000.50 USD",  # the experiment's driver
        "2026-11-19 18:30 UTC",  # the last good checkpoint
        "step 20,000",
        REPORT,
    ):
        assert needle in text, (fmt, needle)
    assert "Spent" not in text and "budget" not in text.lower()


def test_no_good_checkpoint_means_all_of_its_cost() -> None:
    alert = make_regression(facts={"rework_since": None, "step": None, "tokens_seen": None})
    text = message_text("slack", build_request(alert, "slack", URL, None, now=NOW))
    assert "from the start" in text and "step" not in text


def hostile() -> RegressionMessage:
    return make_regression(
        facts={"benchmark": HOSTILE, "baseline": HOSTILE, "experiment": "x"}, links={}
    )


def test_slack_escapes_hostile_names() -> None:
    text = message_text("slack", build_request(hostile(), "slack", URL, None), True)
    assert "<!channel>" not in text and "<@all>" not in text and "<http://evil" not in text
    assert "&lt;!channel&gt;" in text and "\u202e" not in text and "\n# injected" not in text
    assert re.findall(r"<[^>]*>", text) == []  # no links left: none given


@pytest.mark.parametrize("fmt", ["dingtalk", "wecom"])
def test_markdown_formats_escape_hostile_names(fmt: str) -> None:
    text = message_text(fmt, build_request(hostile(), fmt, URL, None), markup_only=True)
    assert r"evil\*\_\[x\](http://evil.example)&lt;!channel&gt;&lt;@all&gt;&amp;\`\~\|" in text
    assert re.findall(r"(?<!\\)\]\(", text) == []
    assert not any(line.startswith("# injected") for line in text.splitlines())


def test_teams_card_is_valid_and_says_it() -> None:
    body = msgspec.json.decode(build_request(make_regression(), "teams", TEAMS_URL, None).body)
    CARD.validate(body)
    text = card_text(body)
    for needle in ("mmlu-pro", "mix-a", "60.25", "12,345.68 USD", "Rework exposure"):
        assert needle in text, needle


def test_email_says_it_in_text_and_html() -> None:
    message = parsed(build_email(make_regression(), SETTINGS, webhook_id="wh_1", now=NOW))
    assert message["Subject"] == ("[trainledger] llm-7b: mmlu-pro regressed in experiment mix-a")
    plain = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert plain is not None and html is not None
    for part in (plain.get_content(), html.get_content()):
        for needle in ("mmlu-pro", "60.25", "-2.25", "12,345.68 USD", "9,000.50 USD"):
            assert needle in part, needle


def test_a_regression_message_is_checked_like_an_alert() -> None:
    with pytest.raises(ValueError, match="gain"):
        build_request(make_regression(facts={"gain": "lots"}), "slack", URL, None)
    with pytest.raises(ValueError, match="kind"):
        build_request(make_regression(kind="threshold"), "slack", URL, None)
    with pytest.raises(ValueError, match="currency"):
        build_request(make_regression(currency="usd"), "slack", URL, None)


def test_every_list_of_alert_kinds_agrees() -> None:
    from typing import get_args

    from trainledger.budgets.model import AlertKind
    from trainledger.cli.oncall import ALERT_KINDS
    from trainledger.webhooks.formats.message import KINDS
    from trainledger.webhooks.registry import AlertKindName

    assert get_args(AlertKind) == get_args(AlertKindName) == ALERT_KINDS
    assert set(ALERT_KINDS) <= set(KINDS)


def test_the_cli_offers_every_webhook_format_but_email() -> None:
    from typing import get_args

    from trainledger.cli.oncall import CLI_WEBHOOK_FORMATS
    from trainledger.webhooks.registry import WebhookFormat

    assert set(get_args(WebhookFormat)) - set(CLI_WEBHOOK_FORMATS) == {"email"}
