"""Webhook signing secrets and signatures: Standard Webhooks (sign and verify), the Feishu and
DingTalk bot signatures, and the unix timestamps they sign. No I/O."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

STANDARD_SECRET_PREFIX: Final = "whsec_"
# The spec: symmetric signing secrets are random, "at least 24 bytes".
STANDARD_MIN_KEY_BYTES: Final = 24
STANDARD_TOLERANCE_S: Final = 300

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def generate_secret() -> str:
    """A new Standard Webhooks signing secret: ``whsec_`` + base64 of 24 random bytes."""
    return STANDARD_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def standard_key(secret: str) -> bytes:
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
    digest = hmac.new(standard_key(secret), signed, hashlib.sha256).digest()
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
    key = standard_key(secret)
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not (msg_id and stamp and signatures):
        return False
    if not (stamp.isascii() and stamp.isdigit()):
        return False
    current = unix_s(aware(now, "now")) if now is not None else unix_s(datetime.now(UTC))
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


# --- timestamps -------------------------------------------------------------------------


def aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware")
    return value


def unix_s(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(seconds=1)


def unix_ms(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(milliseconds=1)
