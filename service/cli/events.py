"""`trainledger events post`, `trainledger spool put|flush|failed` and `trainledger agent`: usage
events from a file or stdin to the service, directly or through a durable spool.

Input is NDJSON (one event a line) or JSON (an array of events, or one event). Posting goes
through trainledger.client: connection errors, timeouts, 429 and 5xx are retried with backoff
(event ids make a resend harmless), so a post survives a service restart.
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable
from decimal import Decimal
from types import FrameType
from typing import Any

import httpx
import msgspec
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..client import ApiError, DrainReport, RetryPolicy, Spool, SpoolBusy
from ..config import Settings
from .client import Client, CliError, add_client_options, resolve_token, resolve_url
from .commands import positive_int, print_json
from .figures import count
from .imports import BATCH, print_posted, read_input
from .ui import ui

# Numbers read as Decimal: a quantity spooled is the quantity written, digit for digit.
_decimal_decoder = msgspec.json.Decoder(float_hook=Decimal)


def read_events(name: str) -> list[bytes]:
    """The events of a file ('-': stdin) as JSON texts, exactly as written: a JSON array, one
    JSON object, or NDJSON."""
    text = read_input(name).encode()
    stripped = text.lstrip()
    if stripped.startswith(b"["):
        try:
            items = msgspec.json.decode(stripped, type=list[msgspec.Raw])
        except msgspec.DecodeError as exc:
            raise CliError(f"{name} is not a JSON array of events: {exc}") from exc
        return [bytes(item) for item in items]
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = msgspec.json.decode(line, type=msgspec.Raw)
        except msgspec.DecodeError as exc:
            raise CliError(f"{name}, line {number}: not JSON ({exc})") from exc
        if not bytes(raw).lstrip().startswith(b"{"):
            raise CliError(f"{name}, line {number}: an event is a JSON object")
        lines.append(bytes(raw))
    return lines


# --- events post ----------------------------------------------------------------------------


def cmd_events_post(args: argparse.Namespace, settings: Settings) -> int:
    lines = read_events(args.file)
    if not lines:
        ui.err.print(f"{args.file}: no events", highlight=False)
        return 0
    accepted = duplicates = 0
    rejected: list[dict[str, Any]] = []
    with (
        Client.from_args(args, settings, posting=True) as client,
        _progress("posting events") as progress,
    ):
        task = progress.add_task("post", total=len(lines))
        for first in range(0, len(lines), args.batch_size):
            batch = lines[first : first + args.batch_size]
            report = client.post_ndjson(batch)
            accepted += report.accepted
            duplicates += report.duplicates
            for item in report.rejected:
                entry = msgspec.to_builtins(item)
                entry["index"] = first + item.index
                rejected.append(entry)
            progress.advance(task, len(batch))
    print_posted(accepted, duplicates, rejected)
    return 1 if rejected else 0


def _progress(label: str) -> Progress:
    return Progress(
        TextColumn(label),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=ui.err,
        transient=True,
        disable=not ui.err.is_terminal,  # no bar in logs and pipes
    )


# --- spool put / flush ----------------------------------------------------------------------


def spool_from_args(args: argparse.Namespace, settings: Settings) -> Spool:
    directory = args.spool or settings.spool
    if not directory:
        raise CliError("no spool: pass --spool DIR or set TRAINLEDGER_SPOOL")
    try:
        return Spool(directory)
    except OSError as exc:
        raise CliError(f"spool {directory}: {exc.strerror or exc}") from exc


def cmd_spool_put(args: argparse.Namespace, settings: Settings) -> int:
    spool = spool_from_args(args, settings)
    events = [_decimal_decoder.decode(line) for line in read_events(args.file)]
    try:
        spool.put(events)
    except ValueError as exc:
        raise CliError(f"{args.file}: {exc}") from exc
    ui.err.print(f"{count(len(events), 'event')} spooled in {spool.directory}", highlight=False)
    return 0


def cmd_spool_flush(args: argparse.Namespace, settings: Settings) -> int:
    spool = spool_from_args(args, settings)
    with Client.from_args(args, settings, posting=True) as client:
        try:
            report = spool.drain(client, batch_size=args.batch_size, wait=True)
        except (ApiError, httpx.HTTPError):
            ui.err.print(f"{count(spool.pending(), 'event')} stay spooled for the next flush")
            raise
        except OSError as exc:  # the spool itself (its lock, its directories): say which
            raise CliError(f"spool {spool.directory}: {exc}") from exc
    print_posted(report.accepted, report.duplicates, report.rejected)
    _say_set_aside(spool, report, report.notes)
    return 1 if report.rejected or report.troubled or report.corrupt_lines else 0


def _say_set_aside(spool: Spool, report: DrainReport, notes: list[str]) -> None:
    """What the drain set aside or could not: each entry once (`notes`), then the totals."""
    for note in notes:
        ui.err.print(Text(f"spool: {note}", style="red"))
    said = [
        (
            report.events_refused,
            "spooled event refused by the service",
            "spooled events refused by the service",
        ),
        (
            report.files_unreadable,
            "spool entry that cannot be read",
            "spool entries that cannot be read",
        ),
        (
            report.corrupt_lines,
            "unreadable line (not a JSON object)",
            "unreadable lines (not JSON objects)",
        ),
    ]
    for n, singular, plural in said:
        if n:
            ui.err.print(
                Text(
                    f"{count(n, singular, plural)}, kept in {spool.failed} beside a note",
                    style="bold red",
                )
            )
    if report.files_left:
        ui.err.print(
            Text(
                f"{count(report.files_left, 'spooled file')} could not be set aside (see above): "
                f"left in {spool.new}, tried again at the next drain",
                style="bold red",
            )
        )


def cmd_spool_failed(args: argparse.Namespace, settings: Settings) -> int:
    """The spool's dead letters: what drains set aside in failed/, and why."""
    spool = spool_from_args(args, settings)
    entries = spool.set_aside()
    if args.json:
        print_json([msgspec.to_builtins(e) for e in entries])
        return 0
    if not entries:
        ui.err.print(f"nothing set aside in {spool.failed}", highlight=False)
        return 0
    table = Table(title=Text(f"set aside in {spool.failed}", style="bold"), title_justify="left")
    table.add_column("entry", overflow="fold")
    table.add_column("kind")
    table.add_column("lines", justify="right")
    table.add_column("why", overflow="fold")
    for e in entries:
        lines = "" if e.events is None else str(e.events)
        table.add_row(Text(e.name), Text(e.kind), Text(lines), Text(e.detail))
    ui.out.print(table)
    ui.err.print(
        "a refused or unreadable file goes back with `mv` into new/ once its cause is fixed; "
        "*.corrupt holds raw lines, never sent",
        highlight=False,
    )
    return 0


