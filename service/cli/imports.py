"""`trainledger import slurm|pods`: scheduler accounting turned into usage events and posted.

The parsing and the mapping to events are pure (service/importers/); this module reads the
input, prints what it found, and posts the events in batches with a progress bar. Posting is
idempotent (event ids come from job ids), so an interrupted import is simply run again.

Exit status: 0 when every GPU record became events that were accepted (or were already
counted); 1 when some GPU usage was not imported: an unmapped GPU type/partition, a record
that could not be read, or an event the service rejected. Running jobs are not an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table
from rich.text import Text

from ..config import Settings
from ..importers.common import ImportEvent, ImportResult, parse_mapping
from ..importers.kubernetes import PodListError, import_pods
from ..importers.slurm import SacctFormatError, import_sacct
from .client import ApiError, Client, CliError, add_client_options
from .commands import positive_int
from .figures import count
from .ui import ui

BATCH = 5_000
SHOW = 20  # rows of skipped records / rejected reasons printed before "... and N more"


def read_input(name: str) -> str:
    if name == "-" and sys.stdin.isatty():
        raise CliError("reading from stdin, which is a terminal: pipe the input in or name a file")
    try:
        return sys.stdin.read() if name == "-" else Path(name).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {name}: {exc.strerror or exc}") from exc


def mapping_from_args(args: argparse.Namespace) -> dict[str, str]:
    from_file: dict[str, Any] | None = None
    if args.map_file:
        try:
            loaded = json.loads(Path(args.map_file).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CliError(f"--map-file {args.map_file}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise CliError(f"--map-file {args.map_file}: expected a JSON object {{key: sku}}")
        from_file = loaded
    try:
        return parse_mapping(args.map or [], from_file)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def cmd_import_slurm(args: argparse.Namespace, settings: Settings) -> int:
    mapping = mapping_from_args(args)
    try:
        tz = ZoneInfo(args.tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CliError(f"--tz {args.tz!r} is not a known time zone") from exc
    text = read_input(args.file)
    try:
        result = import_sacct(
            text,
            mapping,
            project_from=args.project_from,
            project=args.project,
            tz=tz,
            cluster=args.cluster,
        )
    except (SacctFormatError, ValueError) as exc:
        raise CliError(f"{args.file}: {exc}") from exc
    return finish(args, settings, result, "jobs", "job steps ignored (the allocation counts)")


def cmd_import_pods(args: argparse.Namespace, settings: Settings) -> int:
    mapping = mapping_from_args(args)
    text = read_input(args.file)
    try:
        document = json.loads(text)
        result = import_pods(
            document, mapping, project_label=args.project_label, project=args.project
        )
    except json.JSONDecodeError as exc:
        raise CliError(f"{args.file} is not valid JSON: {exc}") from exc
    except (PodListError, ValueError) as exc:
        raise CliError(f"{args.file}: {exc}") from exc
    return finish(args, settings, result, "pods", "")


def finish(
    args: argparse.Namespace,
    settings: Settings,
    result: ImportResult,
    noun: str,
    steps_note: str,
) -> int:
    print_found(result, noun, steps_note)
    incomplete = bool(result.unmapped or result.skipped)
    if args.dry_run or not result.events:
        if args.dry_run:
            ui.err.print("dry run: nothing posted", highlight=False)
        return 1 if incomplete else 0
    with Client.from_args(args, settings, posting=True) as client:
        try:
            accepted, duplicates, rejected = post_events(client, result.events, args.batch_size)
        except (ApiError, httpx.HTTPError):
            # Batches already accepted stay counted; their ids make a second run add nothing.
            ui.err.print("the import stopped part way: run it again once the cause is fixed")
            raise
    print_posted(accepted, duplicates, rejected)
    return 1 if incomplete or rejected else 0


def print_found(result: ImportResult, noun: str, steps_note: str) -> None:
    """What the input held, what becomes events (GPU hours per SKU and day), what does not."""
    one = noun.removesuffix("s")  # "jobs" -> "job", "pods" -> "pod"
    parts = [
        count(result.records, "record"),
        f"{count(result.counted, one, noun)} with GPUs counted",
    ]
    if result.steps:
        parts.append(f"{result.steps:,} {steps_note}")
    if result.not_finished:
        parts.append(f"{result.not_finished:,} not finished (import again once they end)")
    if result.without_gpus:
        parts.append(f"{result.without_gpus:,} without GPUs")
    if result.repeated:
        parts.append(f"{result.repeated:,} repeated in the input (counted once)")
    if result.skipped:
        parts.append(f"{len(result.skipped):,} skipped")
    ui.err.print(", ".join(parts), highlight=False)

    if result.events:
        table = Table(
            "sku",
            "day (UTC)",
            Column("events", justify="right"),
            Column("GPU hours", justify="right"),
            title=Text("GPU hours to post", style="bold"),
            title_justify="left",
        )
        events_per: dict[tuple[str, str], int] = defaultdict(int)
        for e in result.events:
            events_per[(e.sku, e.day)] += 1
        per_sku: dict[str, Decimal] = defaultdict(Decimal)
        for (sku, day), hours in result.by_sku_and_day().items():
            table.add_row(Text(sku), day, str(events_per[(sku, day)]), hours_text(hours))
            per_sku[sku] += hours
        table.add_section()
        for sku, hours in sorted(per_sku.items()):
            total = Text(hours_text(hours), style="bold")
            table.add_row(Text(sku, style="bold"), "total", "", total)
        ui.out.print(table)

    if result.unmapped:
        table = Table(
            "key",
            Column(noun, justify="right"),
            Column("GPU hours", justify="right"),
            title=Text("unmapped GPU usage (not posted)", style="bold red"),
            title_justify="left",
        )
        for key, entry in sorted(result.unmapped.items()):
            table.add_row(Text(key), str(entry.records), hours_text(entry.gpu_hours))
        ui.out.print(table)
        example = next(iter(sorted(result.unmapped)))
        ui.err.print(Text(f"map them with --map {example}=<sku> (or --map-file) and import again"))
    if result.skipped:
        ui.err.print(Text("skipped:", style="bold red"))
        for item in result.skipped[:SHOW]:
            where = f"line {item.line}: " if item.line else ""
            ui.err.print(Text(f"  {where}{item.source}: {item.reason}"))
        if len(result.skipped) > SHOW:
            ui.err.print(f"  ... and {len(result.skipped) - SHOW} more")
    for warning in result.warnings[:SHOW]:
        ui.err.print(Text(f"warning: {warning}", style="yellow"))


def hours_text(hours: Decimal) -> str:
    """32.000000 as 32, 6.333333 as is: exact, without trailing zeros."""
    return f"{hours.normalize():f}"


def post_events(
    client: Client, events: list[ImportEvent], batch_size: int
) -> tuple[int, int, list[dict[str, Any]]]:
    """Post in batches; (accepted, duplicates, rejected entries as the service gave them)."""
    accepted = duplicates = 0
    rejected: list[dict[str, Any]] = []
    with Progress(
        TextColumn("posting events"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=ui.err,
        transient=True,
        disable=not ui.err.is_terminal,  # no bar in logs and pipes
    ) as progress:
        task = progress.add_task("post", total=len(events))
        for first in range(0, len(events), batch_size):
            batch = events[first : first + batch_size]
            # 422 is the answer when every event of the batch was rejected: still a report.
            # Idempotent by the events' ids: retried even after a timeout.
            response = client.request(
                "POST",
                "/v1/events",
                json=[e.as_json() for e in batch],
                ok=(422,),
                idempotent=True,
            )
            report = response.json()
            if "accepted" not in report:  # a 422 problem that is not an ingest report
                raise ApiError(response)
            accepted += int(report["accepted"])
            duplicates += int(report["duplicates"])
            for item in report.get("rejected", []):
                entry = dict(item)
                entry["index"] = first + int(item.get("index", 0))
                rejected.append(entry)
            progress.advance(task, len(batch))
    return accepted, duplicates, rejected


def print_posted(accepted: int, duplicates: int, rejected: list[dict[str, Any]]) -> None:
    ui.out.print(
        f"[green]{accepted:,} accepted[/], {count(duplicates, 'duplicate')} (already counted), "
        f"[{'red' if rejected else 'green'}]{len(rejected):,} rejected[/]",
        highlight=False,
    )
    if not rejected:
        return
    by_reason: dict[str, list[str]] = defaultdict(list)
    for item in rejected:
        field = f"{item.get('field')}: " if item.get("field") else ""
        by_reason[field + str(item.get("reason"))].append(str(item.get("id")))
    table = Table(
        "reason",
        Column("events", justify="right"),
        "first ids",
        title=Text("rejected", style="bold red"),
        title_justify="left",
    )
    for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))[:SHOW]:
        table.add_row(Text(reason), str(len(ids)), Text(", ".join(ids[:3])))
    ui.out.print(table)
    if len(by_reason) > SHOW:
        ui.out.print(f"... and {len(by_reason) - SHOW} more reasons")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--map",
        action="append",
        metavar="KEY=SKU",
        help="map a GPU type or partition to a SKU (repeatable; see the help above)",
    )
    parser.add_argument("--map-file", help="a JSON object {KEY: SKU}; --map entries win")
    parser.add_argument("--project", help="post every event to this project")
    parser.add_argument("--dry-run", action="store_true", help="show what would be posted")
    parser.add_argument(
        "--batch-size", type=positive_int, default=BATCH, help=f"events per request ({BATCH})"
    )
    add_client_options(parser)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    imp = sub.add_parser("import", help="import scheduler accounting as usage events")
    imp_sub = imp.add_subparsers(dest="import_command", required=True)

    slurm = imp_sub.add_parser(
        "slurm",
        help="GPU hours from `sacct --parsable2` output",
        description=(
            "Reads `sacct --parsable2` output (a header line; columns JobID, Account, "
            "Partition, AllocTRES, ElapsedRaw, Start, End, State; optionally User, Comment, "
            "WCKey, Cluster) and posts GPU hours per GPU type and UTC day. Job steps are "
            "ignored (the job's allocation counts once); running jobs are skipped until they "
            "end. Map keys: gpu:<type> (or gres/gpu:<type>) for a typed GRES in AllocTRES, a "
            "partition name, or gpu for untyped GPUs in any partition. Rules in "
            "service/importers/slurm.py."
        ),
        epilog="example: TZ=UTC sacct -a -P -S 2026-11-01 -E now --format "
        "JobID,Account,Partition,AllocTRES,ElapsedRaw,Start,End,State,User | "
        "trainledger import slurm - --map gpu:h100=gpu.h100.hour --map a100=gpu.a100.hour",
    )
    slurm.add_argument("file", nargs="?", default="-", help="sacct output ('-' = stdin)")
    slurm.add_argument(
        "--project-from",
        choices=("account", "wckey"),
        default="account",
        help="the column that names the project (default: account)",
    )
    slurm.add_argument(
        "--tz",
        default="UTC",
        help="time zone of Start/End without an offset (default UTC; sacct prints local time)",
    )
    slurm.add_argument("--cluster", help="cluster name, part of every event id and a tag")
    _add_common(slurm)
    slurm.set_defaults(handler=cmd_import_slurm)

    pods = imp_sub.add_parser(
        "pods",
        help="GPU hours from `kubectl get pods -o json`",
        description=(
            "Reads a Kubernetes pod list (kubectl get pods -A -o json) and posts GPU hours "
            "per finished pod, GPU resource and UTC day. Map keys: the node selector "
            "nvidia.com/gpu.product value, or the resource name (nvidia.com/gpu). Project: "
            "the namespace, or --project-label. Rules in service/importers/kubernetes.py."
        ),
    )
    pods.add_argument("file", nargs="?", default="-", help="pod list JSON ('-' = stdin)")
    pods.add_argument("--project-label", help="take the project from this pod label")
    _add_common(pods)
    pods.set_defaults(handler=cmd_import_pods)
