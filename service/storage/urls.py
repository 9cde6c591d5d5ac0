"""Redis URLs as they may be shown: in messages and logs, never with their password."""

from __future__ import annotations

from urllib.parse import urlsplit


def redact(url: str) -> str:
    """`url` with its password (if any) replaced by `***`, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{netloc}").geturl()
