"""The ``dingtalk`` format: a DingTalk custom robot, ``msgtype: "markdown"``. No I/O.

Names are markdown-escaped (``& < >`` as entities, ``\\ ` * _ [ ] ~ |`` backslash-escaped).
Optionally signed: with the robot's signing secret, ``timestamp`` and ``sign`` query
parameters (`signing.dingtalk_sign`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote_plus

from .message import Message, OutgoingRequest, json_request, with_query
from .signing import dingtalk_sign, unix_ms
from .view import ChatView, chat_view, esc_md, facts, summary


def dingtalk_body(v: ChatView) -> dict[str, Any]:
    esc = esc_md
    lines = [f"#### {esc(v.title)}", "", summary(v, esc), ""]
    lines += [f"- **{label}:** {value}" for label, value in facts(v, esc)]
    lines += ["", "**Top cost drivers** (SKU / stage / experiment)", ""]
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


def build(alert: Message, url: str, secret: str | None, when: datetime) -> OutgoingRequest:
    """The request, signed in the query when the robot has a signing secret."""
    if secret is not None:
        stamp_ms = unix_ms(when)
        sign = quote_plus(dingtalk_sign(secret, stamp_ms))
        url = with_query(url, [("timestamp", str(stamp_ms)), ("sign", sign)])
    return json_request(url, dingtalk_body(chat_view(alert)))