# --- agent ----------------------------------------------------------------------------------


class Stopping(Exception):
    """SIGTERM or SIGINT while the agent waited to retry."""


def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    """Drain the spool every --interval seconds until SIGTERM/SIGINT. Stopping never loses an
    event: a file leaves the spool only once the service has answered for it."""
    spool = spool_from_args(args, settings)
    stop = threading.Event()
    _on_signals(lambda: stop.set())

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopping

    # Retries never give up here: the agent waits out any outage (the spool keeps the events).
    policy = RetryPolicy(attempts=1_000_000, base=0.5, cap=args.max_backoff)
    token = resolve_token(args, settings)
    url = resolve_url(args, settings)
    ui.err.print(f"agent: draining {spool.directory} to {url}", highlight=False)
    said: set[str] = set()  # what was said of an entry left behind, said once while it lasts
    with Client(url, token, args.timeout, retry=policy, sleep=sleep) as client:
        while not stop.is_set():
            try:
                report = spool.drain(client, batch_size=args.batch_size)
            except SpoolBusy:
                ui.err.print("agent: another process is draining this spool; waiting")
            except Stopping:
                break
            except ApiError as exc:  # 401, 404...: say so, keep the files, try again later
                ui.err.print(Text(f"agent: the service refused: {exc}", style="red"))
            except OSError as exc:  # the spool itself (a full disk, its permissions): not a
                # reason to stop; what can be sent is sent once it can be read again
                ui.err.print(Text(f"agent: spool {spool.directory}: {exc}", style="red"))
            else:
                if report.files_sent:
                    _say_drained(report)
                fresh = [note for note in report.notes if note not in said]
                said = set(report.notes)
                if fresh or report.files_failed or report.files_unreadable:
                    _say_set_aside(spool, report, fresh)
            stop.wait(args.interval)
    ui.err.print(f"agent: stopped; {count(spool.pending(), 'event')} spooled", highlight=False)
    return 0


