"""The ``standard`` format: Standard Webhooks 1.0 (https://www.standardwebhooks.com, spec text
in github.com/standard-webhooks/standard-webhooks ``spec/standard-webhooks.md``). No I/O.

Body ``{"type": "budget.<kind>", "timestamp": <occurred_at, UTC>, "data": <alert>}`` (an
evaluation regression: type ``evaluation.regression``, data a `RegressionMessage`); headers
``webhook-id`` (the alert id, stable across retries), ``webhook-timestamp`` (unix seconds of
this attempt) and ``webhook-signature`` = ``v1,`` + base64(HMAC-SHA256(key,
"{id}.{timestamp}.{body}")), the key being the base64 after the ``whsec_`` prefix.
``signing.verify_standard`` is the receiving side. The exact decimal amounts are the payload.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

import msgspec

from .message import JSON, REGRESSION, Message, OutgoingRequest, encode
from .signing import STANDARD_MIN_KEY_BYTES, standard_key, standard_signature, unix_s
from .view import MAX_DRIVERS

# Printable ASCII without "." (0x2e): the spec asks that the id never contain a full stop,
# since it is joined to the timestamp and body with full stops before signing.
_WEBHOOK_ID_RE: Final = re.compile(r"^[\x21-\x2d\x2f-\x7e]{1,256}$")


class _StandardPayload(msgspec.Struct, frozen=True):
    type: str
    timestamp: datetime
    data: Message


def build(alert: Message, url: str, secret: str | None, when: datetime) -> OutgoingRequest:
    """The signed request; ``secret`` a ``whsec_`` secret of at least 24 bytes."""
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
    body = encode(payload)
    stamp = unix_s(when)
    headers = {
        "content-type": JSON,
        "webhook-id": alert.id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": standard_signature(secret, alert.id, stamp, body),
    }
    return OutgoingRequest(url=url, headers=headers, body=body)
