"""The ``feishu`` format: a Feishu/Lark custom bot, ``msg_type: "post"`` (rich text). No I/O.

Post ``text`` elements are shown literally, so names need no markdown escaping and cannot
inject links or mentions; links are separate ``a`` elements. Optionally signed: with the
bot's signing secret, ``timestamp`` and ``sign`` in the body (`signing.feishu_sign`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .message import Message, OutgoingRequest, json_request
from .signing import feishu_sign, unix_s
from .view import ChatView, chat_view, facts, plain, summary


def feishu_body(v: ChatView) -> dict[str, Any]:
    def text(value: str, bold: bool = False) -> dict[str, Any]:
        element: dict[str, Any] = {"tag": "text", "text": value}
        if bold:
            element["style"] = ["bold"]
        return element

    content: list[list[dict[str, Any]]] = [[text(summary(v, plain))]]
    content += [[text(f"{label}: ", bold=True), text(value)] for label, value in facts(v, plain)]
    content.append([text("Top cost drivers (SKU / stage / experiment):", bold=True)])
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


def build(alert: Message, url: str, secret: str | None, when: datetime) -> OutgoingRequest:
    """The request, signed in the body when the bot has a signing secret."""
    message = feishu_body(chat_view(alert))
    if secret is not None:
        stamp = unix_s(when)
        message["timestamp"] = str(stamp)
        message["sign"] = feishu_sign(secret, stamp)
    return json_request(url, message)
