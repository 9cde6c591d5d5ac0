"""What a webhook sender is handed and what it sends, for every format: the alert messages
(`AlertMessage`, `RegressionMessage`), the request (`OutgoingRequest`), and the checks and
encoding all formats share. No I/O, and no import of any one format: every format module
imports this one."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import msgspec

from ...budgets.model import RegressionFacts
from .signing import aware

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


class RegressionMessage(msgspec.Struct, frozen=True, kw_only=True):
    """An evaluation regression alert, as the alerting engine hands it to a webhook sender
    (the ``standard`` format's ``data``, type ``evaluation.regression``). Values and money
    are exact decimal strings; the chat formats show the money for people."""

    id: str  # stable alert id (`evaluations.regression.regression_id`); the webhook-id
    kind: str  # "evaluation_regression"
    project: str
    scope: dict[str, str]  # {"experiment": ..., "benchmark": ...}
    currency: str
    regression: RegressionFacts
    # the experiment's largest costs: [{"name", "stage", "experiment", "sku", "cost"}]
    top_drivers: list[dict[str, str]] = []
    occurred_at: datetime  # tz-aware: when it fired
    links: dict[str, str] = {}  # {"dashboard", "report", "evaluations", "alerts"}
    test: bool = False


# What a sender is handed: a budget alert's message or an evaluation regression's.
Message = AlertMessage | RegressionMessage


class OutgoingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An HTTP request ready to send: POST ``body`` to ``url`` with ``headers``."""

    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"


JSON: Final = "application/json"
_DECIMAL_RE: Final = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
_CURRENCY_RE: Final = re.compile(r"^[A-Z]{3}$")


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


def validate(alert: Message) -> None:
    """Raise ``ValueError`` for a message no format may send: a naive timestamp, an unknown
    kind, an empty id, amounts that are not decimal strings, a currency that is not a code."""
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


def check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("webhook url must be an absolute http(s) URL")


def encode(payload: Any) -> bytes:
    """JSON in deterministic order (struct fields in declaration order, dict keys sorted)."""
    return msgspec.json.encode(payload, order="deterministic")


def json_request(url: str, payload: Any) -> OutgoingRequest:
    """POST ``payload`` as JSON to ``url``."""
    return OutgoingRequest(url=url, headers={"content-type": JSON}, body=encode(payload))


def with_query(url: str, params: list[tuple[str, str]]) -> str:
    """``url`` with ``params`` appended (already-encoded values), replacing same-named ones."""
    parts = urlsplit(url)
    names = {name for name, _ in params}
    kept = [p for p in parts.query.split("&") if p and p.split("=", 1)[0] not in names]
    query = "&".join(kept + [f"{name}={value}" for name, value in params])
    return urlunsplit(parts._replace(query=query))
