"""What the client commands share: the HTTP client, where URL and token come from, and how an
RFC 9457 problem document is shown.

URL: `--url`, else `$TRAINLEDGER_URL`, else http://127.0.0.1:8000. Token: `--token`, else
`$TRAINLEDGER_TOKEN`, else the file `$TRAINLEDGER_TOKEN_FILE` names (a mounted secret), else the
admin token `trainledger serve` was given (`$TRAINLEDGER_ADMIN_TOKEN_FILE`) or wrote in the data
directory (`$TRAINLEDGER_DATA_DIR/admin-token`; by default the user data dir, e.g.
`~/.local/share/trainledger/admin-token` on Linux, whatever directory a command runs from).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import httpx
from rich.table import Table
from rich.text import Text

from ..client import ApiError as ApiError
from ..client import Client as HttpClient
from ..client import RetryPolicy
from ..config import DEFAULT_URL, Settings
from .admin_token import ADMIN_TOKEN_FILE
from .ui import ui


class CliError(Exception):
    """A failure to report in one line (no token, unreadable file, ...): exit status 1."""


def add_client_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("service")
    group.add_argument("--url", help=f"the service (default: $TRAINLEDGER_URL or {DEFAULT_URL})")
    group.add_argument(
        "--token",
        help="bearer token (default: $TRAINLEDGER_TOKEN, $TRAINLEDGER_TOKEN_FILE, else the local "
        "admin token)",
    )
    group.add_argument("--timeout", type=float, default=120.0, help="seconds per request")


def resolve_url(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.url or settings.client_url).rstrip("/")


def resolve_token(args: argparse.Namespace, settings: Settings) -> str:
    token = args.token or settings.token
    if token:
        return str(token).strip()
    # A mounted secret; else the admin token serve was given, or wrote in the data dir.
    path = (
        settings.token_file
        or settings.admin_token_file
        or Path(settings.data_dir) / ADMIN_TOKEN_FILE
    )
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise CliError(
            f"no token: pass --token, set TRAINLEDGER_TOKEN or TRAINLEDGER_TOKEN_FILE, or use "
            f"the data dir where `trainledger serve` wrote its admin token "
            f"(TRAINLEDGER_DATA_DIR; here {path}: {exc.strerror or exc})"
        ) from exc


# Commands that post events ride out a service restart (the library's default policy: about
# 30 s of retries at worst); the others, run by a person waiting for an answer, give up after
# a few seconds.
POSTING = RetryPolicy()
INTERACTIVE = RetryPolicy(attempts=5, base=0.25, cap=4.0)


class Client(HttpClient):
    """The library's client (trainledger.client: retries connection errors, timeouts, 429
    and 5xx, honouring Retry-After) with the URL and token from the command line, saying on
    stderr when it waits to retry."""

    def __init__(self, url: str, token: str, timeout: float = 120.0, **options: Any) -> None:
        options.setdefault("retry", INTERACTIVE)
        super().__init__(url, token, timeout=timeout, on_retry=_say_retry, **options)

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, settings: Settings, *, posting: bool = False
    ) -> Client:
        return cls(
            resolve_url(args, settings),
            resolve_token(args, settings),
            args.timeout,
            retry=POSTING if posting else INTERACTIVE,
        )


def _say_retry(attempt: int, delay: float, cause: int | Exception) -> None:
    why = f"HTTP {cause}" if isinstance(cause, int) else (str(cause) or type(cause).__name__)
    ui.err.print(Text(f"retrying in {delay:.1f} s ({why}), attempt {attempt + 1}", style="yellow"))


def print_problem(error: ApiError) -> None:
    """Title, status and detail, then each field error: enough to fix the request."""
    problem = error.problem
    if problem is None:
        ui.err.print(f"[bold red]error[/]: HTTP {error.status}", highlight=False)
        if error.text:
            ui.err.print(error.text, markup=False, highlight=False)
        return
    title = str(problem.get("title") or "error")
    ui.err.print(
        f"[bold red]{_escape(title)}[/] (HTTP {problem.get('status', error.status)})",
        highlight=False,
    )
    detail = problem.get("detail")
    if detail:
        ui.err.print(str(detail), markup=False, highlight=False)
    found = problem.get("errors")
    errors: list[Any] = found if isinstance(found, list) else []
    # One error that the detail already spells out needs no table.
    spelled_out = (
        len(errors) == 1
        and isinstance(errors[0], dict)
        and bool(detail)
        and all(str(errors[0].get(k) or "") in str(detail) for k in ("field", "reason"))
    )
    if errors and not spelled_out:
        table = Table("field", "reason", show_edge=False, pad_edge=False)
        shown = errors[:50]
        for item in shown:
            if isinstance(item, dict):
                table.add_row(
                    Text(str(item.get("field") or "")), Text(str(item.get("reason") or ""))
                )
        ui.err.print(table)
        if len(errors) > len(shown):
            ui.err.print(f"... and {len(errors) - len(shown)} more")
    kind = problem.get("type")
    if kind and kind != "about:blank":
        ui.err.print(f"[dim]{_escape(str(kind))}[/]", highlight=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def report_connection_error(url: str, exc: httpx.HTTPError) -> None:
    ui.err.print(
        f"[bold red]cannot reach {_escape(url)}[/]: {_escape(str(exc) or type(exc).__name__)}",
        highlight=False,
    )
    ui.err.print("is `trainledger serve` running there? (set --url or TRAINLEDGER_URL)")
