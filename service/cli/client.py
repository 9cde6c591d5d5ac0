"""What the client commands share: the HTTP client, where URL and token come from, and how an
RFC 9457 problem document is shown.

URL: `--url`, else `$TRAINLEDGER_URL`, else http://127.0.0.1:8000. Token: `--token`, else
`$TRAINLEDGER_TOKEN`, else the local admin token `trainledger serve` wrote in the data
directory (`$TRAINLEDGER_DATA_DIR/admin-token`; by default the user data dir, e.g.
`~/.local/share/trainledger/admin-token` on Linux, whatever directory a command runs from).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.table import Table
from rich.text import Text

from ..config import Settings
from .serve import ADMIN_TOKEN_FILE
from .ui import ui

DEFAULT_URL = "http://127.0.0.1:8000"
# 503 "busy" (contention) and "storage unavailable" answers carry Retry-After: honour it a
# few times before giving up (the same request again: event ids make a retry safe).
RETRIES = 5


class CliError(Exception):
    """A failure to report in one line (no token, unreadable file, ...): exit status 1."""


class ApiError(Exception):
    """The service answered with an error; ``problem`` is its problem document when it sent one."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.problem: dict[str, Any] | None = None
        self.text = ""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            self.problem = body
        else:
            self.text = response.text[:2000]
        super().__init__(f"HTTP {self.status}")


def add_client_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("service")
    group.add_argument("--url", help=f"the service (default: $TRAINLEDGER_URL or {DEFAULT_URL})")
    group.add_argument(
        "--token",
        help="bearer token (default: $TRAINLEDGER_TOKEN, else the admin token in the data dir)",
    )
    group.add_argument("--timeout", type=float, default=120.0, help="seconds per request")


def resolve_url(args: argparse.Namespace) -> str:
    return str(args.url or os.environ.get("TRAINLEDGER_URL") or DEFAULT_URL).rstrip("/")


def resolve_token(args: argparse.Namespace, settings: Settings) -> str:
    token = args.token or os.environ.get("TRAINLEDGER_TOKEN")
    if token:
        return str(token).strip()
    path = Path(settings.data_dir) / ADMIN_TOKEN_FILE
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise CliError(
            f"no token: pass --token, set TRAINLEDGER_TOKEN, or use the data dir where "
            f"`trainledger serve` wrote its admin token (TRAINLEDGER_DATA_DIR; here {path}: "
            f"{exc.strerror or exc})"
        ) from exc


class Client:
    """A synchronous httpx client for one service; raises ApiError on any 4xx/5xx answer."""

    def __init__(self, url: str, token: str, timeout: float = 120.0) -> None:
        self.url = url
        self.http = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            follow_redirects=False,
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, settings: Settings) -> Client:
        return cls(resolve_url(args), resolve_token(args, settings), args.timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        """Send, retrying 503 answers that say when to retry; other errors raise ApiError
        unless their status is in ``ok`` (for answers a caller reads itself)."""
        for attempt in range(RETRIES + 1):
            response = self.http.request(method, path, **kwargs)
            if response.status_code == 503 and attempt < RETRIES:
                delay = _retry_after(response)
                if delay is not None:
                    time.sleep(delay)
                    continue
            if response.status_code >= 400 and response.status_code not in ok:
                raise ApiError(response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    @contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        with self.http.stream(method, path, **kwargs) as response:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response)
            yield response


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    try:
        return min(30.0, max(0.0, float(raw))) if raw is not None else None
    except ValueError:
        return None


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
