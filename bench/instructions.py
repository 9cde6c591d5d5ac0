"""Instructions per unit of the service's hot paths, counted by callgrind: a noise-free A/B.

    .venv/bin/python -m bench.instructions                        # this tree
    .venv/bin/python -m bench.instructions --tree ../before --tree .   # before/after, one table
    .venv/bin/python -m bench.instructions --no-valgrind          # the phases once, no counts
    .venv/bin/python -m bench.instructions --keep /tmp/cg         # keep the dumps: then
    callgrind_annotate --inclusive=yes /tmp/cg/<commit>/cg.out.3  # where a phase's count goes

Each tree runs in its own process under `valgrind --tool=callgrind`, with that tree's
`.venv/bin/python` (the compiled core included) and from that tree's root, so a tree of the
old layout (`service.*` import names, before issue 16) works as well as the current one
(`trainledger.*`). In the process: an embedded Valkey (its own process: Valkey's work is not
counted), `create_app` as `trainledger serve` runs it (folding left to the folding process,
`TRAINLEDGER_FOLD_IN_WORKERS=0`), its start-up run through the ASGI lifespan, then the
background loops (sweep, webhook worker, reachability) cancelled so that no timer adds work to a
phase, and `runtime.tune_garbage_collector()` as `serve` calls it. Requests go straight to the
ASGI app (every middleware, the auth, the route; no socket and no uvicorn). Instrumentation is
off until the warm-up (rate card, budgets, one request of each kind, one fold) is done; each
phase is then bracketed by callgrind client requests (zero, dump; a tiny C shim built with
`cc` from `valgrind/callgrind.h`), and an empty phase measures the bracket itself, which is
subtracted. Phases and units:

    empty        the bracket alone (subtracted from the others)
    healthz      GET /healthz                                        per request
    single       POST /v1/events, one JSON event                      per request
    json         POST /v1/events, 5,000-event JSON batches            per event
    msgpack      the same as msgpack                                  per event
    budgets      JSON batches on a project keeping 3 budgets          per event
    fold         `folding.settle` of every batch of the phases above  per event folded
    queries      GET /v1/costs, the 7 group-bys of bench/queries.py   per query

The counts are the Python process's instructions (interpreter, C extensions, the garbage
collector); they repeat to a fraction of a per cent, unlike wall-clock figures on a shared
machine. They do not see Valkey, cache misses or waiting. `--json` keeps everything, with the
garbage collector's collections per phase and the objects alive after start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
CHILD = HERE.parent / "instructions_child.py"  # run by each tree's python, from its root

PHASES: tuple[tuple[str, str, str], ...] = (
    ("empty", "the bracket alone", "phase"),
    ("healthz", "GET /healthz", "request"),
    ("single", "POST one JSON event", "request"),
    ("json", "POST 5,000-event JSON batch", "event"),
    ("msgpack", "POST 5,000-event msgpack batch", "event"),
    ("budgets", "POST JSON batch, 3 budgets", "event"),
    ("fold", "fold (settle) of those batches", "event"),
    ("queries", "GET /v1/costs (7 group-bys)", "query"),
)

SHIM_C = r"""
#include <valgrind/callgrind.h>
int tl_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
void tl_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void tl_zero(void) { CALLGRIND_ZERO_STATS; }
void tl_dump(const char *why) { CALLGRIND_DUMP_STATS_AT(why); }
"""


def build_shim(out_dir: Path) -> Path:
    """The client requests as a shared library for ctypes (no-ops outside valgrind)."""
    src = out_dir / "tl_callgrind.c"
    lib = out_dir / "tl_callgrind.so"
    src.write_text(SHIM_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(lib), str(src)], check=True)
    return lib


def layout_of(tree: Path) -> str:
    """The import name of the tree's service package: `trainledger` since issue 16's
    feature folders (service/stores.py), `service` before."""
    return "trainledger" if (tree / "service" / "stores.py").exists() else "service"


def commit_of(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.M)
_TRIGGER = re.compile(r"^desc: Trigger: Client Request: (\S+)", re.M)


def read_dumps(out_dir: Path) -> dict[str, int]:
    """Instructions (Ir) of each dump, by the phase name its client request gave."""
    counts: dict[str, int] = {}
    for path in out_dir.glob("cg.out.*"):
        text = path.read_text(errors="replace")
        trigger, totals = _TRIGGER.search(text), _TOTALS.search(text)
        if trigger and totals:
            counts[trigger.group(1)] = int(totals.group(1))
    return counts


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One tree, in its own process (under callgrind unless --no-valgrind)."""
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} missing: run `python3 dev.py check` in {tree} first")
    out_dir = Path(tempfile.mkdtemp(prefix="tl-bench-instr-"))
    try:
        child_args = {
            "out": str(out_dir),
            "layout": layout_of(tree),
            "shim": None if args.no_valgrind else str(build_shim(out_dir)),
            "batches": args.batches,
            "size": args.size,
            "requests": args.requests,
            "query_rounds": args.query_rounds,
        }
        # `-c`: the tree's root, not bench/, heads sys.path (bench/profile.py is no stdlib).
        boot = "import runpy, sys; sys.argv = sys.argv[1:]; "
        boot += "runpy.run_path(sys.argv[0], run_name='__main__')"
        cmd = [str(python), "-c", boot, str(CHILD), json.dumps(child_args)]
        if not args.no_valgrind:
            cmd = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out_dir}/cg.out",
                "--dump-line=no",
                "--dump-instr=no",
                *cmd,
            ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        print(f"{tree} ({child_args['layout']} layout): {' '.join(cmd[:2])} …", file=sys.stderr)
        log = out_dir / "child.log"
        with log.open("wb") as sink:
            done = subprocess.run(cmd, cwd=tree, env=env, stdout=sink, stderr=subprocess.STDOUT)
        if done.returncode:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise SystemExit(f"{tree}: the phases failed (exit {done.returncode}):\n{tail}")
        report: dict[str, Any] = json.loads((out_dir / "phases.json").read_text())
        report |= {"tree": str(tree), "commit": commit_of(tree)}
        counts = read_dumps(out_dir)
        bracket = counts.get("empty", 0)
        for phase in report["phases"]:
            ir = counts.get(phase["name"])
            phase["instructions"] = ir
            net = None if ir is None or phase["name"] == "empty" else ir - bracket
            phase["per_unit"] = None if net is None else net / phase["units"]
            phase["us_per_unit"] = 1e6 * phase["seconds"] / phase["units"]
        return report
    finally:
        if args.keep:
            kept = args.keep / f"{commit_of(tree)}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(out_dir, kept)
            print(f"callgrind's dumps of {tree}: {kept}/cg.out.*", file=sys.stderr)
        shutil.rmtree(out_dir, ignore_errors=True)