def _say_drained(report: DrainReport) -> None:
    ui.err.print(
        f"agent: sent {count(report.events, 'event')} from {count(report.files_sent, 'file')} "
        f"in {count(report.requests, 'request')}: "
        f"{report.accepted:,} accepted, {count(report.duplicates, 'duplicate')}, "
        f"{len(report.rejected):,} rejected",
        highlight=False,
    )


def _on_signals(handler: Callable[[], None]) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        handler()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


# --- parsers --------------------------------------------------------------------------------


def _batch_size(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size", type=positive_int, default=BATCH, help=f"events per request ({BATCH})"
    )


def _spool_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spool", help="the spool directory (default: $TRAINLEDGER_SPOOL)")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    events = sub.add_parser("events", help="usage events (over HTTP)")
    events_sub = events.add_subparsers(dest="events_command", required=True)
    post = events_sub.add_parser(
        "post",
        help="post events from NDJSON or JSON (retried through outages and 429s)",
        description="Posts usage events (NDJSON, a JSON array, or one JSON object) in "
        "batches; connection errors, timeouts, 429 and 5xx are retried with backoff. Exit "
        "status 1 when the service rejected any event.",
    )
    post.add_argument("file", nargs="?", default="-", help="events file ('-' = stdin)")
    _batch_size(post)
    add_client_options(post)
    post.set_defaults(handler=cmd_events_post)

    spool = sub.add_parser("spool", help="a durable spool of events on local disk")
    spool_sub = spool.add_subparsers(dest="spool_command", required=True)
    put = spool_sub.add_parser(
        "put", help="spool events (durable when it returns; no service needed)"
    )
    put.add_argument("file", nargs="?", default="-", help="events file ('-' = stdin)")
    _spool_option(put)
    put.set_defaults(handler=cmd_spool_put)
    flush = spool_sub.add_parser("flush", help="send everything spooled, then exit")
    _spool_option(flush)
    _batch_size(flush)
    add_client_options(flush)
    flush.set_defaults(handler=cmd_spool_flush)
    failed = spool_sub.add_parser(
        "failed",
        help="what drains set aside in DIR/failed/ (refused, unreadable, corrupt) and why",
    )
    _spool_option(failed)
    failed.add_argument("--json", action="store_true", help="as JSON")
    failed.set_defaults(handler=cmd_spool_failed)

    agent = sub.add_parser(
        "agent",
        help="drain a spool to the service until SIGTERM",
        description="Sends what the spool holds every --interval seconds, waiting out "
        "outages and 429s; SIGTERM or SIGINT stops it after the request in flight (what is "
        "not yet acknowledged stays spooled).",
    )
    _spool_option(agent)
    agent.add_argument(
        "--interval", type=float, default=2.0, help="seconds between drains (default 2)"
    )
    agent.add_argument(
        "--max-backoff", type=float, default=30.0, help="longest wait between retries (30)"
    )
    _batch_size(agent)
    add_client_options(agent)
    agent.set_defaults(handler=cmd_agent)
