"""`trainledger bill import FILE...`: provider billing exports (FOCUS CSV, gzip CSV) streamed
to `POST /v1/bills/imports`, one file after another, with a progress bar per file.

An import is idempotent (by the file's content hash), so an interrupted run is run again."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from ..config import Settings
from .client import Client, CliError, add_client_options
from .figures import count
from .ui import ui

CHUNK = 1 << 20


class _FileBody:
    """The file's bytes as a request body: read again from the start on each iteration, so
    a retried request sends the whole file again; `on_read` sees each chunk's size."""

    def __init__(self, path: Path, progress: Progress, task: Any) -> None:
        self.path = path
        self.progress = progress
        self.task = task

    def __iter__(self) -> Iterator[bytes]:
        self.progress.update(self.task, completed=0)
        with open(self.path, "rb") as source:
            while chunk := source.read(CHUNK):
                self.progress.advance(self.task, len(chunk))
                yield chunk


def _media_type(path: Path) -> str:
    return "application/gzip" if path.name.endswith(".gz") else "text/csv"


def cmd_bill_import(args: argparse.Namespace, settings: Settings) -> int:
    paths = [Path(name) for name in args.files]
    for path in paths:
        if not path.is_file():
            raise CliError(f"cannot read {path}: no such file")
    with (
        Client.from_args(args, settings) as client,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=ui.err,
            transient=True,
            disable=not ui.err.is_terminal,  # no bar in logs and pipes
        ) as progress,
    ):
        for path in paths:
            task = progress.add_task(path.name, total=path.stat().st_size)
            response = client.request(
                "POST",
                "/v1/bills/imports",
                content=_FileBody(path, progress, task),
                headers={"content-type": _media_type(path)},
                idempotent=True,  # the same content twice changes nothing
            )
            record = response.json()
            what = "already imported" if record["status"] == "duplicate" else "imported"
            ui.out.print(
                f"{path}: {what}: {count(record['rows'], 'row')} "
                f"({count(record['corrections'], 'correction')}), FOCUS "
                f"{record['focus_version']}, {record['currency']}, "
                f"{count(len(record['days']), 'day')}, import {record['id']}",
                highlight=False,
                soft_wrap=True,
            )
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bill = sub.add_parser("bill", help="import the provider's bills (FOCUS) to reconcile")
    bill_sub = bill.add_subparsers(dest="bill_command", required=True)
    imp = bill_sub.add_parser(
        "import",
        help="import FOCUS 1.0 or 1.2 billing exports (CSV or gzip CSV)",
        description=(
            "Streams each file to POST /v1/bills/imports. Importing a file again changes "
            "nothing; a file that cannot be read is refused whole, naming its row and column. "
            "Needs an admin token for every project. See docs/guides/reconciliation.md."
        ),
    )
    imp.add_argument("files", nargs="+", metavar="FILE", help="a FOCUS export (.csv or .csv.gz)")
    add_client_options(imp)
    imp.set_defaults(handler=cmd_bill_import)
