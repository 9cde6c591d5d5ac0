"""The Teams and email channels' messages, the money they show, and the SMTP target rules
(service.webhooks.formats.teams, mail, people_text, targets.check_smtp_target). No I/O.

The Teams body is validated against the Adaptive Card schema subset in
``tests/data/adaptive-card-1.5-subset.schema.json`` (written for these tests from the
Adaptive Cards 1.5 element reference; unknown properties refused) with ``jsonschema``. The
email is parsed back with the standard library's parser, as a mail client would.
"""

from __future__ import annotations

import email
import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from email.message import EmailMessage
from email.policy import default
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.webhooks.formats.build import build_request
from trainledger.webhooks.formats.mail import EmailSettings, build_email
from trainledger.webhooks.formats.people_text import money_for_people
from trainledger.webhooks.registry import WebhookError, WebhookIn, new_webhook
from trainledger.webhooks.targets.checks import AllowList, UnsafeTarget, check_smtp_target
from trainledger.webhooks.targets.redaction import redacted_url, secret_parts

from costcore.money import format_money, minor_units
from tests.unit.webhooks.test_webhook_formats import HOSTILE, NOW, make_alert

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "data" / "adaptive-card-1.5-subset.schema.json").read_text()
)
CARD = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
TEAMS_URL = "https://prod-01.westeurope.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=s3cr3t-sig"
SETTINGS = EmailSettings(sender="ledger@example.com", to=["ops@example.com", "ml@example.org"])


# --- money for people ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        ("1562.6800004", "USD", "1,562.68 USD"),  # the raw amount
        ("250000", "EUR", "250,000.00 EUR"),
        ("0", "USD", "0.00 USD"),
        ("0.125", "USD", "0.12 USD"),  # half to even
        ("0.135", "USD", "0.14 USD"),
        ("0.000000001", "USD", "<0.01 USD"),  # spent, but under a cent: never "0.00"
        ("1234567.5", "JPY", "1,234,568 JPY"),  # no minor unit
        ("0.4", "JPY", "<1 JPY"),
        ("12.3456", "KWD", "12.346 KWD"),  # three decimals
        ("1000000000000.01", "XXX", "1,000,000,000,000.01 XXX"),
        ("n/a", "USD", "n/a USD"),
    ],
)
def test_money_for_people(amount: str, currency: str, shown: str) -> None:
    assert money_for_people(amount, currency) == shown


@given(
    nano=st.integers(min_value=0, max_value=10**22),
    currency=st.sampled_from(["USD", "JPY", "KWD", "CLF"]),
)
def test_money_for_people_is_the_amount_rounded_to_the_minor_unit(nano: int, currency: str) -> None:
    exact = Decimal(nano).scaleb(-9)
    shown = money_for_people(format_money(nano), currency)  # as the ledger writes amounts
    number, code = shown.rsplit(" ", 1)
    assert code == currency
    places = minor_units(currency)
    if number.startswith("<"):
        assert 0 < exact < Decimal(1).scaleb(-places)
        return
    assert re.fullmatch(r"\d{1,3}(,\d{3})*" + (rf"\.\d{{{places}}}" if places else ""), number)
    assert abs(Decimal(number.replace(",", "")) - exact) <= Decimal(1).scaleb(-places) / 2


# --- Teams --------------------------------------------------------------------------------


def teams(alert: Any) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.json.decode(build_request(alert, "teams", TEAMS_URL, None).body)
    return body


def card_text(body: dict[str, Any]) -> str:
    card = body["attachments"][0]["content"]
    parts = [card["fallbackText"]]
    for element in card["body"]:
        parts.append(element.get("text", ""))
        parts += [f"{f['title']}: {f['value']}" for f in element.get("facts", [])]
    return "\n".join(parts)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kind": "forecast", "forecast": "12400.00", "threshold_pct": None},
        {"kind": "growth", "budget_id": None, "budget_name": None, "threshold_pct": None},
        {"kind": "waste", "threshold_pct": None, "scope": {}, "top_drivers": [], "links": {}},
        {"project": HOSTILE, "scope": {"stage": HOSTILE},
         "top_drivers": [{"name": HOSTILE, "cost": "1"}]},
    ],
)  # fmt: skip
def test_teams_body_is_a_valid_adaptive_card_message(changes: dict[str, Any]) -> None:
    body = teams(make_alert(**changes))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in CARD.iter_errors(body)]
    assert errors == []
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert attachment["content"]["version"] in ("1.4", "1.5")


