"""The ``email`` format: an alert as a MIME message (plain text and HTML alternatives). No I/O.

An ``email`` webhook's URL names the SMTP server (``smtp://host[:port]`` or
``smtps://host[:port]``, checked by `targets.checks.check_smtp_target`); `EmailSettings` names the
sender, the recipients, the TLS mode and the login user; the webhook's ``secret`` is the SMTP
password, sealed like every webhook secret. `delivery.smtp.send_email` sends the message.

Every attempt of one alert to one webhook carries the same ``Message-ID`` (made from the
alert id and the webhook id), so a mail system or a reader's client can drop the duplicate
an ambiguous failure (a timeout after the message was accepted) and its retry can cause,
as the HTTP formats' ``webhook-id`` does; ``X-Trainledger-Alert-Id`` carries the alert id.
Subject and names come from the cleaned view (`view.chat_view`: no control
characters, so no header injection); the HTML part escapes every string it shows.
"""

from __future__ import annotations

import hashlib
import textwrap
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from html import escape
from typing import Annotated, Final, Literal

import msgspec

from ...events.model import SAFE_TEXT_PATTERN
from .message import Message
from .people_text import people_drivers, people_facts, people_summary
from .view import ChatView, chat_view

# The WHATWG "valid email address" (what browsers accept in <input type=email>): ASCII,
# no quoted local parts, no comments, no display names.
EMAIL_ADDRESS_PATTERN: Final = (
    r"^[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
)
MAX_RECIPIENTS: Final = 50
SUBJECT_PREFIX: Final = "[trainledger]"

EmailAddress = Annotated[
    str,
    msgspec.Meta(
        min_length=3, max_length=254, pattern=EMAIL_ADDRESS_PATTERN, examples=["ops@example.com"]
    ),
]
TlsMode = Literal["starttls", "implicit", "none"]


class EmailSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Where an ``email`` webhook's messages go and how it logs in (the password is the
    webhook's ``secret``)."""

    sender: EmailAddress = msgspec.field(name="from")
    to: Annotated[list[EmailAddress], msgspec.Meta(min_length=1, max_length=MAX_RECIPIENTS)]
    # implicit: TLS from the first byte (smtps://, port 465); starttls: the server must offer
    # STARTTLS or nothing is sent (smtp://, port 587); none: plain text, only to a host on
    # the webhook allow-list. Default: implicit for smtps://, starttls for smtp://.
    tls: TlsMode | None = None
    username: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=SAFE_TEXT_PATTERN)] | None
    ) = None


def message_id(alert_id: str, webhook_id: str, sender: str) -> str:
    """The same for every attempt of one alert to one webhook (the alert id may hold
    characters a Message-ID may not, so it is hashed)."""
    digest = hashlib.sha256(f"{alert_id}|{webhook_id}".encode()).hexdigest()[:32]
    domain = sender.rsplit("@", 1)[-1]
    return f"<{digest}.{webhook_id}@{domain}>"


def email_text(v: ChatView) -> str:
    """The plain-text part."""
    facts = people_facts(v)
    width = max(len(label) for label, _ in facts) + 2
    lines = [v.title, "", textwrap.fill(people_summary(v), 76), ""]
    lines += [f"  {label + ':':<{width}}{value}" for label, value in facts]
    lines += ["", "Top cost drivers"]
    drivers = people_drivers(v)
    lines += [f"  {i}. {name}: {cost}" for i, (name, cost) in enumerate(drivers, 1)] or [
        "  no breakdown available"
    ]
    if v.links:
        lines.append("")
        lines += [f"{label}: {url}" for label, url in v.links]
    lines += ["", f"alert {v.alert_id} · {v.occurred}", ""]
    return "\n".join(lines)


_CELL: Final = 'style="padding:2px 12px 2px 0;vertical-align:top"'


def email_html(v: ChatView) -> str:
    """The HTML part: inline styles only (mail clients drop style sheets)."""
    e = escape
    rows = "".join(
        f"<tr><th align=left {_CELL}>{e(label)}</th><td {_CELL}>{e(value)}</td></tr>"
        for label, value in people_facts(v)
    )
    drivers = "".join(f"<li>{e(name)}: {e(cost)}</li>" for name, cost in people_drivers(v))
    links = " · ".join(f'<a href="{e(url)}">{e(label)}</a>' for label, url in v.links)
    color = "#b42318" if v.kind in ("threshold", "forecast") else "#b54708"
    return (
        "<!DOCTYPE html><html><body "
        'style="font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1f2328">'
        f'<h2 style="color:{color};margin:0 0 8px">{e(v.title)}</h2>'
        f"<p>{e(people_summary(v))}</p>"
        f'<table style="border-collapse:collapse">{rows}</table>'
        '<h3 style="margin:16px 0 4px">Top cost drivers</h3>'
        + (f"<ol>{drivers}</ol>" if drivers else "<p><i>no breakdown available</i></p>")
        + (f"<p>{links}</p>" if links else "")
        + f'<p style="color:#6b7785;font-size:12px">alert {e(v.alert_id)} · {e(v.occurred)}</p>'
        "</body></html>"
    )


def build_email(
    alert: Message, settings: EmailSettings, *, webhook_id: str, now: datetime
) -> EmailMessage:
    """The message delivering `alert` to the recipients of one ``email`` webhook."""
    view = chat_view(alert)
    message = EmailMessage(policy=SMTP)
    message["Subject"] = f"{SUBJECT_PREFIX} {view.title}"
    message["From"] = Address("trainledger", addr_spec=settings.sender)
    message["To"] = [Address(addr_spec=to) for to in settings.to]
    message["Date"] = format_datetime(now)
    message["Message-ID"] = message_id(alert.id, webhook_id, settings.sender)
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to it
    message["X-Trainledger-Alert-Id"] = view.alert_id
    message.set_content(email_text(view))
    message.add_alternative(email_html(view), subtype="html")
    return message
