"""The webhook formats, one row each: the one list of them. The API's `format` enum
(`registry.WebhookFormat`), the command line's `--format` choices, the rules on secrets
(which formats generate one, which take one, which refuse one), what listings show of a URL,
`build.build_request`'s dispatch and the formats table of docs/guides/budgets-and-webhooks.md
(`markdown_table`, checked by tests/unit/webhooks/test_format_table.py) all come from here.

Adding a format: its module here in `formats/` (its body, and `build`), and its row below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from . import dingtalk, feishu, slack, standard, teams, wecom
from .message import Message, OutgoingRequest

# How a format treats the webhook's `secret`: `generated` when not given (and required);
# `optional` (the bot's signing secret, or the SMTP password); `none`: refused, the URL is
# the credential.
SecretRule = Literal["generated", "optional", "none"]
# `build(alert, url, secret, when)`: the request of one attempt (fresh signature timestamps).
Builder = Callable[[Message, str, str | None, datetime], OutgoingRequest]


@dataclass(frozen=True, kw_only=True)
class Format:
    """One webhook format."""

    name: str
    secret: SecretRule
    body: str  # what is posted (the docs' table)
    signature: str  # how a receiver knows it is us (the docs' table)
    # The URL's path and query are a credential (a chat bot's token or key), so listings
    # show only its origin and error texts never show them.
    url_is_credential: bool
    # The HTTP request of one attempt; None for a format sent over SMTP (`email`), which
    # needs settings a URL cannot carry (sender, recipients), so the CLI does not offer it.
    build: Builder | None

    @property
    def signed(self) -> str:
        """Whether a receiver can check the message came from us: "yes", "when a secret is
        set" or "no" (a chat bot whose URL is the credential; an email, whose secret is the
        SMTP password)."""
        if self.over_smtp or self.secret == "none":
            return "no"
        return "yes" if self.secret == "generated" else "when a secret is set"

    @property
    def over_smtp(self) -> bool:
        """Sent over SMTP (`delivery.smtp`), not as an HTTP request."""
        return self.build is None


FORMATS: Final = (
    Format(
        name="standard",
        secret="generated",
        body="Standard Webhooks JSON event: `type`, `timestamp`, `data` (the alert, exact amounts)",
        signature="`webhook-id`, `webhook-timestamp`, `webhook-signature` headers (HMAC-SHA256, "
        "secret `whsec_…`, generated when not given)",
        url_is_credential=False,
        build=standard.build,
    ),
    Format(
        name="slack",
        secret="none",
        body="incoming webhook with Block Kit blocks",
        signature="none: the URL is the secret",
        url_is_credential=True,
        build=slack.build,
    ),
    Format(
        name="feishu",
        secret="optional",
        body="custom bot rich-text `post`",
        signature="`timestamp` and `sign` in the body when a secret is set",
        url_is_credential=True,
        build=feishu.build,
    ),
    Format(
        name="dingtalk",
        secret="optional",
        body="custom robot markdown",
        signature="`timestamp` and `sign` query parameters when a secret is set",
        url_is_credential=True,
        build=dingtalk.build,
    ),
    Format(
        name="wecom",
        secret="none",
        body="group robot markdown (at most 4096 bytes)",
        signature="none: the `key` in the URL is the secret",
        url_is_credential=True,
        build=wecom.build,
    ),
    Format(
        name="teams",
        secret="none",
        body="Teams Workflows webhook with an Adaptive Card 1.5",
        signature="none: the `sig` in the workflow URL is the secret",
        url_is_credential=True,
        build=teams.build,
    ),
    Format(
        name="email",
        secret="optional",
        body="SMTP: a MIME message, plain text and HTML (settings in `email`)",
        signature="none; `secret` is the SMTP password (with `email.username`)",
        url_is_credential=True,
        build=None,
    ),
)

BY_NAME: Final = {f.name: f for f in FORMATS}
NAMES: Final = tuple(f.name for f in FORMATS)
# The formats a URL (and a secret) fully describe: sent over HTTP by `build_request`.
HTTP_NAMES: Final = tuple(f.name for f in FORMATS if f.build is not None)


def format_of(name: str) -> Format | None:
    return BY_NAME.get(name)


TABLE_BEGIN: Final = "<!-- webhook-formats: begin (python3 dev.py formats-table) -->\n"
TABLE_END: Final = "<!-- webhook-formats: end -->\n"
DOCS_PAGE: Final = "docs/guides/budgets-and-webhooks.md"  # the page that shows the table


def with_table(page: str) -> str:
    """``page`` with the text between its table markers made `markdown_table()` again."""
    head, begin, rest = page.partition(TABLE_BEGIN)
    _, end, tail = rest.partition(TABLE_END)
    if not begin or not end:
        raise ValueError("the page has no webhook-formats table markers")
    return head + begin + markdown_table() + end + tail


def markdown_table() -> str:
    """The formats as the Markdown table the guide shows."""
    rows = ["| format | signed | body | signature |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.signed} | {f.body} | {f.signature} |" for f in FORMATS]
    return "\n".join(rows) + "\n"
