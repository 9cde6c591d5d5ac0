"""The ``slack`` format: a Slack incoming webhook with Block Kit: a header, a section of mrkdwn
fields, a section of the top drivers and a context line with the links. No I/O.

Names are escaped as Slack documents (``& < >`` as entities) and every mrkdwn text object is
``verbatim`` (no automatic linking of URLs, channel names or @-mentions in them). Unsigned:
the incoming-webhook URL is the secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .message import Message, OutgoingRequest, json_request
from .view import ChatView, chat_view, clean, esc_slack, facts, summary


def slack_body(v: ChatView) -> dict[str, Any]:
    esc = esc_slack

    def mrkdwn(text: str) -> dict[str, Any]:
        # verbatim: no automatic linking of URLs, channel names or @-mentions in our text.
        return {"type": "mrkdwn", "text": text, "verbatim": True}

    drivers = "\n".join(f"• {esc(name)} — {esc(cost)} {v.currency}" for name, cost in v.drivers)
    context = [f"<{url}|{esc(label)}>" for label, url in v.links]
    context.append(f"alert {esc(v.alert_id)} · {v.occurred}")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": clean(v.title, 150)}},
        {
            "type": "section",
            "text": mrkdwn(summary(v, esc)),
            "fields": [mrkdwn(f"*{label}*\n{value}") for label, value in facts(v, esc)],
        },
        {
            "type": "section",
            "text": mrkdwn(
                "*Top cost drivers* (SKU / stage / experiment)\n"
                + (drivers or "_no breakdown available_")
            ),
        },
        {"type": "context", "elements": [mrkdwn(" · ".join(context))]},
    ]
    if v.regression is not None:
        r = v.regression
        text = (
            f"{esc(v.title)}: {r.value} against the baseline's {r.baseline_value}, tolerance "
            f"{r.tolerance}; rework exposure {r.exposure} {v.currency}"
        )
    else:
        text = (
            f"{esc(v.title)}: spent {v.spent} {v.currency}, limit {v.limit} {v.currency}, "
            f"over by {v.over_by} {v.currency} ({esc(v.scope)}, {esc(v.period)})"
        )
    return {"text": text, "blocks": blocks}


def build(alert: Message, url: str, secret: str | None, when: datetime) -> OutgoingRequest:
    """The request; unsigned (``secret`` is None)."""
    return json_request(url, slack_body(chat_view(alert)))
