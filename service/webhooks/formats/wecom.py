"""The ``wecom`` format: a WeCom (企业微信) group robot, ``msgtype: "markdown"``, the content
capped at 4096 UTF-8 bytes (`view.truncate_utf8`). No I/O.

Names are markdown-escaped as for DingTalk. Unsigned: the ``key`` in the URL is the secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from .message import Message, OutgoingRequest, json_request
from .view import ChatView, chat_view, esc_md, facts, summary, truncate_utf8

WECOM_MAX_BYTES: Final = 4096


def wecom_body(v: ChatView) -> dict[str, Any]:
    esc = esc_md
    lines = [f"### {esc(v.title)}", summary(v, esc)]
    for label, value in facts(v, esc):
        shown = f'<font color="warning">{value}</font>' if label == "Over by" else value
        lines.append(f"> **{label}:** {shown}")
    lines.append("**Top cost drivers** (SKU / stage / experiment)")
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


def build(alert: Message, url: str, secret: str | None, when: datetime) -> OutgoingRequest:
    """The request; unsigned (``secret`` is None)."""
    return json_request(url, wecom_body(chat_view(alert)))