def test_the_schema_refuses_what_teams_would_not_render() -> None:
    """The control: the validator does fail a card that is wrong."""
    body = teams(make_alert())
    card = body["attachments"][0]["content"]
    for broken in (
        {**body, "attachments": [{**body["attachments"][0], "contentType": "application/json"}]},
        {**body, "attachments": [{"contentType": body["attachments"][0]["contentType"],
                                  "content": {**card, "version": "2.0"}}]},
        {**body, "attachments": [{"contentType": body["attachments"][0]["contentType"],
                                  "content": {**card, "body": [{"type": "TextBlock"}]}}]},
        {**body, "attachments": [{"contentType": body["attachments"][0]["contentType"],
                                  "content": {**card, "body": [{"type": "TextBlock", "text": "x",
                                                                "wieght": "bolder"}]}}]},
        {**body, "attachments": [{"contentType": body["attachments"][0]["contentType"],
                                  "content": {**card, "actions": [{"type": "Action.OpenUrl",
                                                                   "url": "javascript:x"}]}}]},
    ):  # fmt: skip
        assert list(CARD.iter_errors(broken)), broken


def test_teams_card_says_what_crossed_what_with_money_for_people() -> None:
    body = teams(make_alert(spent="8123.4000001", over_by="123.4000001"))
    text = card_text(body)
    for expected in (
        "llm-7b",
        "stage=pretrain",
        "2026-11",
        "80%",
        "Spent: 8,123.40 USD",
        "Limit: 8,000.00 USD",
        "Over by: 123.40 USD",
        "pretrain-nov (10,000.00 USD)",
        "gpu.h100.hour / pretrain: 6,000.00 USD",
        "storage.gb.month / pretrain: 900.10 USD",
    ):
        assert expected in text, expected
    assert "8123.4000001" not in text
    card = body["attachments"][0]["content"]
    assert [(a["title"], a["url"]) for a in card["actions"]] == [
        ("Costs", "https://ledger.example/v1/costs?project=llm-7b&stage=pretrain"),
        ("Alerts", "https://ledger.example/v1/alerts?project=llm-7b"),
        ("Budget", "https://ledger.example/v1/budgets/bud-1"),
    ]


def test_teams_escapes_markdown_in_names() -> None:
    alert = make_alert(project=HOSTILE, top_drivers=[{"name": HOSTILE, "cost": "1.00"}])
    text = card_text(teams(alert))
    assert r"evil\*\_\[x\](http://evil.example)<!channel><@all>&\`\~|" in text
    assert "[x](http" not in text and "\u202e" not in text and "\n# injected" not in text


def test_teams_is_unsigned_and_its_url_is_a_secret() -> None:
    with pytest.raises(ValueError, match="not signed"):
        build_request(make_alert(), "teams", TEAMS_URL, "a-secret")
    assert redacted_url(TEAMS_URL, "teams") == "https://prod-01.westeurope.logic.azure.com/…"
    assert "s3cr3t-sig" in " ".join(secret_parts(TEAMS_URL, "teams", None))


# --- email --------------------------------------------------------------------------------


def parsed(message: EmailMessage) -> EmailMessage:
    """The message as a receiving mail client reads it."""
    again = email.message_from_bytes(message.as_bytes(), policy=default)
    assert isinstance(again, EmailMessage)
    return again


