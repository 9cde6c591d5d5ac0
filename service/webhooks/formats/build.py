"""Webhook messages for alerts: the exact HTTP request of one delivery attempt, with no I/O.

``build_request(alert, fmt, url, secret, now)`` turns one message into the exact HTTP request
(URL, headers, body bytes) a sender should POST. Nothing here touches the network or the clock
except ``datetime.now`` when ``now`` is not given, so a retry loop can rebuild the request on
every attempt (fresh timestamp and signature, same id).

The formats are the rows of `table.FORMATS`, each laid out by its own module (`standard`,
`slack`, `feishu`, `dingtalk`, `wecom`, `teams`; `mail` for the SMTP format). User-supplied
strings are cleaned, clipped and escaped for each chat markup (`view`); the signatures are in
`signing`. JSON bodies are encoded with msgspec in deterministic order (struct fields in
declaration order, dict keys sorted).
"""

from __future__ import annotations

from datetime import UTC, datetime

from .message import Message, OutgoingRequest, check_url, validate
from .signing import aware
from .table import HTTP_NAMES, format_of

__all__ = ["build_request"]


def build_request(
    alert: Message,
    fmt: str,
    url: str,
    secret: str | None,
    now: datetime | None = None,
) -> OutgoingRequest:
    """The POST request delivering ``alert`` to ``url`` in format ``fmt``.

    ``secret``: as the format's row says (`table.Format.secret`): required for ``standard`` (a
    ``whsec_`` secret of at least 24 bytes); optional for ``feishu`` and ``dingtalk`` (the
    bot's signing secret); must be None for the unsigned ones (``slack``, ``wecom``,
    ``teams``). ``now`` (tz-aware) is the attempt time used for signature timestamps; default
    the current time. Raises ``ValueError`` for an unknown format, a bad URL or secret, or an
    alert with a naive timestamp, unknown kind, non-decimal amounts, or (``standard``) an id
    that is not printable ASCII without ``.``.
    """
    spec = format_of(fmt)
    if spec is None or spec.build is None:
        raise ValueError(f"unknown webhook format {fmt!r}; expected one of {HTTP_NAMES}")
    check_url(url)
    validate(alert)
    when = aware(now, "now") if now is not None else datetime.now(UTC)
    if spec.secret == "none" and secret is not None:
        raise ValueError(f"{fmt} webhooks are not signed; the URL is the secret")
    if spec.secret == "optional" and secret == "":
        raise ValueError("secret is empty; pass None for an unsigned bot")
    return spec.build(alert, url, secret, when)
