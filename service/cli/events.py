"""`trainledger events post`, `trainledger spool put|flush` and `trainledger agent`: usage
events from a file or stdin to the service, directly or through a durable spool.

Input is NDJSON (one event a line) or JSON (an array of events, or one event). Posting goes
through trainledger.client: connection errors, timeouts, 429 and 5xx are retried with backoff
(event ids make a resend harmless), so a post survives a service restart.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from decimal import Decimal
from types import FrameType
from typing import Any

import httpx
import msgspec
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..client import ApiError, DrainReport, RetryPolicy, Spool, SpoolBusy
from ..config import Settings
from .client import Client, CliError, add_client_options, resolve_token, resolve_url
from .commands import positive_int
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


def spool_from_args(args: argparse.Namespace) -> Spool:
    directory = args.spool or os.environ.get("TRAINLEDGER_SPOOL")
    if not directory:
        raise CliError("no spool: pass --spool DIR or set TRAINLEDGER_SPOOL")
    try:
        return Spool(directory)
    except OSError as exc:
        raise CliError(f"spool {directory}: {exc.strerror or exc}") from exc


def cmd_spool_put(args: argparse.Namespace, settings: Settings) -> int:
    spool = spool_from_args(args)
    events = [_decimal_decoder.decode(line) for line in read_events(args.file)]
    try:
        spool.put(events)
    except ValueError as exc:
        raise CliError(f"{args.file}: {exc}") from exc
    ui.err.print(f"{count(len(events), 'event')} spooled in {spool.directory}", highlight=False)
    return 0


def cmd_spool_flush(args: argparse.Namespace, settings: Settings) -> int:
    spool = spool_from_args(args)
    with Client.from_args(args, settings, posting=True) as client:
        try:
            report = spool.drain(client, batch_size=args.batch_size, wait=True)
        except (ApiError, httpx.HTTPError):
            ui.err.print(f"{count(spool.pending(), 'event')} stay spooled for the next flush")
            raise
    print_posted(report.accepted, report.duplicates, report.rejected)
    _say_set_aside(spool, report)
    return 1 if report.rejected or report.files_failed else 0


def _say_set_aside(spool: Spool, report: DrainReport) -> None:
    if report.files_failed:
        ui.err.print(
            Text(
                f"{count(report.files_failed, 'spooled file')} refused by the service, kept in "
                f"{spool.failed} beside its answer",
                style="bold red",
            )
        )


# --- agent ----------------------------------------------------------------------------------


class Stopping(Exception):
    """SIGTERM or SIGINT while the agent waited to retry."""


def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    """Drain the spool every --interval seconds until SIGTERM/SIGINT. Stopping never loses an
    event: a file leaves the spool only once the service has answered for it."""
    spool = spool_from_args(args)
    stop = threading.Event()
    _on_signals(lambda: stop.set())

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopping

    # Retries never give up here: the agent waits out any outage (the spool keeps the events).
    policy = RetryPolicy(attempts=1_000_000, base=0.5, cap=args.max_backoff)
    token = resolve_token(args, settings)
    url = resolve_url(args)
    ui.err.print(f"agent: draining {spool.directory} to {url}", highlight=False)
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
            else:
                if report.files_sent or report.files_failed:
                    _say_drained(report)
                    _say_set_aside(spool, report)
            stop.wait(args.interval)
    ui.err.print(f"agent: stopped; {count(spool.pending(), 'event')} spooled", highlight=False)
    return 0


def _say_drained(report: DrainReport) -> None:
    ui.err.print(
        f"agent: sent {count(report.events, 'event')} from {count(report.files_sent, 'file')}: "
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