def test_email_has_text_and_html_with_money_for_people() -> None:
    alert = make_alert(spent="8123.4000001")
    message = parsed(build_email(alert, SETTINGS, webhook_id="wh_1", now=NOW))
    assert message["Subject"] == "[trainledger] llm-7b: budget pretrain-nov crossed 80%"
    assert message["From"] == "trainledger <ledger@example.com>"
    assert message["To"] == "ops@example.com, ml@example.org"
    assert message["Auto-Submitted"] == "auto-generated"
    assert message["X-Trainledger-Alert-Id"] == alert.id
    assert message.get_content_type() == "multipart/alternative"
    plain = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert plain is not None and html is not None
    text, markup = plain.get_content(), html.get_content()
    for part in (text, markup):
        for expected in ("llm-7b", "stage=pretrain", "80%", "8,123.40 USD", "8,000.00 USD",
                         "123.40 USD", "gpu.h100.hour / pretrain", "6,000.00 USD"):  # fmt: skip
            assert expected in part, expected
        assert "8123.4000001" not in part
    assert "Costs: https://ledger.example/v1/costs?project=llm-7b&stage=pretrain" in text
    assert '<a href="https://ledger.example/v1/costs?project=llm-7b&amp;stage=pretrain">' in markup


def test_email_message_id_is_the_same_on_every_attempt() -> None:
    alert = make_alert()
    first = build_email(alert, SETTINGS, webhook_id="wh_1", now=NOW)
    later = build_email(alert, SETTINGS, webhook_id="wh_1", now=datetime(2027, 1, 1, tzinfo=UTC))
    other = build_email(alert, SETTINGS, webhook_id="wh_2", now=NOW)
    assert first["Message-ID"] == later["Message-ID"] != other["Message-ID"]
    assert re.fullmatch(r"<[0-9a-f]{32}\.wh_1@example\.com>", first["Message-ID"])
    assert first["Date"] != later["Date"]


def test_email_escapes_names_and_keeps_headers_single_line() -> None:
    alert = make_alert(budget_name="<script>x</script>\r\nBcc: victim@example.com", project=HOSTILE)
    message = parsed(build_email(alert, SETTINGS, webhook_id="wh_1", now=NOW))
    assert message["Bcc"] is None and "\n" not in message["Subject"]
    html = message.get_body(("html",))
    assert html is not None
    markup = html.get_content()
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    assert "<!channel>" not in markup and "\u202e" not in markup


def test_email_settings_are_checked() -> None:
    ok = {"from": "ledger@example.com", "to": ["ops@example.com"]}
    assert msgspec.convert(ok, EmailSettings) == EmailSettings(
        sender="ledger@example.com", to=["ops@example.com"]
    )
    for bad in (
        {**ok, "to": []},
        {**ok, "to": ["not-an-address"]},
        {**ok, "to": ["ops@example.com\r\nBcc: x@example.com"]},
        {**ok, "from": "Ledger <ledger@example.com>"},
        {**ok, "tls": "ssl"},
        {**ok, "username": "a\nb"},
        {**ok, "password": "pw"},  # the password is the webhook's secret, sealed
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, EmailSettings)


# --- the SMTP target rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "tls", "port"),
    [
        ("smtp://mail.example.com", "", 587),
        ("smtps://mail.example.com", "", 465),
        ("smtp://mail.example.com", "implicit", 465),
        ("smtp://Mail.Example.COM.:2525", "starttls", 2525),
        ("smtps://93.184.215.14:4650", "implicit", 4650),
        ("smtp://[2606:4700:4700::1111]", "", 587),
    ],
)
def test_smtp_targets_that_pass(url: str, tls: str, port: int) -> None:
    target = check_smtp_target(url, AllowList(), tls)
    assert target.port == port and target.scheme == url.split(":", 1)[0]
    assert target.host in ("mail.example.com", "93.184.215.14", "2606:4700:4700::1111")