def _column_table(reports: list[dict[str, Any]], value: Any, title: str, fmt: str) -> list[str]:
    heads = [f"{r['commit']} ({r['layout']})" for r in reports]
    lines = [f"| {title} | unit | " + " | ".join(heads) + " | last / first |"]
    lines.append("| --- | --- |" + " ---: |" * (len(reports) + 1))
    for i, (name, label, unit) in enumerate(PHASES):
        if name == "empty":
            continue
        values = [value(r["phases"][i]) for r in reports]
        cells = ["n/a" if v is None else format(v, fmt) for v in values]
        ratio = "—"
        if len(values) > 1 and values[0] and values[-1] is not None:
            ratio = f"{100 * (values[-1] / values[0] - 1):+.1f} %"
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + f" | {ratio} |")
    return [*lines, ""]


def table(reports: list[dict[str, Any]]) -> str:
    """Markdown: per unit and phase, one column per tree, the last against the first: the
    instructions (or, without valgrind, the wall-clock µs: noise), and Valkey's calls."""
    if any(p["per_unit"] is not None for r in reports for p in r["phases"]):
        lines = _column_table(reports, lambda p: p["per_unit"], "instructions", ",.0f")
    else:
        lines = _column_table(reports, lambda p: p["us_per_unit"], "µs, wall clock", ",.1f")
    lines += _column_table(
        reports, lambda p: p["valkey_calls"] / p["units"], "Valkey commands", ",.3f"
    )
    for r in reports:
        s = r["started"]
        lines.append(
            f"{r['commit']}: after start-up {s['objects']:,} objects tracked by the collector "
            f"(then frozen: {s['frozen']:,}), {s['modules']:,} modules; collections during the "
            "phases (gen 0/1/2): "
            + ", ".join(f"{p['name']} {'/'.join(map(str, p['collections']))}" for p in r["phases"])
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", type=Path, help="a work tree (repeatable)")
    parser.add_argument("--no-valgrind", action="store_true", help="run the phases once, no counts")
    parser.add_argument("--batches", type=int, default=4, help="batches per batch phase")
    parser.add_argument("--size", type=int, default=5_000, help="events per batch")
    parser.add_argument("--requests", type=int, default=100, help="requests per request phase")
    parser.add_argument("--query-rounds", type=int, default=3, help="rounds of the 7 queries")
    parser.add_argument("--json", type=Path, help="write the reports here")
    parser.add_argument(
        "--keep", type=Path, help="keep callgrind's dumps in DIR/<commit>/ (callgrind_annotate)"
    )
    args = parser.parse_args()
    if not args.no_valgrind and shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install -y valgrind)")
    reports = [run_tree(t.resolve(), args) for t in (args.tree or [ROOT])]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(reports, indent=2))
    print(table(reports))


if __name__ == "__main__":
    main()
