"""The webhook formats are one table (`service/webhooks/formats/table.py`): the API's enum, the
command line's choices, the guide's table and the secret rules all come from it, and each
format's module stands alone (issue 28, item 3)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import grimp
import pytest
from trainledger.cli import build_parser
from trainledger.webhooks.formats.build import build_request
from trainledger.webhooks.formats.table import (
    DOCS_PAGE,
    FORMATS,
    HTTP_NAMES,
    NAMES,
    Format,
    markdown_table,
    with_table,
)
from trainledger.webhooks.registry import WebhookError, WebhookFormat, WebhookIn, new_webhook
from trainledger.webhooks.targets.redaction import redacted_url

from tests.unit.webhooks.test_webhook_formats import SECRET, make_alert

REPO = Path(__file__).parents[3]
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def test_the_guide_shows_the_table_of_formats_as_the_code_has_it() -> None:
    page = (REPO / DOCS_PAGE).read_text()
    assert with_table(page) == page, "stale formats table: run `python3 dev.py formats-table`"
    for f in FORMATS:
        assert f"| `{f.name}` | {f.signed} | {f.body} | {f.signature} |" in markdown_table()


def test_a_stale_table_is_written_again() -> None:
    page = (REPO / DOCS_PAGE).read_text()
    stale = page.replace("| `slack` |", "| `slack-old` |")
    assert stale != page and with_table(stale) == page
    with pytest.raises(ValueError, match="markers"):
        with_table("no table here")


def test_the_api_enum_and_the_cli_choices_are_the_table() -> None:
    assert get_args(WebhookFormat) == NAMES
    assert NAMES == ("standard", "slack", "feishu", "dingtalk", "wecom", "teams", "email")
    create = _subparser(build_parser(), "webhooks", "create")
    choices = next(a.choices for a in create._actions if a.dest == "format")
    assert tuple(choices or ()) == HTTP_NAMES == tuple(n for n in NAMES if n != "email")


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.build is not None], ids=lambda f: f.name)
def test_each_row_says_how_its_format_takes_a_secret(fmt: Format) -> None:
    url = "https://hooks.example.com/a/b?key=k"
    if fmt.secret == "none":
        with pytest.raises(ValueError, match="not signed"):
            build_request(make_alert(), fmt.name, url, SECRET, now=NOW)
        with pytest.raises(WebhookError, match="not signed"):
            new_webhook(WebhookIn(url=url, format=fmt.name, secret=SECRET))
        assert new_webhook(WebhookIn(url=url, format=fmt.name)).secret is None
    elif fmt.secret == "generated":
        assert (new_webhook(WebhookIn(url=url, format=fmt.name)).secret or "").startswith("whsec_")
    else:
        assert new_webhook(WebhookIn(url=url, format=fmt.name)).secret is None
        assert new_webhook(WebhookIn(url=url, format=fmt.name, secret="s3")).secret == "s3"
    shown = redacted_url(url, fmt.name)
    assert shown == ("https://hooks.example.com/…" if fmt.url_is_credential else
                     "https://hooks.example.com/a/b?key=…")  # fmt: skip


FORMATS_PACKAGE = "trainledger.webhooks.formats"


def test_each_format_module_stands_alone() -> None:
    """No format's module imports another's (type-only imports included), and the shared
    modules below them import none: a new format is its module and its row."""
    graph = grimp.build_graph("trainledger", exclude_type_checking_imports=False, cache_dir=None)
    own = {f.build.__module__ for f in FORMATS if f.build is not None}
    own.add(f"{FORMATS_PACKAGE}.mail")
    above = own | {f"{FORMATS_PACKAGE}.table", f"{FORMATS_PACKAGE}.build"}
    shared = {m for m in graph.modules if m.startswith(FORMATS_PACKAGE + ".")} - above
    assert len(own) == len(FORMATS) and shared
    for module in own | shared:
        reached = set(graph.find_modules_directly_imported_by(module))
        assert not reached & (own - {module}), f"{module} imports another format's module"
        if module in shared:
            assert not reached & above, f"{module} (shared) imports a format's module"
