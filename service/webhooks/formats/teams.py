"""The ``teams`` format (Microsoft Teams): an Adaptive Card posted to a Workflows webhook. No I/O.

A Workflows webhook ("Post to a channel when a webhook request is received") takes the Bot
Framework message envelope, ``{"type": "message", "attachments": [{"contentType":
"application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": <card>}]}``, and
posts each attachment's card. The card is version 1.5 (what Teams renders on desktop, web
and mobile) and uses only TextBlock, FactSet and Action.OpenUrl. Unsigned: the
``sig`` query parameter of the workflow URL is the credential (shown only as the origin).

TextBlock and Fact text is Adaptive Card markdown (bold, italic, links, lists), so the
names in it are cleaned and clipped (`view.chat_view`) and their markdown
characters backslash-escaped; a name can neither bold text nor make a link. Links are
actions, never markdown. Money is shown grouped and rounded to the currency's minor unit
(`people_text`); the exact amounts stay in the ``standard`` format and the API.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

from .message import Message, OutgoingRequest, json_request
from .people_text import people_drivers, people_facts, people_summary
from .view import ChatView, chat_view

CARD_CONTENT_TYPE: Final = "application/vnd.microsoft.card.adaptive"
CARD_SCHEMA: Final = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_VERSION: Final = "1.5"
# Emphasis, code and link syntax; a link needs "[", so "(" and ")" may stay as they are.
_MD_SPECIAL_RE: Final = re.compile(r"([\\`*_\[\]~])")


def _esc(value: str) -> str:
    """Adaptive Card markdown shown literally: its special characters backslash-escaped."""
    return _MD_SPECIAL_RE.sub(r"\\\1", value)


def _text(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def _fact_set(rows: list[tuple[str, str]]) -> dict[str, Any]:
    return {"type": "FactSet", "facts": [{"title": _esc(t), "value": _esc(v)} for t, v in rows]}


def adaptive_card(v: ChatView) -> dict[str, Any]:
    """The alert as an Adaptive Card 1.5."""
    color = "attention" if v.kind in ("threshold", "forecast") else "warning"
    drivers = people_drivers(v)
    body: list[dict[str, Any]] = [
        _text(_esc(v.title), size="large", weight="bolder", color=color, style="heading"),
        _text(_esc(people_summary(v))),
        _fact_set(people_facts(v)),
        _text("Top cost drivers", weight="bolder", separator=True),
        _fact_set(drivers) if drivers else _text("_no breakdown available_", isSubtle=True),
        _text(f"alert {_esc(v.alert_id)} · {v.occurred}", size="small", isSubtle=True),
    ]
    card: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": _esc(f"{v.title}: {people_summary(v)}"),
        "body": body,
    }
    if v.links:
        card["actions"] = [
            {"type": "Action.OpenUrl", "title": label, "url": url} for label, url in v.links
        ]
    return card


def teams_body(alert: Message) -> dict[str, Any]:
    """The Workflows webhook request body: one message with the card attached."""
    card = adaptive_card(chat_view(alert))
    return {
        "type": "message",
        "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": card}],
    }


def build(alert: Message, url: str, secret: str | None, when: datetime) -> OutgoingRequest:
    """The request; unsigned (``secret`` is None)."""
    return json_request(url, teams_body(alert))
