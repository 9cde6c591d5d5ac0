"""Run the performance suite: `python -m bench.run [--quick] [--only a,b] [--json PATH]`.

Each benchmark module exposes `run(params) -> dict` (see bench/common.py `result`) and the
parameter sets DEFAULTS (the issue's sizes), QUICK and TINY (the smoke test's). Results are
printed as a table and written as JSON (default bench/results/latest.json; bench/results/ is
not committed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from bench.common import machine_info

BENCHMARKS: tuple[str, ...] = (
    "core",
    "decode",
    "ingest_http",
    "latency",
    "queries",
    "memory",
    "scaling",
)
ALIASES = {"http": "ingest_http", "ingest": "ingest_http", "single": "latency"}
DATASET_BENCHMARKS = ("queries", "memory")
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"

console = Console()


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit.startswith("events/s"):
        if value >= 1e6:
            return f"{value / 1e6:,.1f} M ev/s"
        if value >= 1e3:
            return f"{value / 1e3:,.1f} k ev/s"
        return f"{value:,.0f} ev/s"
    if unit.startswith("ms"):
        return f"{value:,.1f} ms" if value < 1000 else f"{value / 1000:,.2f} s"
    if unit == "B/event":
        return f"{value:,.1f} B/ev"
    if unit == "MB":
        return f"{value:,.1f} MB"
    if unit == "req/s":
        return f"{value:,.0f} req/s"
    return f"{value:,.3g} {unit}"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    if ratio < 1:
        return f"{ratio * 100:.1f} %"
    return f"{ratio:,.2f}×"


def met_cell(met: bool | None, target: str | None) -> str:
    if met is None or target is None:
        return "[dim]n/a[/]"
    return "[green]yes[/]" if met else "[red]NO[/]"


def results_table(results: list[dict[str, Any]]) -> Table:
    table = Table(title="trainledger benchmarks", show_lines=False)
    for column in ("benchmark", "figure", "ceiling / baseline", "ratio", "target", "met"):
        table.add_column(column, overflow="fold")
    for r in results:
        if "error" in r:
            table.add_row(r["name"], "[red]error[/]", "", "", "", "[red]NO[/]")
            continue
        table.add_row(
            f"[bold]{r['name']}[/]",
            fmt_value(r["figure"], r["unit"]),
            fmt_value(r["ceiling"], r["unit"]),
            fmt_ratio(r["ratio"]),
            r["target"] or "none in the issue",
            met_cell(r["met"], r["target"]) if r["target"] else "[dim]n/a[/]",
        )
        for sub in r.get("rows", []):
            table.add_row(
                f"  {sub['label']}",
                fmt_value(sub["figure"], sub["unit"]),
                fmt_value(sub["ceiling"], sub["unit"]),
                fmt_ratio(sub["ratio"]),
                sub["target"] or "",
                met_cell(sub["met"], sub["target"]) if sub["target"] else "",
            )
    return table


def markdown_table(results: list[dict[str, Any]]) -> str:
    """The same table as Markdown (for bench/README.md)."""
    lines = [
        "| benchmark | figure | ceiling / baseline | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | error | | | | no |")
            continue
        met = ("yes" if r["met"] else "**NO**") if r["target"] else "n/a"
        lines.append(
            f"| **{r['name']}** | {fmt_value(r['figure'], r['unit'])} | "
            f"{fmt_value(r['ceiling'], r['unit'])} | {fmt_ratio(r['ratio'])} | "
            f"{r['target'] or 'none in the issue'} | {met} |"
        )
        for sub in r.get("rows", []):
            sub_met = "" if not sub["target"] else ("yes" if sub["met"] else "**NO**")
            lines.append(
                f"| &nbsp;&nbsp;{sub['label']} | {fmt_value(sub['figure'], sub['unit'])} | "
                f"{fmt_value(sub['ceiling'], sub['unit'])} | {fmt_ratio(sub['ratio'])} | "
                f"{sub['target'] or ''} | {sub_met} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    parser.add_argument(
        "--only", default="", help=f"comma-separated subset of {','.join(BENCHMARKS)}"
    )
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    parser.add_argument(
        "--events",
        type=int,
        default=None,
        help="events to load for queries and memory (default 10,000,000; --quick 1,000,000)",
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="duration of each HTTP load run"
    )
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    return parser.parse_args(argv)


def selected(only: str) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    names = []
    for raw in only.split(","):
        name = ALIASES.get(raw.strip(), raw.strip())
        if name not in BENCHMARKS:
            raise SystemExit(f"unknown benchmark {raw!r}; choose from {', '.join(BENCHMARKS)}")
        names.append(name)
    return [b for b in BENCHMARKS if b in names]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = selected(args.only)
    from bench import dataset

    results: list[dict[str, Any]] = []
    started = datetime.now(UTC)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    record: dict[str, Any] = {
        "started": started.isoformat(),
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "machine": machine_info(),
        "results": results,
    }
    try:
        with progress:
            for name in names:
                module = importlib.import_module(f"bench.{name}")
                params = dict(module.QUICK if args.quick else module.DEFAULTS)
                if name in DATASET_BENCHMARKS and args.events is not None:
                    params["events"] = args.events
                if args.seconds is not None and "seconds" in params:
                    params["seconds"] = args.seconds
                if name in DATASET_BENCHMARKS:
                    task = progress.add_task(
                        f"loading {params['events']:,} events (in-process ingest)",
                        total=params["events"],
                        count="",
                    )

                    last_print = [0]

                    def advance(
                        done: int, total: int, task: Any = task, last: list[int] = last_print
                    ) -> None:
                        progress.update(task, completed=done, count=f"{done:,}/{total:,}")
                        if not console.is_terminal and done - last[0] >= total // 20:
                            last[0] = done
                            console.print(f"  loaded {done:,}/{total:,} events")

                    params["progress"] = advance
                step = progress.add_task(f"{name}", total=1, count="")
                load_before = os.getloadavg()
                t0 = time.perf_counter()
                try:
                    res = module.run(params)
                except Exception as exc:  # keep going: report the failure in the table
                    res = {"name": name, "error": f"{type(exc).__name__}: {exc}"}
                    console.print(f"[red]{name} failed[/]\n{traceback.format_exc()}")
                res["wall_seconds"] = time.perf_counter() - t0
                res["loadavg_before"] = load_before
                res["loadavg_after"] = os.getloadavg()
                results.append(res)
                progress.update(step, total=1, completed=1, description=f"{name} done")
                if "error" not in res:
                    console.print(
                        f"{name}: {fmt_value(res['figure'], res['unit'])} "
                        f"(ceiling {fmt_value(res['ceiling'], res['unit'])}, "
                        f"ratio {fmt_ratio(res['ratio'])}) in {res['wall_seconds']:.0f} s"
                    )
                # Write as we go: a long run keeps what it measured if it is interrupted.
                _write(args.json, record)
    finally:
        dataset.close_all()
    record["finished"] = datetime.now(UTC).isoformat()
    _write(args.json, record)
    console.print(results_table(results))
    if args.markdown:
        print(markdown_table(results), flush=True)
    console.print(f"results written to {args.json}")
    return 1 if any("error" in r for r in results) else 0


def _write(path: str, record: dict[str, Any]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
