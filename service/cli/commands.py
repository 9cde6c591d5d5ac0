"""Client commands: `ratecard apply`, `plan estimate`, `costs`, `export focus`.

Each talks to a running service over HTTP (service/cli/client.py says where the URL and the
token come from) and prints rich tables, or the service's own JSON/CSV when asked.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import date, datetime
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table
from rich.text import Text

from ..config import Settings
from ..export.csvsafe import neutralise
from .client import Client, CliError, add_client_options
from .estimate_tables import print_estimate
from .figures import count, escaped, grouped, money, none_line
from .ui import ui

# Filters `costs --filter KEY=VALUE` passes as query parameters; `tag.<key>=<value>` is a tag.
COST_FILTERS = ("stage", "experiment", "category", "sku", "owner", "fixed")
PAGE = 10_000
# The demo's rate card, shipped in the package; found without importing the demo package.
EXAMPLE_CARD = files("trainledger.cli") / "demo" / "ratecard.json"


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (batch sizes)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def read_json_file(name: str) -> Any:
    """A JSON document from a file, or from stdin for '-'."""
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{name} is not valid JSON: {exc}") from exc


def print_json(document: Any) -> None:
    # Raw to stdout: a rich console would wrap long lines and break the JSON.
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


# --- ratecard apply -------------------------------------------------------------------------


def cmd_ratecard_apply(args: argparse.Namespace, settings: Settings) -> int:
    body = read_json_file(args.file)
    if not isinstance(body, dict):
        raise CliError(f"{args.file}: a rate card is a JSON object")
    if args.reprice:
        body["reprice"] = True
    with Client.from_args(args, settings) as client:
        answer = client.json("PUT", f"/v1/rate-cards/{args.name}", json=body)
    if args.json:
        print_json(answer)
        return 0
    # 202: a past-dated version stored with the repricing jobs of the projects it changes.
    version = answer.get("version") if isinstance(answer.get("version"), dict) else answer
    skus = version.get("skus") or []
    ui.out.print(
        f"rate card [bold]{escaped(version.get('name', args.name))}[/] version "
        f"[bold]{version.get('version')}[/]: {len(skus)} SKUs in "
        f"{escaped(version.get('currency'))}, "
        f"effective from {escaped(version.get('effective_from'))}",
        highlight=False,
    )
    for job in answer.get("jobs") or []:
        ui.out.print(
            f"repricing project [bold]{escaped(job.get('project'))}[/]: "
            f"job {escaped(job.get('id'))} (GET {escaped(job.get('href'))})",
            highlight=False,
        )
    return 0


def cmd_ratecard_example(args: argparse.Namespace, settings: Settings) -> int:
    """The card shipped in the package (what the docs' `service/cli/demo/ratecard.json` is in
    a checkout), read without importing the demo."""
    sys.stdout.write(EXAMPLE_CARD.read_text(encoding="utf-8"))
    return 0


# --- plan estimate --------------------------------------------------------------------------


def cmd_plan_estimate(args: argparse.Namespace, settings: Settings) -> int:
    body = read_json_file(args.file)
    with Client.from_args(args, settings) as client:
        # A computation that stores nothing: safe to repeat after a timeout.
        estimate = client.json("POST", "/v1/plans/estimate", json=body, idempotent=True)
    if args.json:
        print_json(estimate)
        return 0
    print_estimate(estimate)
    return 0


def Column(header: str) -> Any:  # a right-aligned column, like rich's own Column
    from rich.table import Column as RichColumn

    return RichColumn(header, justify="right")


# --- costs ----------------------------------------------------------------------------------


def cost_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    params: list[tuple[str, str]] = [("project", args.project)]
    params.append(("group_by", ",".join(_split(args.group_by)) or "category"))
    for name, value in (("from", args.from_day), ("to", args.to_day)):
        if value:
            params.append((name, value))
    if args.granularity:
        params.append(("granularity", args.granularity))
    if args.sort:
        params.append(("sort", args.sort))
    if args.top:
        params.append(("top", str(args.top)))
    for item in args.filter or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--filter wants KEY=VALUE, got {item!r}")
        if key.startswith("tag."):
            params.append(("tag", f"{key[len('tag.') :]}:{value}"))
        elif key in COST_FILTERS:
            params.append((key, value))
        else:
            raise CliError(f"--filter {key!r}: use one of {', '.join(COST_FILTERS)} or tag.<key>")
    return params


def fetch_costs(client: Client, params: list[tuple[str, str]]) -> dict[str, Any]:
    """Every page of `GET /v1/costs`, as one report (offset 0, every row)."""
    offset = 0
    report: dict[str, Any] | None = None
    while True:
        page = client.json(
            "GET", "/v1/costs", params=[*params, ("offset", str(offset)), ("limit", str(PAGE))]
        )
        if report is None:
            report = page
        else:
            report["rows"].extend(page["rows"])
        if page.get("next_offset") is None:
            break
        offset = int(page["next_offset"])
    report["offset"], report["next_offset"] = 0, None
    report["limit"] = len(report["rows"])
    return report


def cost_columns(report: dict[str, Any]) -> list[str]:
    return (["period"] if report.get("granularity") else []) + list(report.get("group_by", []))


def cmd_costs(args: argparse.Namespace, settings: Settings) -> int:
    params = cost_params(args)
    with Client.from_args(args, settings) as client:
        report = fetch_costs(client, params)
    if args.json:
        print_json(report)
        return 0
    columns = cost_columns(report)
    by_sku = "sku" in report.get("group_by", [])
    if args.csv:
        write_costs_csv(report, columns, by_sku, sys.stdout)
        return 0
    if not report["rows"]:
        span = f"from {report.get('from_day') or 'the start'} to {report.get('to_day') or 'now'}"
        none_line(f"no costs in project {report['project']} {span}")
        return 0
    ui.out.print(costs_table(report, columns, by_sku))
    span = f"from {report.get('from_day') or 'the start'} to {report.get('to_day') or 'now'}"
    ui.err.print(f"{count(len(report['rows']), 'row')}, {span}", highlight=False)
    return 0


def costs_table(report: dict[str, Any], columns: list[str], by_sku: bool) -> Table:
    """The `GET /v1/costs` report as a table for people."""
    currency = report.get("currency") or ""
    table = Table(
        *columns,
        *([Column("quantity"), "unit"] if by_sku else []),
        Column("events"),
        Column(f"cost ({currency})" if currency else "cost"),
        title=Text(
            f"{report['project']}: costs by {', '.join(report.get('group_by', []))}"
            + (f" per {report['granularity']}" if report.get("granularity") else ""),
            style="bold",
        ),
        title_justify="left",
    )
    for row in report["rows"]:
        key = row.get("key") or {}
        cells = [Text(str(key.get(c, ""))) for c in columns]
        if by_sku:
            quantity = row.get("quantity")
            cells += [Text(grouped(quantity) if quantity else ""), Text(str(row.get("unit") or ""))]
        # For people: grouped, the currency's precision (the header names the currency, so a
        # row in another one says its own code); --json and --csv keep the exact figures.
        row_currency = row.get("currency") or currency
        cells += [
            Text(_events(row.get("events"))),
            Text(money(row.get("cost", ""), row_currency, code=row_currency != currency)),
        ]
        table.add_row(*cells)
    table.add_section()
    blank = [Text("")] * (len(columns) - 1 + (2 if by_sku else 0))
    table.add_row(
        Text("total", style="bold"),
        *blank,
        Text(_events(report.get("total_events"))),
        Text(money(report.get("total_cost", ""), currency, code=False), style="bold"),
    )
    return table


def _events(value: object) -> str:
    """An event count grouped (`12,480`); anything but a whole number as it is."""
    return f"{value:,}" if isinstance(value, int) else str(value if value is not None else "")


def write_costs_csv(
    report: dict[str, Any], columns: list[str], by_sku: bool, stream: IO[str]
) -> None:
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(
        [*columns, *(["quantity", "unit"] if by_sku else []), "events", "cost", "currency"]
    )
    for row in report["rows"]:
        key = row.get("key") or {}
        writer.writerow(
            [
                *(neutralise(key.get(c, "")) for c in columns),
                *([row.get("quantity") or "", row.get("unit") or ""] if by_sku else []),
                row.get("events", ""),
                row.get("cost", ""),
                row.get("currency") or report.get("currency") or "",
            ]
        )


# --- export focus ---------------------------------------------------------------------------


def rfc3339(text: str) -> str:
    """A day (`2026-11-01`, read as 00:00 UTC) or an RFC 3339 time, as the API wants it."""
    try:
        return date.fromisoformat(text).isoformat() + "T00:00:00Z"
    except ValueError:
        pass
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a day or an RFC 3339 time: {text!r}") from exc
    return text


def cmd_export_focus(args: argparse.Namespace, settings: Settings) -> int:
    params = [("project", args.project)]
    if args.from_time:
        params.append(("from", args.from_time))
    if args.to_time:
        params.append(("to", args.to_time))
    if args.granularity != "event":
        params.append(("granularity", args.granularity))
    with Client.from_args(args, settings) as client:
        if args.output in (None, "-"):
            rows, size = stream_focus(client, params, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            where = "stdout"
        else:
            # Written beside the target and renamed at the end: a failed export leaves no
            # truncated file that looks complete.
            target = Path(args.output)
            partial = target.with_name(target.name + ".partial")
            try:
                with open(partial, "wb") as sink:
                    rows, size = stream_focus(client, params, sink)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(target)
            where = str(target)
    ui.err.print(
        f"{count(rows, 'row')} ({count(size, 'byte')}) written to {where}", highlight=False
    )
    return 0


def stream_focus(client: Client, params: list[tuple[str, str]], sink: IO[bytes]) -> tuple[int, int]:
    """Copy the export to ``sink`` chunk by chunk; (data rows, bytes)."""
    lines = size = 0
    with (
        client.stream("GET", "/v1/export/focus", params=params) as response,
        Progress(
            SpinnerColumn(),
            TextColumn("FOCUS export"),
            DownloadColumn(),
            TextColumn("{task.fields[rows]} rows"),
            console=ui.err,
            transient=True,
            disable=not ui.err.is_terminal,  # no bar in logs and pipes
        ) as progress,
    ):
        task = progress.add_task("export", total=None, rows=0)
        for chunk in response.iter_bytes():
            sink.write(chunk)
            size += len(chunk)
            # Row count for the progress display only: quoted fields never hold a newline
            # here (the export writes none), so lines less the header are the rows.
            lines += chunk.count(b"\n")
            progress.update(task, completed=size, rows=max(0, lines - 1))
    return max(0, lines - 1), size


# --- parsers --------------------------------------------------------------------------------


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_ratecard_parsers(sub)
    _add_plan_parsers(sub)
    _add_costs_parser(sub)
    _add_export_parsers(sub)


def _add_ratecard_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ratecard = sub.add_parser("ratecard", help="rate cards (over HTTP; `example` offline)")
    ratecard_sub = ratecard.add_subparsers(dest="ratecard_command", required=True)
    apply = ratecard_sub.add_parser(
        "apply",
        help="add a version of a rate card from a JSON file (PUT /v1/rate-cards/{name})",
    )
    apply.add_argument("file", help="the rate card JSON ('-' for stdin)")
    apply.add_argument(
        "--name", default="default", help="rate-card name (default: default, used by projects)"
    )
    apply.add_argument(
        "--reprice",
        action="store_true",
        help="a version effective before events already priced: store it and reprice the "
        "projects it changes (a job each) instead of being refused",
    )
    apply.add_argument("--json", action="store_true", help="print the service's answer")
    add_client_options(apply)
    apply.set_defaults(handler=cmd_ratecard_apply)
    example = ratecard_sub.add_parser(
        "example",
        help="print the example rate card (17 SKUs at public list prices, the demo's), to "
        "save and edit: trainledger ratecard example > card.json",
    )
    example.set_defaults(handler=cmd_ratecard_example)


def _add_plan_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser("plan", help="training plans (over HTTP)")
    plan_sub = plan.add_subparsers(dest="plan_command", required=True)
    estimate = plan_sub.add_parser(
        "estimate", help="price a plan without saving it (POST /v1/plans/estimate)"
    )
    estimate.add_argument("file", help="the plan JSON ('-' for stdin)")
    estimate.add_argument("--json", action="store_true", help="print the service's answer")
    add_client_options(estimate)
    estimate.set_defaults(handler=cmd_plan_estimate)


def _add_costs_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    costs = sub.add_parser("costs", help="costs grouped by any dimensions (GET /v1/costs)")
    costs.add_argument("--project", required=True, help="the project")
    costs.add_argument(
        "--group-by",
        default="category",
        help="comma-separated: day, stage, experiment, category, sku, owner, fixed, tag.<key>",
    )
    costs.add_argument("--from", dest="from_day", help="first day, inclusive (YYYY-MM-DD)")
    costs.add_argument("--to", dest="to_day", help="last day, exclusive (YYYY-MM-DD)")
    costs.add_argument(
        "--granularity",
        choices=("hour", "day", "week", "month"),
        help="one row per period of this length too (default: the whole span)",
    )
    costs.add_argument(
        "--filter",
        action="append",
        metavar="KEY=VALUE",
        help=f"keep only rows with this value: {', '.join(COST_FILTERS)}, or tag.<key> "
        "(repeatable)",
    )
    costs.add_argument("--top", type=int, help="keep N rows, the rest summed as '(other)'")
    costs.add_argument("--sort", help="cost, events or key; '-' for descending (default -cost)")
    fmt = costs.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the service's JSON (every page)")
    fmt.add_argument("--csv", action="store_true", help="CSV to stdout")
    add_client_options(costs)
    costs.set_defaults(handler=cmd_costs)


def _add_export_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="exports (over HTTP)")
    export_sub = export.add_subparsers(dest="export_command", required=True)
    focus = export_sub.add_parser(
        "focus", help="stream the FOCUS 1.2 cost-and-usage CSV (GET /v1/export/focus)"
    )
    focus.add_argument("--project", required=True, help="the project")
    focus.add_argument(
        "--from",
        dest="from_time",
        type=rfc3339,
        help="first event time included: a day (00:00 UTC) or an RFC 3339 time",
    )
    focus.add_argument(
        "--to", dest="to_time", type=rfc3339, help="first event time excluded (same forms)"
    )
    focus.add_argument(
        "--granularity",
        choices=("event", "hour", "day"),
        default="event",
        help="one row per event (default), or per UTC hour or day × SKU and dimensions",
    )
    focus.add_argument("-o", "--output", help="file to write (default: stdout)")
    add_client_options(focus)
    focus.set_defaults(handler=cmd_export_focus)


def _split(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]
