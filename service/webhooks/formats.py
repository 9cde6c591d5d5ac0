"""Webhook messages for budget alerts: building and signing, with no I/O.

``build_request(alert, fmt, url, secret, now)`` turns one :class:`AlertMessage` into the
exact HTTP request (URL, headers, body bytes) a sender should POST. Nothing here touches
the network or the clock except ``datetime.now`` when ``now`` is not given, so a retry
loop can rebuild the request on every attempt (fresh timestamp and signature, same id).

Formats (``FORMATS``):

``standard``
    Standard Webhooks 1.0 (https://www.standardwebhooks.com, spec text in
    github.com/standard-webhooks/standard-webhooks ``spec/standard-webhooks.md``).
    Body ``{"type": "budget.<kind>", "timestamp": <occurred_at, UTC>, "data": <alert>}``
    (an evaluation regression: type ``evaluation.regression``, data a `RegressionMessage`);
    headers ``webhook-id`` (the alert id, stable across retries), ``webhook-timestamp``
    (unix seconds of this attempt) and ``webhook-signature`` =
    ``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), the key being the
    base64 after the ``whsec_`` prefix. ``signing.verify_standard`` is the receiving side.
``slack``
    Incoming webhook with Block Kit: header, a section of mrkdwn fields, a section of
    top drivers and a context line with the links. Unsigned: the URL is the secret.
``feishu``
    Feishu/Lark custom bot, ``msg_type: "post"`` (rich text). Post ``text`` elements are
    shown literally, so names need no markdown escaping and cannot inject links or
    mentions; links are separate ``a`` elements. Optionally signed (``timestamp`` and
    ``sign`` in the body, see ``signing.feishu_sign``).
``dingtalk``
    DingTalk custom robot, ``msgtype: "markdown"``. Optionally signed (``timestamp`` and
    ``sign`` query parameters, see ``signing.dingtalk_sign``).
``teams``
    Microsoft Teams Workflows webhook with an Adaptive Card (`service.webhooks.teams`).
    Unsigned: the ``sig`` in the workflow URL is the secret.
``wecom``
    WeCom (企业微信) group robot, ``msgtype: "markdown"``; content capped at 4096 UTF-8
    bytes (``chat_formats.truncate_utf8``). Unsigned: the ``key`` in the URL is the secret.

User-supplied strings are cleaned, clipped and escaped for each chat markup
(`service.webhooks.chat_formats`); the signatures are in `service.webhooks.signing`. JSON
bodies are encoded with msgspec in deterministic order (struct fields in declaration order,
dict keys sorted).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote_plus, urlsplit, urlunsplit

import msgspec

from .chat_formats import (
    MAX_DRIVERS,
    chat_view,
    dingtalk_body,
    feishu_body,
    slack_body,
    wecom_body,
)
from .regression_text import RegressionMessage
from .signing import (
    STANDARD_MIN_KEY_BYTES,
    aware,
    dingtalk_sign,
    feishu_sign,
    standard_key,
    standard_signature,
    unix_ms,
    unix_s,
)
from .teams import teams_body

__all__ = [
    "FORMATS",
    "KINDS",
    "AlertMessage",
    "CrossedThreshold",
    "Message",
    "OutgoingRequest",
    "RegressionMessage",
    "build_request",
]

FORMATS: Final = ("standard", "slack", "feishu", "dingtalk", "wecom", "teams")
KINDS: Final = ("threshold", "forecast", "growth", "waste", "evaluation_regression")
REGRESSION: Final = "evaluation_regression"


class CrossedThreshold(msgspec.Struct, frozen=True, kw_only=True):
    """A lower threshold of the same budget that the same batch crossed: its own alert (in
    the alert history) is told in the message of the highest one."""

    id: str  # its alert id
    threshold_pct: int | None
    limit: str  # decimal string


class AlertMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One alert, as the alerting engine hands it to a webhook sender. Amounts are exact
    decimal strings (the standard format's machine-readable payload); the chat formats
    show them formatted for people."""

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
    forecast: str | None = None  # the period's spend projected to its end
    # [{"name", "stage", "experiment", "sku", "cost"}] largest first; at most 3 used
    top_drivers: list[dict[str, str]] = []
    occurred_at: datetime  # tz-aware
    links: dict[str, str] = {}  # {"dashboard": url, "costs": url, "alerts": url, "budget": url}
    also_crossed: list[CrossedThreshold] = []  # highest first
    test: bool = False  # a sample sent by POST /v1/webhooks/{id}/test, not an alert


# What a sender is handed: a budget alert's message or an evaluation regression's.
Message = AlertMessage | RegressionMessage


class OutgoingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An HTTP request ready to send: POST ``body`` to ``url`` with ``headers``."""

    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"


class _StandardPayload(msgspec.Struct, frozen=True):
    type: str
    timestamp: datetime
    data: Message


_DECIMAL_RE: Final = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
_CURRENCY_RE: Final = re.compile(r"^[A-Z]{3}$")
# Printable ASCII without "." (0x2e): the spec asks that the id never contain a full stop,
# since it is joined to the timestamp and body with full stops before signing.
_WEBHOOK_ID_RE: Final = re.compile(r"^[\x21-\x2d\x2f-\x7e]{1,256}$")
_JSON: Final = "application/json"


# --- validation -------------------------------------------------------------------------


def _validate_regression(alert: RegressionMessage) -> None:
    if alert.kind != REGRESSION:
        raise ValueError(f"a regression message's kind is {REGRESSION!r}, not {alert.kind!r}")
    if not alert.id:
        raise ValueError("alert id is empty")
    aware(alert.occurred_at, "occurred_at")
    if not _CURRENCY_RE.match(alert.currency):
        raise ValueError(f"currency must be three capital letters, not {alert.currency!r}")
    r = alert.regression
    for name in ("value", "baseline_value", "gain", "tolerance", "rework_exposure"):
        value = getattr(r, name)
        if not _DECIMAL_RE.match(value):
            raise ValueError(f"regression {name} must be a decimal string, not {value!r}")
    aware(r.measured_at, "measured_at")
    if r.rework_since is not None:
        aware(r.rework_since, "rework_since")


def _validate(alert: Message) -> None:
    if isinstance(alert, RegressionMessage):
        _validate_regression(alert)
        return
    if alert.kind not in KINDS or alert.kind == REGRESSION:
        raise ValueError(f"alert kind must be one of {KINDS[:-1]}, not {alert.kind!r}")
    if not alert.id:
        raise ValueError("alert id is empty")
    aware(alert.occurred_at, "occurred_at")
    for name in ("amount", "spent", "limit", "over_by", "forecast"):
        value = getattr(alert, name)
        if value is not None and not _DECIMAL_RE.match(value):
            raise ValueError(f"{name} must be a decimal string, not {value!r}")
    if not _CURRENCY_RE.match(alert.currency):
        raise ValueError(f"currency must be three capital letters, not {alert.currency!r}")
    if alert.threshold_pct is not None and alert.threshold_pct < 0:
        raise ValueError("threshold_pct must not be negative")
    for other in alert.also_crossed:
        if not _DECIMAL_RE.match(other.limit):
            raise ValueError(f"also_crossed limit must be a decimal string, not {other.limit!r}")


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("webhook url must be an absolute http(s) URL")


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
    alert: Message,
    fmt: str,
    url: str,
    secret: str | None,
    now: datetime | None = None,
) -> OutgoingRequest:
    """The POST request delivering ``alert`` to ``url`` in format ``fmt``.

    ``secret``: required for ``standard`` (a ``whsec_`` secret of at least 24 bytes);
    optional for ``feishu`` and ``dingtalk`` (the bot's signing secret); must be None for
    ``slack``, ``wecom`` and ``teams``, which have no signing. ``now`` (tz-aware) is the attempt
    time used for signature timestamps; default the current time. Raises ``ValueError``
    for an unknown format, a bad URL or secret, or an alert with a naive timestamp,
    unknown kind, non-decimal amounts, or (``standard``) an id that is not printable
    ASCII without ``.``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown webhook format {fmt!r}; expected one of {FORMATS}")
    _check_url(url)
    _validate(alert)
    when = aware(now, "now") if now is not None else datetime.now(UTC)
    headers = {"content-type": _JSON}

    if fmt == "standard":
        if secret is None:
            raise ValueError("the standard format needs a whsec_ signing secret")
        if len(standard_key(secret)) < STANDARD_MIN_KEY_BYTES:
            raise ValueError(f"signing secret must be at least {STANDARD_MIN_KEY_BYTES} bytes")
        if not _WEBHOOK_ID_RE.match(alert.id):
            raise ValueError("alert id must be printable ASCII without '.' to be a webhook-id")
        data = msgspec.structs.replace(alert, top_drivers=alert.top_drivers[:MAX_DRIVERS])
        payload = _StandardPayload(
            type="evaluation.regression" if alert.kind == REGRESSION else f"budget.{alert.kind}",
            timestamp=alert.occurred_at.astimezone(UTC),
            data=data,
        )
        body = _encode(payload)
        stamp = unix_s(when)
        headers["webhook-id"] = alert.id
        headers["webhook-timestamp"] = str(stamp)
        headers["webhook-signature"] = standard_signature(secret, alert.id, stamp, body)
        return OutgoingRequest(url=url, headers=headers, body=body)

    if secret is not None and fmt in ("slack", "wecom", "teams"):
        raise ValueError(f"{fmt} webhooks are not signed; the URL is the secret")
    if secret == "":
        raise ValueError("secret is empty; pass None for an unsigned bot")
    if fmt == "teams":
        return OutgoingRequest(url=url, headers=headers, body=_encode(teams_body(alert)))
    view = chat_view(alert)
    if fmt == "slack":
        return OutgoingRequest(url=url, headers=headers, body=_encode(slack_body(view)))
    if fmt == "wecom":
        return OutgoingRequest(url=url, headers=headers, body=_encode(wecom_body(view)))
    if fmt == "feishu":
        message = feishu_body(view)
        if secret is not None:
            stamp = unix_s(when)
            message["timestamp"] = str(stamp)
            message["sign"] = feishu_sign(secret, stamp)
        return OutgoingRequest(url=url, headers=headers, body=_encode(message))
    # dingtalk
    if secret is not None:
        stamp_ms = unix_ms(when)
        sign = quote_plus(dingtalk_sign(secret, stamp_ms))
        url = _with_query(url, [("timestamp", str(stamp_ms)), ("sign", sign)])
    return OutgoingRequest(url=url, headers=headers, body=_encode(dingtalk_body(view)))
