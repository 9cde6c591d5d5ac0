"""Which parts of a webhook are secrets (its signing secret; for the chat formats the URL's
path and query, which are the credential; for `standard` the query values), so that no
listing, log line or stored error shows them."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from ..formats.table import format_of


def _url_is_credential(fmt: str) -> bool:
    """Whether the URL's path and query are a credential (`formats.table.Format`); an
    unknown format's are, to be safe."""
    spec = format_of(fmt)
    return spec is None or spec.url_is_credential


def redacted_url(url: str, fmt: str) -> str:
    """The URL as shown in listings: chat-bot URLs carry their secret (the Slack path, the
    Feishu hook token, the DingTalk access token, the WeCom key), so only the origin is
    shown for them; for `standard`, query values are masked."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    spec = format_of(fmt)
    if spec is not None and spec.over_smtp:  # an SMTP server: the URL is only its host and port
        return origin
    if _url_is_credential(fmt):
        return origin + "/…"
    query = "&".join(p.split("=", 1)[0] + "=…" for p in parts.query.split("&") if p)
    return origin + parts.path + ("?" + query if query else "")


def secret_parts(url: str, fmt: str, secret: str | None) -> list[str]:
    """The pieces of a webhook that are secrets: its signing secret; for the chat formats
    (whose URL is the credential) the URL's path and query; for `standard`, the query
    values. Longest first, for `scrub`."""
    parts: set[str] = set()
    if secret:
        parts.add(secret)
        parts.add(secret.removeprefix("whsec_"))
    try:
        split = urlsplit(url)
    except ValueError:
        return sorted({p for p in parts if p} | {url}, key=len, reverse=True)
    parts.add(url)
    if _url_is_credential(fmt):
        if split.path not in ("", "/"):
            parts.add(split.path)
            parts.add(unquote(split.path))
        if split.query:
            parts.add(split.query)
    for _, value in parse_qsl(split.query, keep_blank_values=False):
        parts.add(value)
    for raw in split.query.split("&"):
        if "=" in raw:
            parts.add(raw.split("=", 1)[1])
    return sorted((p for p in parts if len(p) >= 3), key=len, reverse=True)


def scrub(text: str, parts: Iterable[str]) -> str:
    """`text` with every secret part replaced by "…"."""
    for part in parts:
        if part in text:
            text = text.replace(part, "…")
    return text
