"""Webhook message building and signing for budget alerts (service.webhooks.formats: build,
the format modules, view and signing).

Signatures are checked three ways: published vectors, an independent re-implementation
here written from the vendors' documented algorithms (stdlib hmac), and, for Standard
Webhooks, the reference ``standardwebhooks`` library when it is installed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlsplit

import msgspec
import pytest
from trainledger.webhooks.formats.build import build_request
from trainledger.webhooks.formats.message import AlertMessage, CrossedThreshold, OutgoingRequest
from trainledger.webhooks.formats.signing import (
    dingtalk_sign,
    feishu_sign,
    generate_secret,
    standard_signature,
    verify_standard,
)
from trainledger.webhooks.formats.table import HTTP_NAMES
from trainledger.webhooks.formats.view import truncate_utf8

NOW = datetime(2026, 11, 20, 12, 30, 15, 250_000, tzinfo=UTC)
NOW_S = 1795177815  # NOW as unix seconds (checked below, independently of the module)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24-byte key, the spec's example secret
COSTS_URL = "https://ledger.example/v1/costs?project=llm-7b&stage=pretrain"
HOSTILE = "evil*_[x](http://evil.example)<!channel><@all>&`~|\n# injected\u202e"


def make_alert(**changes: Any) -> AlertMessage:
    fields: dict[str, Any] = {
        "id": "alrt_llm-7b_pretrain-nov_2026-11_80",
        "kind": "threshold",
        "project": "llm-7b",
        "budget_id": "bud-1",
        "budget_name": "pretrain-nov",
        "scope": {"stage": "pretrain"},
        "period": "2026-11",
        "threshold_pct": 80,
        "amount": "10000.00",
        "spent": "8123.40",
        "limit": "8000.00",
        "over_by": "123.40",
        "currency": "USD",
        "top_drivers": [
            {"name": "gpu.h100.hour / pretrain", "cost": "6000.00"},
            {"name": "storage.gb.month / pretrain", "cost": "900.10"},
        ],
        "occurred_at": datetime(2026, 11, 20, 20, 0, tzinfo=timezone(timedelta(hours=8))),
        "links": {
            "costs": COSTS_URL,
            "alerts": "https://ledger.example/v1/alerts?project=llm-7b",
            "budget": "https://ledger.example/v1/budgets/bud-1",
        },
    }
    fields.update(changes)
    return AlertMessage(**fields)


def decode(request: OutgoingRequest) -> Any:
    return msgspec.json.decode(request.body)


def message_text(fmt: str, request: OutgoingRequest, markup_only: bool = False) -> str:
    """Everything a reader of the chat message would see (and link to), as one string.
    ``markup_only`` leaves out the fields the vendors show as plain text (Slack's header
    block, DingTalk's notification title), which need no escaping."""
    body = decode(request)
    if fmt == "slack":
        parts = [body["text"]]
        for block in body["blocks"]:
            if markup_only and block["type"] == "header":
                continue
            if "text" in block:
                parts.append(block["text"]["text"])
            parts += [field["text"] for field in block.get("fields", [])]
            parts += [element["text"] for element in block.get("elements", [])]
        return "\n".join(parts)
    if fmt == "feishu":
        post = body["content"]["post"]["zh_cn"]
        parts = [post["title"]]
        for row in post["content"]:
            parts.append("".join(e["text"] + e.get("href", "") for e in row))
        return "\n".join(parts)
    if fmt == "dingtalk":
        title = "" if markup_only else body["markdown"]["title"] + "\n"
        return str(title + body["markdown"]["text"])
    assert fmt == "wecom"
    return str(body["markdown"]["content"])


# --- Standard Webhooks ------------------------------------------------------------------


def spec_verify(secret: str, headers: dict[str, str], body: bytes, now_s: int) -> bool:
    """Independent verifier written from the Standard Webhooks spec text
    (github.com/standard-webhooks/standard-webhooks spec/standard-webhooks.md, "Signature
    scheme", "Webhook headers" and "Verifying signatures"): key = base64-decode of the
    secret after ``whsec_``; signed content ``{msg_id}.{timestamp}.{payload}``; the header
    is a space-delimited list of ``v1,<base64>``; the timestamp must be within tolerance.
    """
    key = base64.b64decode(secret.split("_", 1)[1])
    msg_id = headers["webhook-id"]
    stamp = headers["webhook-timestamp"]
    if abs(now_s - int(stamp)) > 300:
        return False
    content = msg_id.encode() + b"." + stamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return any(
        sig.split(",", 1) == ["v1", expected] for sig in headers["webhook-signature"].split(" ")
    )


def test_now_constant_is_right() -> None:
    assert (NOW - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() // 1 == NOW_S


def test_standard_signature_matches_the_published_vector() -> None:
    # The vector of the reference libraries: standard-webhooks libraries/python/tests/
    # test_webhooks.py::test_sign_function (also used by the Svix libraries). Recomputed
    # with `openssl dgst -sha256 -mac HMAC` while writing this test: same value.
    body = b'{"test": 2432232314}'
    signature = standard_signature(SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    at = datetime.fromtimestamp(1614265330, UTC)
    assert verify_standard(SECRET, headers, body, now=at)
    # The prefix is optional, as in the reference implementation.
    assert verify_standard(SECRET.removeprefix("whsec_"), headers, body, now=at)
    assert not verify_standard(SECRET, headers, body.replace(b"2", b"3"), now=at)


def test_standard_request_shape_and_headers() -> None:
    alert = make_alert()
    request = build_request(alert, "standard", "https://hooks.example/in", SECRET, now=NOW)
    assert request.method == "POST"
    assert request.url == "https://hooks.example/in"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == alert.id
    assert request.headers["webhook-timestamp"] == str(NOW_S)
    assert request.headers["webhook-signature"].startswith("v1,")
    body = decode(request)
    assert set(body) == {"type", "timestamp", "data"}
    assert body["type"] == "budget.threshold"
    assert body["timestamp"] == "2026-11-20T12:00:00Z"  # occurred_at, normalised to UTC
    data = body["data"]
    assert data["id"] == alert.id
    assert data["project"] == "llm-7b"
    assert data["scope"] == {"stage": "pretrain"}
    assert data["threshold_pct"] == 80
    assert (data["spent"], data["limit"], data["over_by"]) == ("8123.40", "8000.00", "123.40")
    assert data["top_drivers"][0] == {"name": "gpu.h100.hour / pretrain", "cost": "6000.00"}
    assert data["links"]["costs"] == COSTS_URL
    assert msgspec.convert(data, AlertMessage) == alert  # nothing lost in the payload


def test_standard_request_verifies_with_ours_and_the_spec_reimplementation() -> None:
    request = build_request(make_alert(), "standard", "https://hooks.example/in", SECRET, now=NOW)
    assert verify_standard(SECRET, request.headers, request.body, now=NOW)
    assert spec_verify(SECRET, request.headers, request.body, NOW_S)
    # Header names are case-insensitive on the wire.
    shouting = {name.upper(): value for name, value in request.headers.items()}
    assert verify_standard(SECRET, shouting, request.body, now=NOW)


def test_standard_request_verifies_with_the_reference_library() -> None:
    standardwebhooks = pytest.importorskip("standardwebhooks")
    secret = generate_secret()
    # The library checks the timestamp against the real clock, so sign "now".
    request = build_request(make_alert(), "standard", "https://hooks.example/in", secret)
    payload = standardwebhooks.Webhook(secret).verify(request.body, dict(request.headers))
    assert payload["type"] == "budget.threshold"
    assert payload["data"]["project"] == "llm-7b"
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(generate_secret()).verify(request.body, dict(request.headers))


def test_verify_standard_rejections() -> None:
    request = build_request(make_alert(), "standard", "https://hooks.example/in", SECRET, now=NOW)
    headers, body = dict(request.headers), request.body
    assert verify_standard(SECRET, headers, body, now=NOW)
    assert not verify_standard(SECRET, headers, body + b" ", now=NOW)
    assert not verify_standard(generate_secret(), headers, body, now=NOW)
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        partial = {k: v for k, v in headers.items() if k != name}
        assert not verify_standard(SECRET, partial, body, now=NOW)
    assert not verify_standard(SECRET, {**headers, "webhook-id": "other"}, body, now=NOW)
    assert not verify_standard(SECRET, {**headers, "webhook-timestamp": "soon"}, body, now=NOW)
    # The timestamp is signed: moving it breaks the signature even inside the tolerance.
    moved = {**headers, "webhook-timestamp": str(NOW_S + 1)}
    assert not verify_standard(SECRET, moved, body, now=NOW)
    # Only v1 is ours to check; v1a (asymmetric) with the same bytes is ignored.
    sig = headers["webhook-signature"].split(",", 1)[1]
    assert not verify_standard(
        SECRET, {**headers, "webhook-signature": f"v1a,{sig}"}, body, now=NOW
    )
    assert not verify_standard(SECRET, {**headers, "webhook-signature": "v1,@@@"}, body, now=NOW)


def test_verify_standard_timestamp_tolerance() -> None:
    request = build_request(make_alert(), "standard", "https://hooks.example/in", SECRET, now=NOW)
    args = (SECRET, request.headers, request.body)
    assert verify_standard(*args, now=NOW + timedelta(seconds=300))
    assert verify_standard(*args, now=NOW - timedelta(seconds=300))
    assert not verify_standard(*args, now=NOW + timedelta(seconds=301))
    assert not verify_standard(*args, now=NOW - timedelta(seconds=301))
    assert verify_standard(*args, tolerance_s=3600, now=NOW + timedelta(minutes=59))
    assert not verify_standard(*args, tolerance_s=10, now=NOW + timedelta(seconds=11))


def test_verify_standard_accepts_any_of_several_signatures() -> None:
    # Secret rotation: the sender signs with old and new keys, space-separated.
    old, new = generate_secret(), generate_secret()
    request = build_request(make_alert(), "standard", "https://hooks.example/in", new, now=NOW)
    signed_old = standard_signature(old, request.headers["webhook-id"], NOW_S, request.body)
    for order in (
        f"{signed_old} {request.headers['webhook-signature']}",
        f"v1a,AAAA {request.headers['webhook-signature']} {signed_old}",
        f"v2,Zm9v  {request.headers['webhook-signature']}",
    ):
        headers = {**request.headers, "webhook-signature": order}
        assert verify_standard(new, headers, request.body, now=NOW)
        assert verify_standard(old, headers, request.body, now=NOW) == (signed_old in order)


def test_standard_id_is_stable_across_retries_and_body_is_deterministic() -> None:
    alert = make_alert()
    first = build_request(alert, "standard", "https://hooks.example/in", SECRET, now=NOW)
    retry_at = NOW + timedelta(minutes=5)
    retry = build_request(alert, "standard", "https://hooks.example/in", SECRET, now=retry_at)
    assert first.headers["webhook-id"] == retry.headers["webhook-id"] == alert.id
    assert first.body == retry.body
    assert first.headers["webhook-timestamp"] != retry.headers["webhook-timestamp"]
    assert first.headers["webhook-signature"] != retry.headers["webhook-signature"]
    # Dict insertion order does not leak into the bytes.
    shuffled = make_alert(
        scope={"region": "us", "stage": "pretrain"},
        links=dict(reversed(list(alert.links.items()))),
    )
    reordered = make_alert(scope={"stage": "pretrain", "region": "us"})
    a = build_request(shuffled, "standard", "https://hooks.example/in", SECRET, now=NOW)
    b = build_request(reordered, "standard", "https://hooks.example/in", SECRET, now=NOW)
    assert a.body == b.body


def test_standard_refuses_unsafe_ids_and_weak_or_missing_secrets() -> None:
    with pytest.raises(ValueError, match="webhook-id"):
        build_request(make_alert(id="alrt_a.b"), "standard", "https://h.example", SECRET)
    with pytest.raises(ValueError, match="webhook-id"):
        build_request(make_alert(id="alrt a"), "standard", "https://h.example", SECRET)
    with pytest.raises(ValueError, match="secret"):
        build_request(make_alert(), "standard", "https://h.example", None)
    short = "whsec_" + base64.b64encode(b"x" * 16).decode()
    with pytest.raises(ValueError, match="24 bytes"):
        build_request(make_alert(), "standard", "https://h.example", short)
    with pytest.raises(ValueError, match="base64"):
        build_request(make_alert(), "standard", "https://h.example", "whsec_not*base64")


def test_generate_secret() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 24
    assert generate_secret() != secret


# --- Feishu -----------------------------------------------------------------------------


def feishu_reference(secret: str, timestamp: int) -> str:
    """Feishu's documented demo (自定义机器人 签名校验, Python): the string
    ``timestamp + "\\n" + secret`` is the HMAC-SHA256 key, the message is empty."""
    string_to_sign = f"{timestamp}\n{secret}"
    digest = hmac.new(string_to_sign.encode("utf-8"), digestmod=hashlib.sha256).digest()
    return base64.b64encode(digest).decode("utf-8")


def test_feishu_sign_vector() -> None:
    # No vendor-published sign value was found; this one was computed while writing the
    # test with `printf '' | openssl dgst -sha256 -hmac "$(printf '1599360473\nthis is
    # secret')" -binary | base64` (1599360473 is the example timestamp of Feishu's docs).
    assert feishu_sign("this is secret", 1599360473) == (
        "/eYKrXQBzTjUZJ3s6NX16VxGbTwmK7AEs8/FnvC1CSw="
    )
    assert feishu_reference("this is secret", 1599360473) == feishu_sign(
        "this is secret", 1599360473
    )


def test_feishu_signed_request() -> None:
    url = "https://open.feishu.cn/open-apis/bot/v2/hook/abc"
    request = build_request(make_alert(), "feishu", url, "feishu-secret", now=NOW)
    assert request.url == url
    body = decode(request)
    assert body["timestamp"] == str(NOW_S)
    assert body["sign"] == feishu_reference("feishu-secret", NOW_S)
    # Not the DingTalk construction (secret as key, string as message), a common mix-up.
    dingtalk_style = hmac.new(b"feishu-secret", f"{NOW_S}\nfeishu-secret".encode(), "sha256")
    assert body["sign"] != base64.b64encode(dingtalk_style.digest()).decode()


def test_feishu_unsigned_request_and_shape() -> None:
    request = build_request(make_alert(), "feishu", "https://open.feishu.cn/x", None, now=NOW)
    body = decode(request)
    assert "sign" not in body and "timestamp" not in body
    assert body["msg_type"] == "post"
    post = body["content"]["post"]["zh_cn"]
    assert post["title"] == "llm-7b: budget pretrain-nov crossed 80%"
    assert all(isinstance(row, list) and row for row in post["content"])
    tags = {element["tag"] for row in post["content"] for element in row}
    assert tags == {"text", "a"}
    hrefs = [e["href"] for row in post["content"] for e in row if e["tag"] == "a"]
    assert hrefs[0] == COSTS_URL


# --- DingTalk ---------------------------------------------------------------------------


def dingtalk_reference(secret: str, timestamp_ms: int) -> str:
    """DingTalk's documented demo (自定义机器人 加签, Python 3.8): HMAC-SHA256 keyed with
    the secret over ``timestamp + "\\n" + secret``, base64, then quote_plus."""
    string_to_sign = f"{timestamp_ms}\n{secret}"
    digest = hmac.new(secret.encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha256)
    return quote_plus(base64.b64encode(digest.digest()))


def test_dingtalk_sign_vector() -> None:
    # No vendor-published sign value was found; computed while writing the test with
    # `printf '1577262236757\nSEC_this_is_secret' | openssl dgst -sha256 -hmac
    # 'SEC_this_is_secret' -binary | base64`.
    assert dingtalk_sign("SEC_this_is_secret", 1577262236757) == (
        "pevvF5ezyDVuiQ9rnKKiQky7roT0sSa2UDuZ/2Ltwo0="
    )


def test_dingtalk_signed_request_url() -> None:
    url = "https://oapi.dingtalk.com/robot/send?access_token=tok123"
    request = build_request(make_alert(), "dingtalk", url, "SECabc", now=NOW)
    parts = urlsplit(request.url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "oapi.dingtalk.com", "/robot/send")
    query = dict(pair.split("=", 1) for pair in parts.query.split("&"))
    now_ms = NOW_S * 1000 + 250
    assert query == {
        "access_token": "tok123",
        "timestamp": str(now_ms),
        "sign": dingtalk_reference("SECabc", now_ms),
    }
    assert parse_qs(parts.query)["sign"] == [
        base64.b64encode(
            hmac.new(b"SECabc", f"{now_ms}\nSECabc".encode(), hashlib.sha256).digest()
        ).decode()
    ]
    # A re-signed URL replaces stale parameters instead of piling them up.
    again = build_request(make_alert(), "dingtalk", request.url, "SECabc", now=NOW)
    assert again.url == request.url


def test_dingtalk_unsigned_request_and_shape() -> None:
    url = "https://oapi.dingtalk.com/robot/send?access_token=tok123"
    request = build_request(make_alert(), "dingtalk", url, None, now=NOW)
    assert request.url == url
    body = decode(request)
    assert body["msgtype"] == "markdown"
    assert set(body["markdown"]) == {"title", "text"}
    assert body["markdown"]["title"] == "llm-7b: budget pretrain-nov crossed 80%"
    assert f"[Costs]({COSTS_URL})" in body["markdown"]["text"]


# --- Slack and WeCom --------------------------------------------------------------------


def test_slack_shape() -> None:
    request = build_request(make_alert(), "slack", "https://hooks.slack.com/services/T/B/X", None)
    assert request.headers == {"content-type": "application/json"}
    body = decode(request)
    assert isinstance(body["text"], str) and "123.40" in body["text"]
    blocks = body["blocks"]
    assert [b["type"] for b in blocks] == ["header", "section", "section", "context"]
    assert blocks[0]["text"]["type"] == "plain_text"
    assert len(blocks[0]["text"]["text"]) <= 150
    fields = blocks[1]["fields"]
    assert 1 <= len(fields) <= 10
    assert all(f["type"] == "mrkdwn" and len(f["text"]) <= 2000 for f in fields)
    assert {f["text"].split("\n")[0] for f in fields} >= {
        "*Project*",
        "*Scope*",
        "*Period*",
        "*Spent*",
        "*Limit*",
        "*Over by*",
    }
    assert "gpu.h100.hour / pretrain" in blocks[2]["text"]["text"]
    assert f"<{COSTS_URL}|Costs>" in blocks[3]["elements"][0]["text"]


def test_wecom_shape() -> None:
    request = build_request(make_alert(), "wecom", "https://qyapi.weixin.qq.com/x?key=k", None)
    body = decode(request)
    assert body["msgtype"] == "markdown"
    assert set(body["markdown"]) == {"content"}
    assert len(body["markdown"]["content"].encode()) <= 4096


def test_wecom_truncation_keeps_valid_utf8_under_the_limit() -> None:
    links = {
        f"链接{i:03d}预算告警": f"https://ledger.example/v1/costs?page={i}" for i in range(300)
    }
    request = build_request(make_alert(links=links), "wecom", "https://qyapi.example/x", None)
    content = decode(request)["markdown"]["content"]
    raw = content.encode("utf-8")
    assert 3500 < len(raw) <= 4096
    assert raw.decode("utf-8") == content and "\ufffd" not in content
    assert content.endswith("…(truncated)")
    assert content.startswith("### llm-7b")  # the head of the message survives


@pytest.mark.parametrize("limit", range(0, 60))
def test_truncate_utf8_never_splits_a_character(limit: int) -> None:
    text = "ab€😀中\\_x&amp;" * 5  # 1-, 3-, 4- and 3-byte characters, escapes, entities
    out = truncate_utf8(text, limit, marker="…")
    assert len(out.encode("utf-8")) <= limit
    if len(text.encode()) > limit and limit >= 3:
        assert out.endswith("…")
        head = out.removesuffix("…")
        assert text.startswith(head)
        assert not head.endswith("\\") and not re.search(r"&[a-z]*$", head)


# --- content, per format ----------------------------------------------------------------

CHAT_FORMATS = ("slack", "feishu", "dingtalk", "wecom")
SECRETS: dict[str, str | None] = {"slack": None, "feishu": "s", "dingtalk": "s", "wecom": None}


def test_formats_constant() -> None:
    assert HTTP_NAMES == ("standard", "slack", "feishu", "dingtalk", "wecom", "teams")


@pytest.mark.parametrize("fmt", CHAT_FORMATS)
def test_message_says_what_crossed_what_by_how_much(fmt: str) -> None:
    request = build_request(make_alert(), fmt, "https://chat.example/hook", SECRETS[fmt], now=NOW)
    text = message_text(fmt, request)
    for expected in (
        "llm-7b",  # project
        "stage=pretrain",  # scope
        "2026-11",  # period
        "80%",  # threshold
        "8,123.40 USD",  # spent, formatted for people
        "8,000.00 USD",  # limit
        "123.40 USD",  # over by
        "81% of the budget",
        "gpu.h100.hour / pretrain",  # top driver
        "6,000.00 USD",
        COSTS_URL,  # link back to the API
    ):
        assert expected in text, (fmt, expected)


@pytest.mark.parametrize("fmt", CHAT_FORMATS)
@pytest.mark.parametrize(
    ("kind", "extra", "phrase"),
    [
        ("forecast", {"forecast": "12400.00", "threshold_pct": None}, "Forecast 12,400.00 USD"),
        ("growth", {"budget_id": None, "budget_name": None, "threshold_pct": None}, "growth"),
        ("waste", {"threshold_pct": None, "scope": {}}, "Waste"),
    ],
)
def test_other_kinds(fmt: str, kind: str, extra: dict[str, Any], phrase: str) -> None:
    alert = make_alert(kind=kind, **extra)
    text = message_text(fmt, build_request(alert, fmt, "https://c.example/h", None, now=NOW))
    assert phrase in text
    assert "8,000.00 USD" in text and "123.40 USD" in text
    if not alert.scope:
        assert "whole project" in text
    standard = build_request(alert, "standard", "https://c.example/h", SECRET, now=NOW)
    assert decode(standard)["type"] == f"budget.{kind}"


@pytest.mark.parametrize("fmt", CHAT_FORMATS)
def test_at_most_three_drivers(fmt: str) -> None:
    drivers = [{"name": f"sku-{i}", "cost": f"{100 - i}.00"} for i in range(8)]
    request = build_request(make_alert(top_drivers=drivers), fmt, "https://c.example/h", None)
    text = message_text(fmt, request)
    assert "sku-2" in text and "sku-3" not in text


# --- escaping of hostile names ----------------------------------------------------------


def hostile_alert() -> AlertMessage:
    return make_alert(
        project=HOSTILE,
        scope={"stage": HOSTILE},
        top_drivers=[{"name": HOSTILE, "cost": "1.00"}],
        links={"costs": "https://ledger.example/v1/costs?project=a b)(<x>|y"},
    )


def test_slack_escapes_control_sequences() -> None:
    request = build_request(hostile_alert(), "slack", "https://hooks.slack.com/x", None)
    text = message_text("slack", request, markup_only=True)
    assert "<!channel>" not in text and "<@all>" not in text and "<http://evil" not in text
    assert "&lt;!channel&gt;" in text and "&amp;" in text
    assert "\u202e" not in text and "\n# injected" not in text
    # Our own link is the only <...> left, with the breaking characters percent-encoded.
    assert re.findall(r"<[^>]*>", text) == [
        "<https://ledger.example/v1/costs?project=a%20b%29%28%3Cx%3E%7Cy|Costs>"
    ]
    body = decode(request)
    mrkdwn = [b["text"] for b in body["blocks"] if b.get("text", {}).get("type") == "mrkdwn"]
    assert all(t["verbatim"] is True for t in mrkdwn)


@pytest.mark.parametrize("fmt", ["dingtalk", "wecom"])
def test_markdown_formats_escape_hostile_names(fmt: str) -> None:
    request = build_request(hostile_alert(), fmt, "https://c.example/h", None)
    text = message_text(fmt, request, markup_only=True)
    assert r"evil\*\_\[x\](http://evil.example)&lt;!channel&gt;&lt;@all&gt;&amp;\`\~\|" in text
    assert "<!channel>" not in text and "<@all>" not in text
    # The only unescaped link syntax is our own link.
    assert len(re.findall(r"(?<!\\)\]\(", text)) == 1
    assert "](https://ledger.example/v1/costs?project=a%20b%29%28%3Cx%3E%7Cy)" in text
    assert not any(line.startswith("# injected") for line in text.splitlines())
    assert "\u202e" not in text


def test_feishu_post_keeps_hostile_names_as_literal_text() -> None:
    request = build_request(hostile_alert(), "feishu", "https://open.feishu.cn/x", None)
    rows = decode(request)["content"]["post"]["zh_cn"]["content"]
    elements = [e for row in rows for e in row]
    flattened = HOSTILE.replace("\n", " ").replace("\u202e", "").strip()
    assert any(e["tag"] == "text" and flattened in e["text"] for e in elements)
    links = [e for e in elements if e["tag"] != "text"]
    assert [(e["tag"], e["text"]) for e in links] == [("a", "Costs")]
    assert all("\n" not in e["text"] and "\u202e" not in e["text"] for e in elements)


def test_long_names_are_clipped() -> None:
    alert = make_alert(project="p" * 500, top_drivers=[{"name": "n" * 5000, "cost": "1"}])
    for fmt in CHAT_FORMATS:
        text = message_text(fmt, build_request(alert, fmt, "https://c.example/h", None))
        assert "p" * 500 not in text and "n" * 500 not in text and "…" in text


# --- argument checking ------------------------------------------------------------------


def test_argument_errors() -> None:
    alert = make_alert()
    with pytest.raises(ValueError, match="format"):
        build_request(alert, "carrier-pigeon", "https://c.example/h", None)
    with pytest.raises(ValueError, match="url"):
        build_request(alert, "slack", "ftp://c.example/h", None)
    with pytest.raises(ValueError, match="not signed"):
        build_request(alert, "slack", "https://c.example/h", "secret")
    with pytest.raises(ValueError, match="not signed"):
        build_request(alert, "wecom", "https://c.example/h", "secret")
    with pytest.raises(ValueError, match="empty"):
        build_request(alert, "dingtalk", "https://c.example/h", "")
    with pytest.raises(ValueError, match="timezone"):
        build_request(alert, "slack", "https://c.example/h", None, now=datetime(2026, 1, 1))
    naive = make_alert(occurred_at=datetime(2026, 11, 20, 12))
    with pytest.raises(ValueError, match="timezone"):
        build_request(naive, "slack", "https://c.example/h", None)
    with pytest.raises(ValueError, match="kind"):
        build_request(make_alert(kind="panic"), "slack", "https://c.example/h", None)
    with pytest.raises(ValueError, match="decimal"):
        build_request(make_alert(spent="1e3"), "slack", "https://c.example/h", None)
    with pytest.raises(ValueError, match="decimal"):
        build_request(make_alert(over_by="*1*"), "wecom", "https://c.example/h", None)
    with pytest.raises(ValueError, match="currency"):
        build_request(make_alert(currency="usd"), "slack", "https://c.example/h", None)


# --- a hand-worked message --------------------------------------------------------------


def crossed_three() -> AlertMessage:
    """One batch took budget "pretrain monthly" (1,500 USD, stage pretrain) from 700 USD to
    1562.6800004 USD: past 50 % (750), 80 % (1,200) and 100 % (1,500), over the highest by
    62.6800004. Half the month gone: the forecast is twice the spend."""
    return make_alert(
        id="bud_1:2026-11:t100",
        budget_id="bud_1",
        budget_name="pretrain monthly",
        threshold_pct=100,
        amount="1500",
        spent="1562.6800004",
        limit="1500.00",
        over_by="62.6800004",
        forecast="3125.3600008",
        top_drivers=[
            {"name": "gpu.h100.hour / pretrain / exp-7", "cost": "1200.5"},
            {"name": "storage.gb.month / pretrain", "cost": "362.1800004"},
        ],
        occurred_at=datetime(2026, 11, 16, 0, 0, tzinfo=UTC),
        links={"dashboard": "https://ledger.example/ui/llm-7b?from=2026-11-01&to=2026-11-16"},
        also_crossed=[
            CrossedThreshold(id="bud_1:2026-11:t80", threshold_pct=80, limit="1200.00"),
            CrossedThreshold(id="bud_1:2026-11:t50", threshold_pct=50, limit="750.00"),
        ],
    )


def test_hand_worked_message_in_dingtalk_markdown() -> None:
    request = build_request(crossed_three(), "dingtalk", "https://c.example/h", None)
    body = decode(request)
    assert (
        body["markdown"]["title"] == "llm-7b: budget pretrain monthly crossed 100% (and 80%, 50%)"
    )
    assert body["markdown"]["text"].split("\n") == [
        "#### llm-7b: budget pretrain monthly crossed 100% (and 80%, 50%)",
        "",
        "Spent 1,562.68 USD crossed the 100% threshold (1,500.00 USD) of budget pretrain "
        "monthly (1,500.00 USD), over by 62.68 USD. Also crossed in the same batch: "
        "80% (1,200.00 USD), 50% (750.00 USD). Forecast for 2026-11: 3,125.36 USD.",
        "",
        "- **Project:** llm-7b",
        "- **Scope:** stage=pretrain",
        "- **Period:** 2026-11",
        "- **Budget:** pretrain monthly (1,500.00 USD)",
        "- **Threshold:** 100% = 1,500.00 USD",
        "- **Also crossed:** 80% (1,200.00 USD), 50% (750.00 USD)",
        "- **Spent:** 1,562.68 USD (104% of the budget)",
        "- **Limit:** 1,500.00 USD",
        "- **Over by:** 62.68 USD",
        "- **Forecast:** 3,125.36 USD",
        "",
        "**Top cost drivers** (SKU / stage / experiment)",
        "",
        "1. gpu.h100.hour / pretrain / exp-7 — 1,200.50 USD",
        "2. storage.gb.month / pretrain — 362.18 USD",
        "",
        "[Dashboard](https://ledger.example/ui/llm-7b?from=2026-11-01&to=2026-11-16)",
        "",
        r"alert bud\_1:2026-11:t100 · 2026-11-16 00:00 UTC",
    ]


@pytest.mark.parametrize("fmt", CHAT_FORMATS)
def test_hand_worked_message_in_every_chat_format(fmt: str) -> None:
    request = build_request(crossed_three(), fmt, "https://c.example/h", SECRETS[fmt], now=NOW)
    text = message_text(fmt, request)
    for expected in (
        "crossed 100% (and 80%, 50%)",
        "Spent 1,562.68 USD crossed the 100% threshold (1,500.00 USD)",
        "over by 62.68 USD",
        "Also crossed in the same batch: 80% (1,200.00 USD), 50% (750.00 USD)",
        "Forecast for 2026-11: 3,125.36 USD",
        "1,200.50 USD",
        "362.18 USD",
        "https://ledger.example/ui/llm-7b?from=2026-11-01&to=2026-11-16",
    ):
        assert expected in text, (fmt, expected)
    assert "1562.68" not in text and "0000004" not in text  # no raw figure for people


def test_the_standard_payload_keeps_the_exact_figures() -> None:
    request = build_request(crossed_three(), "standard", "https://c.example/h", SECRET, now=NOW)
    data = decode(request)["data"]
    assert (data["spent"], data["over_by"], data["forecast"]) == (
        "1562.6800004",
        "62.6800004",
        "3125.3600008",
    )
    assert data["top_drivers"][1]["cost"] == "362.1800004"
    assert data["also_crossed"] == [
        {"id": "bud_1:2026-11:t80", "threshold_pct": 80, "limit": "1200.00"},
        {"id": "bud_1:2026-11:t50", "threshold_pct": 50, "limit": "750.00"},
    ]
    assert data["test"] is False