@pytest.mark.parametrize(
    ("url", "tls", "why"),
    [
        ("https://mail.example.com", "", "smtp://host"),
        ("smtp://127.0.0.1:25", "", "loopback"),
        ("smtp://10.1.2.3", "", "private"),
        ("smtp://169.254.169.254", "", "link-local"),
        ("smtp://[::1]", "", "loopback"),
        ("smtp://[::ffff:10.0.0.1]", "", "IPv4-mapped form of a private"),
        ("smtp://0x7f.1", "", "unusual IPv4 spelling"),
        ("smtp://2130706433", "", "unusual IPv4 spelling"),
        ("smtp://user:pw@mail.example.com", "", "credentials"),
        ("smtp://mail.example.com/path", "", "only the host and port"),
        ("smtp://mail.example.com?x=1", "", "only the host and port"),
        ("smtp://mail.example.com:0", "", "port"),
        ("smtp://mail.example.com:99999", "", "host and port"),
        ("smtp://mail .example.com", "", "whitespace"),
        ("smtp://mail.example.com", "none", "plain-text SMTP"),
        ("smtps://mail.example.com", "starttls", "implicit TLS"),
        ("smtp://-bad-.example.com", "", "not a valid host name"),
    ],
)
def test_smtp_targets_refused_as_written(url: str, tls: str, why: str) -> None:
    with pytest.raises(UnsafeTarget, match=re.escape(why)):
        check_smtp_target(url, AllowList(), tls)


def test_the_allow_list_admits_loopback_and_plain_text_smtp() -> None:
    allow = AllowList.parse(["127.0.0.1", "relay.internal"])
    assert check_smtp_target("smtp://127.0.0.1:2525", allow, "none").ip is not None
    assert check_smtp_target("smtp://relay.internal:25", allow, "none").host == "relay.internal"
    with pytest.raises(UnsafeTarget, match="private"):
        check_smtp_target("smtp://10.0.0.1", allow)


# --- registration ---------------------------------------------------------------------------


def registration(**fields: Any) -> WebhookIn:
    return msgspec.convert(fields, WebhookIn)


def test_registration_of_the_new_formats() -> None:
    teams_hook = new_webhook(registration(url=TEAMS_URL, format="teams"))
    assert teams_hook.secret is None and teams_hook.email is None
    mail = new_webhook(
        registration(
            url="smtps://smtp.example.com",
            format="email",
            secret="app-password",
            email={"from": "ledger@example.com", "to": ["ops@example.com"], "username": "ledger"},
        )
    )
    assert mail.email is not None and mail.email.tls == "implicit"  # made explicit
    assert mail.secret == "app-password"
    assert redacted_url(mail.url, "email") == "smtps://smtp.example.com"
    starttls = new_webhook(
        registration(
            url="smtp://smtp.example.com", format="email", email={"from": "a@b.c", "to": ["d@e.f"]}
        )
    )
    assert starttls.email is not None and starttls.email.tls == "starttls"


@pytest.mark.parametrize(
    ("fields", "field", "why"),
    [
        ({"url": TEAMS_URL, "format": "teams", "secret": "x"}, "$.secret", "not signed"),
        ({"url": "smtp://smtp.example.com", "format": "email"}, "$.email", "needs email settings"),
        (
            {"url": TEAMS_URL, "format": "teams", "email": {"from": "a@b.c", "to": ["d@e.f"]}},
            "$.email",
            "only an email webhook",
        ),
        (
            {"url": "smtp://smtp.example.com", "format": "email", "secret": "pw",
             "email": {"from": "a@b.c", "to": ["d@e.f"]}},
            "$.secret",
            "both email.username and secret",
        ),
        (
            {"url": "https://smtp.example.com", "format": "email",
             "email": {"from": "a@b.c", "to": ["d@e.f"]}},
            "$.url",
            "smtp://host",
        ),
        (
            {"url": "smtp://192.168.1.10", "format": "email",
             "email": {"from": "a@b.c", "to": ["d@e.f"]}},
            "$.url",
            "private",
        ),
        ({"url": "smtp://smtp.example.com", "format": "teams"}, "$.url", "http"),
    ],
)  # fmt: skip
def test_registration_refusals(fields: dict[str, Any], field: str, why: str) -> None:
    with pytest.raises(WebhookError) as caught:
        new_webhook(registration(**fields))
    assert caught.value.field == field and why in caught.value.reason
