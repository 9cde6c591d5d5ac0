"""Webhook messages for budget alerts: building and signing, with no I/O.

``build_request(alert, fmt, url, secret, now)`` turns one :class:`AlertMessage` into the
exact HTTP request (URL, headers, body bytes) a sender should POST. Nothing here touches
the network or the clock except ``datetime.now`` when ``now`` is not given, so a retry
loop can rebuild the request on every attempt (fresh timestamp and signature, same id).

Formats (``FORMATS``):

``standard``
    Standard Webhooks 1.0 (https://www.standardwebhooks.com, spec text in
    github.com/standard-webhooks/standard-webhooks ``spec/standard-webhooks.md``).
    Body ``{"type": "budget.<kind>", "timestamp": <occurred_at, UTC>, "data": <alert>}``;
    headers ``webhook-id`` (the alert id, stable across retries), ``webhook-timestamp``
    (unix seconds of this attempt) and ``webhook-signature`` =
    ``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), the key being the
    base64 after the ``whsec_`` prefix. :func:`verify_standard` is the receiving side.
``slack``
    Incoming webhook with Block Kit: header, a section of mrkdwn fields, a section of
    top drivers and a context line with the links. Unsigned: the URL is the secret.
``feishu``
    Feishu/Lark custom bot, ``msg_type: "post"`` (rich text). Post ``text`` elements are
    shown literally, so names need no markdown escaping and cannot inject links or
    mentions; links are separate ``a`` elements. Optionally signed (``timestamp`` and
    ``sign`` in the body, see :func:`feishu_sign`).
``dingtalk``
    DingTalk custom robot, ``msgtype: "markdown"``. Optionally signed (``timestamp`` and
    ``sign`` query parameters, see :func:`dingtalk_sign`).
``wecom``
    WeCom (企业微信) group robot, ``msgtype: "markdown"``; content capped at 4096 UTF-8
    bytes (:func:`truncate_utf8`). Unsigned: the ``key`` in the URL is the secret.

User-supplied strings (project, scope, period, budget and driver names, link labels)
have control characters removed and are clipped, then escaped for the target markup:
Slack mrkdwn gets ``& < >`` as entities (Slack's documented escaping) and every mrkdwn
text object is ``verbatim``; DingTalk/WeCom markdown get ``& < >`` as entities and
``\\ ` * _ [ ] ~ |`` backslash-escaped. Amounts must be decimal strings and the currency
three capital letters, so they never need escaping. JSON bodies are encoded with
msgspec in deterministic order (struct fields in declaration order, dict keys sorted).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

import msgspec

__all__ = [
    "FORMATS",
    "KINDS",
    "AlertMessage",
    "OutgoingRequest",
    "build_request",
    "dingtalk_sign",
    "feishu_sign",
    "generate_secret",
    "standard_signature",
    "truncate_utf8",
    "verify_standard",
]

FORMATS: Final = ("standard", "slack", "feishu", "dingtalk", "wecom")
KINDS: Final = ("threshold", "forecast", "growth", "waste")

MAX_DRIVERS: Final = 5
WECOM_MAX_BYTES: Final = 4096
STANDARD_SECRET_PREFIX: Final = "whsec_"
# The spec: symmetric signing secrets are random, "at least 24 bytes".
STANDARD_MIN_KEY_BYTES: Final = 24
STANDARD_TOLERANCE_S: Final = 300


class AlertMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One alert, as the alerting engine hands it to a webhook sender."""

    id: str  # stable alert id; also the Standard Webhooks webhook-id
    kind: str  # "threshold" | "forecast" | "growth" | "waste"
    project: str
    budget_id: str | None
    budget_name: str | None
    scope: dict[str, str]  # {"stage": "pretrain"}; {} = whole project
    period: str  # "2026-11", "2026-W48", "window", "2026-11-30"
    threshold_pct: int | None
    amount: str  # budget amount, decimal string
    spent: str  # spend after the crossing, decimal string
    limit: str  # the value that was crossed
    over_by: str  # spent - limit, decimal string (may be "0.00")
    currency: str
    forecast: str | None = None
    top_drivers: list[dict[str, str]] = []  # [{"name": ..., "cost": ...}], at most 5 used
    occurred_at: datetime  # tz-aware
    links: dict[str, str] = {}  # {"costs": url, "alerts": url, "budget": url}


class OutgoingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An HTTP request ready to send: POST ``body`` to ``url`` with ``headers``."""

    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"


class _StandardPayload(msgspec.Struct, frozen=True):
    type: str
    timestamp: datetime
    data: AlertMessage


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_DECIMAL_RE: Final = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
_CURRENCY_RE: Final = re.compile(r"^[A-Z]{3}$")
# Printable ASCII without "." (0x2e): the spec asks that the id never contain a full stop,
# since it is joined to the timestamp and body with full stops before signing.
_WEBHOOK_ID_RE: Final = re.compile(r"^[\x21-\x2d\x2f-\x7e]{1,256}$")
# C0/C1 controls, line/paragraph separators and bidi overrides/isolates.
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
_MD_SPECIAL_RE: Final = re.compile(r"([\\`*_\[\]~|])")
_URL_SAFE: Final = "!#$%&'*+,/:;=?@[]~"
_JSON: Final = "application/json"

_KIND_LABEL: Final = {
    "threshold": "Budget threshold crossed",
    "forecast": "Forecast overrun",
    "growth": "Abnormal daily growth",
    "waste": "Waste finding",
}
_LINK_ORDER: Final = ("costs", "alerts", "budget")
_LINK_LABEL: Final = {"costs": "Costs", "alerts": "Alerts", "budget": "Budget"}

Escape = Callable[[str], str]


# --- secrets and signatures -------------------------------------------------------------


def generate_secret() -> str:
    """A new Standard Webhooks signing secret: ``whsec_`` + base64 of 24 random bytes."""
    return STANDARD_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def _standard_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (the ``whsec_`` prefix is optional)."""
    raw = secret.removeprefix(STANDARD_SECRET_PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret is not base64 after the whsec_ prefix") from exc
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def standard_signature(secret: str, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` over ``{msg_id}.{timestamp}.{body}`` (Standard Webhooks)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_standard_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify_standard(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    tolerance_s: int = STANDARD_TOLERANCE_S,
    now: datetime | None = None,
) -> bool:
    """Check a Standard Webhooks delivery: headers present, timestamp within ``tolerance_s``
    of ``now`` (either direction), and at least one ``v1`` signature in the space-separated
    ``webhook-signature`` list matching, compared in constant time. Header names are
    case-insensitive. Raises ``ValueError`` only for a malformed *secret*; anything wrong
    with the request itself returns False.
    """
    key = _standard_key(secret)
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not (msg_id and stamp and signatures):
        return False
    if not (stamp.isascii() and stamp.isdigit()):
        return False
    current = _unix_s(_aware(now, "now")) if now is not None else _unix_s(datetime.now(UTC))
    if abs(current - int(stamp)) > tolerance_s:
        return False
    payload = body.encode() if isinstance(body, str) else body
    expected = hmac.new(key, f"{msg_id}.{stamp}.".encode() + payload, hashlib.sha256).digest()
    for entry in signatures.split():
        version, sep, encoded = entry.partition(",")
        if not sep or version != "v1":
            continue  # other schemes (e.g. v1a, asymmetric) are not ours to check
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(candidate, expected):
            return True
    return False


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu/Lark custom-bot signature for ``timestamp_s`` (unix seconds).

    The string ``f"{timestamp}\\n{secret}"`` is the HMAC-SHA256 *key* and the message is
    empty; the result is base64. Sources: Feishu "自定义机器人使用指南 / 签名校验"
    (open.feishu.cn/document/client-docs/bot-v3/add-custom-bot): "把 timestamp + "\\n" +
    密钥 当做签名字符串，使用 HmacSHA256 算法计算签名，再进行 Base64 编码", whose demo code
    does ``hmac.new(string_to_sign.encode("utf-8"), digestmod=hashlib.sha256)`` (Python)
    and ``mac.init(new SecretKeySpec(stringToSign...)); mac.doFinal(new byte[]{})`` (Java);
    the same in github.com/electricbubble/feishu-bot-api ``api.go`` ``genSign`` and
    go-lark style ``GenSign`` helpers (``hmac.New(sha256.New, []byte(stringToSign))`` and
    an empty write). Unlike DingTalk, the secret is *not* the key.
    """
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk custom-robot signature for ``timestamp_ms`` (unix milliseconds), before
    URL encoding.

    HMAC-SHA256 with the secret (the ``SEC…`` string) as key over
    ``f"{timestamp}\\n{secret}"``, then base64; the caller URL-encodes it into the
    ``sign`` query parameter. Source: DingTalk "自定义机器人安全设置 / 加签"
    (open.dingtalk.com), mirrored at apifox.com/apidoc/docs-site/467052/doc-3550006:
    "把timestamp+"\\n"+密钥当做签名字符串，使用HmacSHA256算法计算签名，然后进行Base64
    encode，最后再把签名参数再进行urlEncode"; its Python demo is
    ``hmac.new(secret_enc, string_to_sign_enc, digestmod=hashlib.sha256)`` followed by
    ``urllib.parse.quote_plus(base64.b64encode(hmac_code))``.
    """
    mac = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode("ascii")


# --- small helpers ----------------------------------------------------------------------


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware")
    return value


def _unix_s(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(seconds=1)


def _unix_ms(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(milliseconds=1)


def _clean(value: str, limit: int) -> str:
    """Control characters to spaces, trimmed, clipped to ``limit`` characters with '…'."""
    text = _CONTROL_RE.sub(" ", value).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _esc_slack(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _esc_md(value: str) -> str:
    entities = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL_RE.sub(r"\\\1", entities)


def _plain(value: str) -> str:
    return value


def _safe_link(url: str) -> str | None:
    """An http(s) URL with the characters that break markup links percent-encoded."""
    url = _CONTROL_RE.sub("", url).strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or len(url) > 2000:
        return None
    return quote(url, safe=_URL_SAFE)


def truncate_utf8(text: str, max_bytes: int, marker: str = "\n…(truncated)") -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, never inside a character.

    When cutting, it prefers the last line break in the second half of the budget (lines
    are self-contained markup), otherwise cuts at a character boundary and drops a
    trailing half-written entity or escape backslash; ``marker`` is appended.
    """
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(marker.encode())
    if room <= 0:
        return marker.encode()[:max_bytes].decode("utf-8", "ignore")
    head = data[:room].decode("utf-8", "ignore")
    newline = head.rfind("\n")
    if newline >= len(head) // 2:
        head = head[:newline]
    else:
        head = re.sub(r"(&#?[A-Za-z0-9]*|\\)$", "", head)
    return head + marker


# --- validation and the neutral view ----------------------------------------------------


def _validate(alert: AlertMessage) -> None:
    if alert.kind not in KINDS:
        raise ValueError(f"alert kind must be one of {KINDS}, not {alert.kind!r}")
    if not alert.id:
        raise ValueError("alert id is empty")
    _aware(alert.occurred_at, "occurred_at")
    for name in ("amount", "spent", "limit", "over_by", "forecast"):
        value = getattr(alert, name)
        if value is not None and not _DECIMAL_RE.match(value):
            raise ValueError(f"{name} must be a decimal string, not {value!r}")
    if not _CURRENCY_RE.match(alert.currency):
        raise ValueError(f"currency must be three capital letters, not {alert.currency!r}")
    if alert.threshold_pct is not None and alert.threshold_pct < 0:
        raise ValueError("threshold_pct must not be negative")


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("webhook url must be an absolute http(s) URL")


class _View(msgspec.Struct, frozen=True, kw_only=True):
    """The alert's display strings: cleaned and clipped, but not yet escaped."""

    kind: str
    title: str
    project: str
    scope: str
    period: str
    budget: str | None
    threshold_pct: int | None
    amount: str
    spent: str
    limit: str
    over_by: str
    forecast: str | None
    currency: str
    drivers: list[tuple[str, str]]
    links: list[tuple[str, str]]
    alert_id: str
    occurred: str


def _view(alert: AlertMessage) -> _View:
    project = _clean(alert.project, 80) or "(unnamed project)"
    budget_raw = alert.budget_name or alert.budget_id
    budget = _clean(budget_raw, 80) if budget_raw else None
    if alert.scope:
        pairs = (f"{_clean(k, 60)}={_clean(v, 100)}" for k, v in sorted(alert.scope.items()))
        scope = _clean(", ".join(pairs), 300)
    else:
        scope = "whole project"
    drivers = [
        (
            _clean(driver.get("name", ""), 160) or "(unnamed)",
            _clean(driver.get("cost", ""), 40) or "?",
        )
        for driver in alert.top_drivers[:MAX_DRIVERS]
    ]
    keys: list[str] = [k for k in _LINK_ORDER if k in alert.links]
    keys += sorted(k for k in alert.links if k not in _LINK_ORDER)
    links: list[tuple[str, str]] = []
    for key in keys:
        url = _safe_link(alert.links[key])
        if url is not None:
            links.append((_LINK_LABEL.get(key) or _clean(key, 40) or "link", url))
    shown = budget or "(none)"
    if alert.kind == "threshold":
        pct = f" {alert.threshold_pct}%" if alert.threshold_pct is not None else " its limit"
        title = f"{project}: budget {shown} crossed{pct}"
    elif alert.kind == "forecast":
        title = f"{project}: forecast overrun on budget {shown}"
    elif alert.kind == "growth":
        title = f"{project}: abnormal daily spend growth"
    else:
        title = f"{project}: waste finding"
    occurred = alert.occurred_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return _View(
        kind=alert.kind,
        title=title,
        project=project,
        scope=scope,
        period=_clean(alert.period, 40) or "?",
        budget=budget,
        threshold_pct=alert.threshold_pct,
        amount=alert.amount,
        spent=alert.spent,
        limit=alert.limit,
        over_by=alert.over_by,
        forecast=alert.forecast,
        currency=alert.currency,
        drivers=drivers,
        links=links,
        alert_id=_clean(alert.id, 120),
        occurred=occurred,
    )


def _summary(v: _View, esc: Escape) -> str:
    """One sentence: what crossed what, and by how much."""
    cur = v.currency
    budget = esc(v.budget or "(none)")
    over = f"{v.over_by} {cur}"
    if v.kind == "threshold":
        if v.threshold_pct is not None:
            return (
                f"Spent {v.spent} {cur} crossed the {v.threshold_pct}% threshold "
                f"({v.limit} {cur} of {v.amount} {cur}) of budget {budget}, over by {over}."
            )
        return (
            f"Spent {v.spent} {cur} crossed the limit {v.limit} {cur} "
            f"of budget {budget}, over by {over}."
        )
    if v.kind == "forecast":
        projected = v.forecast if v.forecast is not None else v.spent
        return (
            f"Forecast {projected} {cur} for {esc(v.period)} exceeds the limit {v.limit} {cur} "
            f"of budget {budget} by {over} (spent so far {v.spent} {cur})."
        )
    if v.kind == "growth":
        return f"Daily spend {v.spent} {cur} exceeded the growth limit {v.limit} {cur} by {over}."
    return f"Waste finding: {v.spent} {cur} against a limit of {v.limit} {cur}, over by {over}."


def _facts(v: _View, esc: Escape) -> list[tuple[str, str]]:
    cur = v.currency
    facts = [("Project", esc(v.project)), ("Scope", esc(v.scope)), ("Period", esc(v.period))]
    if v.budget is not None:
        facts.append(("Budget", f"{esc(v.budget)} ({v.amount} {cur})"))
    if v.threshold_pct is not None:
        facts.append(("Threshold", f"{v.threshold_pct}% = {v.limit} {cur}"))
    facts += [
        ("Spent", f"{v.spent} {cur}"),
        ("Limit", f"{v.limit} {cur}"),
        ("Over by", f"{v.over_by} {cur}"),
    ]
    if v.forecast is not None:
        facts.append(("Forecast", f"{v.forecast} {cur}"))
    return facts


# --- the five formats -------------------------------------------------------------------


def _slack(v: _View) -> dict[str, Any]:
    esc = _esc_slack

    def mrkdwn(text: str) -> dict[str, Any]:
        # verbatim: no automatic linking of URLs, channel names or @-mentions in our text.
        return {"type": "mrkdwn", "text": text, "verbatim": True}

    drivers = "\n".join(f"• {esc(name)} — {esc(cost)} {v.currency}" for name, cost in v.drivers)
    context = [f"<{url}|{esc(label)}>" for label, url in v.links]
    context.append(f"alert {esc(v.alert_id)} · {v.occurred}")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clean(v.title, 150)}},
        {
            "type": "section",
            "text": mrkdwn(_summary(v, esc)),
            "fields": [mrkdwn(f"*{label}*\n{value}") for label, value in _facts(v, esc)],
        },
        {
            "type": "section",
            "text": mrkdwn("*Top cost drivers*\n" + (drivers or "_no breakdown available_")),
        },
        {"type": "context", "elements": [mrkdwn(" · ".join(context))]},
    ]
    text = (
        f"{esc(v.title)}: spent {v.spent} {v.currency}, limit {v.limit} {v.currency}, "
        f"over by {v.over_by} {v.currency} ({esc(v.scope)}, {esc(v.period)})"
    )
    return {"text": text, "blocks": blocks}


def _feishu(v: _View) -> dict[str, Any]:
    def text(value: str, bold: bool = False) -> dict[str, Any]:
        element: dict[str, Any] = {"tag": "text", "text": value}
        if bold:
            element["style"] = ["bold"]
        return element

    content: list[list[dict[str, Any]]] = [[text(_summary(v, _plain))]]
    content += [[text(f"{label}: ", bold=True), text(value)] for label, value in _facts(v, _plain)]
    content.append([text("Top cost drivers:", bold=True)])
    if v.drivers:
        content += [
            [text(f"{i}. {name} — {cost} {v.currency}")]
            for i, (name, cost) in enumerate(v.drivers, 1)
        ]
    else:
        content.append([text("no breakdown available")])
    if v.links:
        row = [text("Links: ", bold=True)]
        for i, (label, url) in enumerate(v.links):
            if i:
                row.append(text(" · "))
            row.append({"tag": "a", "text": label, "href": url})
        content.append(row)
    content.append([text(f"alert {v.alert_id} · {v.occurred}")])
    return {
        "msg_type": "post",
        "content": {"post": {"zh_cn": {"title": v.title, "content": content}}},
    }


def _dingtalk(v: _View) -> dict[str, Any]:
    esc = _esc_md
    lines = [f"#### {esc(v.title)}", "", _summary(v, esc), ""]
    lines += [f"- **{label}:** {value}" for label, value in _facts(v, esc)]
    lines += ["", "**Top cost drivers**", ""]
    if v.drivers:
        lines += [
            f"{i}. {esc(name)} — {esc(cost)} {v.currency}"
            for i, (name, cost) in enumerate(v.drivers, 1)
        ]
    else:
        lines.append("no breakdown available")
    if v.links:
        lines += ["", " | ".join(f"[{esc(label)}]({url})" for label, url in v.links)]
    lines += ["", f"alert {esc(v.alert_id)} · {v.occurred}"]
    return {"msgtype": "markdown", "markdown": {"title": v.title, "text": "\n".join(lines)}}


def _wecom(v: _View) -> dict[str, Any]:
    esc = _esc_md
    lines = [f"### {esc(v.title)}", _summary(v, esc)]
    for label, value in _facts(v, esc):
        shown = f'<font color="warning">{value}</font>' if label == "Over by" else value
        lines.append(f"> **{label}:** {shown}")
    lines.append("**Top cost drivers**")
    if v.drivers:
        lines += [
            f"{i}. {esc(name)} — {esc(cost)} {v.currency}"
            for i, (name, cost) in enumerate(v.drivers, 1)
        ]
    else:
        lines.append("no breakdown available")
    lines += [f"[{esc(label)}]({url})" for label, url in v.links]
    lines.append(f'<font color="comment">alert {esc(v.alert_id)} · {v.occurred}</font>')
    content = truncate_utf8("\n".join(lines), WECOM_MAX_BYTES)
    return {"msgtype": "markdown", "markdown": {"content": content}}


def _encode(payload: Any) -> bytes:
    return msgspec.json.encode(payload, order="deterministic")


def _with_query(url: str, params: list[tuple[str, str]]) -> str:
    """``url`` with ``params`` appended (already-encoded values), replacing same-named ones."""
    parts = urlsplit(url)
    names = {name for name, _ in params}
    kept = [p for p in parts.query.split("&") if p and p.split("=", 1)[0] not in names]
    query = "&".join(kept + [f"{name}={value}" for name, value in params])
    return urlunsplit(parts._replace(query=query))


def build_request(
    alert: AlertMessage,
    fmt: str,
    url: str,
    secret: str | None,
    now: datetime | None = None,
) -> OutgoingRequest:
    """The POST request delivering ``alert`` to ``url`` in format ``fmt``.

    ``secret``: required for ``standard`` (a ``whsec_`` secret of at least 24 bytes);
    optional for ``feishu`` and ``dingtalk`` (the bot's signing secret); must be None for
    ``slack`` and ``wecom``, which have no signing. ``now`` (tz-aware) is the attempt
    time used for signature timestamps; default the current time. Raises ``ValueError``
    for an unknown format, a bad URL or secret, or an alert with a naive timestamp,
    unknown kind, non-decimal amounts, or (``standard``) an id that is not printable
    ASCII without ``.``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown webhook format {fmt!r}; expected one of {FORMATS}")
    _check_url(url)
    _validate(alert)
    when = _aware(now, "now") if now is not None else datetime.now(UTC)
    headers = {"content-type": _JSON}

    if fmt == "standard":
        if secret is None:
            raise ValueError("the standard format needs a whsec_ signing secret")
        if len(_standard_key(secret)) < STANDARD_MIN_KEY_BYTES:
            raise ValueError(f"signing secret must be at least {STANDARD_MIN_KEY_BYTES} bytes")
        if not _WEBHOOK_ID_RE.match(alert.id):
            raise ValueError("alert id must be printable ASCII without '.' to be a webhook-id")
        data = msgspec.structs.replace(alert, top_drivers=alert.top_drivers[:MAX_DRIVERS])
        payload = _StandardPayload(
            type=f"budget.{alert.kind}",
            timestamp=alert.occurred_at.astimezone(UTC),
            data=data,
        )
        body = _encode(payload)
        stamp = _unix_s(when)
        headers["webhook-id"] = alert.id
        headers["webhook-timestamp"] = str(stamp)
        headers["webhook-signature"] = standard_signature(secret, alert.id, stamp, body)
        return OutgoingRequest(url=url, headers=headers, body=body)

    if secret is not None and fmt in ("slack", "wecom"):
        raise ValueError(f"{fmt} webhooks are not signed; the URL is the secret")
    if secret == "":
        raise ValueError("secret is empty; pass None for an unsigned bot")
    view = _view(alert)
    if fmt == "slack":
        return OutgoingRequest(url=url, headers=headers, body=_encode(_slack(view)))
    if fmt == "wecom":
        return OutgoingRequest(url=url, headers=headers, body=_encode(_wecom(view)))
    if fmt == "feishu":
        message = _feishu(view)
        if secret is not None:
            stamp = _unix_s(when)
            message["timestamp"] = str(stamp)
            message["sign"] = feishu_sign(secret, stamp)
        return OutgoingRequest(url=url, headers=headers, body=_encode(message))
    # dingtalk
    if secret is not None:
        stamp_ms = _unix_ms(when)
        sign = quote_plus(dingtalk_sign(secret, stamp_ms))
        url = _with_query(url, [("timestamp", str(stamp_ms)), ("sign", sign)])
    return OutgoingRequest(url=url, headers=headers, body=_encode(_dingtalk(view)))
