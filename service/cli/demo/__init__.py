"""`trainledger demo`: a 7B pretraining run on a small cluster, replayed through the ledger.

The demo starts from nothing: by default it starts its own service (`trainledger serve` in a
subprocess, with the embedded Valkey in a temporary directory, on a free port) and a local
webhook receiver (a small HTTP server on 127.0.0.1), then walks through the API step by step:

1. put the example rate card (`ratecard.json`, shipped in this package);
2. submit a plan for a 7-billion-parameter model (data prep, quality scoring, pretrain,
   midtrain, eval; pretraining sized by the 6·N·D rule);
3. create budgets (a monthly project cap and a monthly pretrain budget, 50/80/100 % and a
   forecast alert; the plan adds its own budgets over its window);
4. register a webhook to the local receiver;
5. replay 33 simulated days of usage from a cluster of 4 nodes × 8 H100 (a reserved block,
   on-demand nodes for side experiments, storage tiers, network, logs, scoring inference)
   in batches of ~5,000 events, with three incidents in it: the reserved block idle for two
   and a half days after a crash, an ablation that hung and kept its on-demand node for
   three weeks, and checkpoint rotation that broke so checkpoint storage grows every hour;
   progress is posted for the experiments, so the waste report can tell healthy from stuck;
   with it, a study on a second on-demand node (`study.py`): two mid-training mixes against a
   baseline, and a quality-scored against a flat-filtered data pipeline, each with a pilot
   run, whose evaluation results (settings: baseline, general/target benchmarks, tolerance)
   are posted to `POST /v1/evaluations` as the replay reaches each checkpoint's time (a batch
   of events also ends there), so the math/code mix's general benchmarks falling past the
   tolerance fire regression alerts while it still runs;
6. wait for the webhook deliveries and print what arrived;
7. print the spend by stage and category, plan against actual, the alerts (budget and
   regression), the waste findings and the study's cost-effect table, each with a line
   saying what it means, and end with the winner on cost per point and the rework exposure
   of the run that broke a general benchmark, both read from `GET /v1/reports/cost-effect`,
   and when its regression was alerted, read from `GET /v1/alerts`.

Everything is generated from a fixed seed relative to the start day (today − 33 days, UTC), so
every run gives the same figures apart from the dates; all events lie inside the ledger's
35-day deduplication window and none is in the future. The alerts of the two monthly budgets
follow the calendar (which month the 33 days fall in), so they differ with today's date;
those of the plan's budgets do not.

`--url`/`--token` run it against a service that is already running instead (under a fresh
project and rate-card name, so it never mixes with real data); `--keep` leaves the demo's
own service running at the end, for exploring.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import threading
import time
from contextlib import ExitStack, suppress
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import httpx
from rich.console import Console
from rich.markup import escape

# One idea a module: scenario (the run, the card, plan and budgets), simulation (its events),
# receiver (the webhook server), session + preparation / replay / report + walkthrough (the
# steps against a service), launcher (the demo's own service). Here: the command line.
from ...config import Settings
from .launcher import local_service
from .receiver import Receiver
from .scenario import (
    BATCH_EVENTS,
    CRASH,
    DAYS,
    EXAMPLE_CARD,
    HUNG,
    MAIN,
    RESERVED_SKU,
    USAGE_SKU,
    Scenario,
    demo_rate_card,
    load_example_card,
)
from .session import DemoError, DemoOutcome
from .simulation import generate_events
from .walkthrough import Demo, run_demo

__all__ = [
    "BATCH_EVENTS",
    "CRASH",
    "DAYS",
    "EXAMPLE_CARD",
    "HUNG",
    "MAIN",
    "RESERVED_SKU",
    "USAGE_SKU",
    "Demo",
    "DemoOutcome",
    "Receiver",
    "Scenario",
    "add_arguments",
    "demo_rate_card",
    "generate_events",
    "load_example_card",
    "run",
    "run_demo",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Replay 33 simulated days of a 7B pretraining run (with three incidents and a "
        "mid-training and data study) through the ledger and show the costs, plan against "
        "actual, the alerts, the waste it finds and what each point of a benchmark cost."
    )
    parser.add_argument(
        "--url",
        help="run against this already running service instead of starting one "
        "(under a fresh project name)",
    )
    parser.add_argument(
        "--token",
        help="admin token for --url (default: $TRAINLEDGER_TOKEN, else "
        "$TRAINLEDGER_DATA_DIR/admin-token)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the demo's service running at the end (until Ctrl-C) to explore it",
    )
    parser.add_argument(
        "--rate-card",
        type=Path,
        default=EXAMPLE_CARD,
        help="the rate card to start from (default: the example card shipped with the demo)",
    )


def _token_for(args: argparse.Namespace) -> str:
    settings = Settings.from_env()
    token = args.token or settings.token
    if token:
        return str(token).strip()
    path = settings.data_dir / "admin-token"
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise DemoError(
            f"no token for --url: pass --token or set TRAINLEDGER_TOKEN ({path}: {exc.strerror})"
        ) from exc


def _explore(console: Console, url: str, token: str, sc: Scenario) -> None:
    console.print()
    console.rule("[bold]Explore", align="left")
    console.print(
        f"  the demo's service keeps running at [bold]{url}[/] (API reference: {url}/docs)"
    )
    console.print(
        f"  dashboard: {dashboard_link(url, sc.project, token)}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"  export TL={url}")
    console.print(f"  export TOKEN={token}", markup=False, highlight=False, soft_wrap=True)
    auth = '-H "Authorization: Bearer $TOKEN"'
    q = f"project={sc.project}"
    for line in (
        f'curl -s "$TL/v1/costs?{q}&group_by=stage,sku&top=8" {auth}',
        f'curl -s "$TL/v1/reports/waste?{q}&from={sc.day(0)}&to={sc.day(DAYS - 1)}" {auth}',
        f'curl -s "$TL/v1/alerts?{q}" {auth}',
        f'curl -s "$TL/v1/webhooks/deliveries?{q}" {auth}',
        f'curl -s "$TL/v1/plans?{q}" {auth}',
        f'curl -s "$TL/v1/reports/cost-effect?{q}&format=csv" {auth}',
    ):
        console.print("  " + line, markup=False, highlight=False, soft_wrap=True)
    console.print("  Ctrl-C stops it and deletes its data.")
    console.print(
        f"  open the dashboard: {dashboard_link(url, sc.project, token)}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def dashboard_link(url: str, project: str, token: str) -> str:
    """The project's dashboard, signed in by its one-time `?token=` (kept in a cookie, then
    dropped from the address)."""
    return f"{url.rstrip('/')}/ui/{quote(project, safe='')}?token={quote(token, safe='')}"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwind, so the demo's own service is stopped


def run(args: argparse.Namespace) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _run(args)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 100  # a log or a pipe: wide enough for the tables
    try:
        card = load_example_card(args.rate_card)
    except (OSError, ValueError) as exc:
        console.print(f"[red]cannot read the rate card {args.rate_card}[/]: {exc}")
        return 1
    receiver = Receiver().start()
    try:
        if args.url:
            stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
            name = f"demo-{stamp}-{secrets.token_hex(2)}"
            sc = Scenario.for_now(f"llm-7b-{name}", name)
            outcome = run_demo(args.url, _token_for(args), sc, receiver, console, card)
            if outcome.webhook_id is not None:
                with suppress(httpx.HTTPError):
                    httpx.delete(
                        f"{args.url.rstrip('/')}/v1/webhooks/{outcome.webhook_id}",
                        headers={"Authorization": f"Bearer {_token_for(args)}"},
                        trust_env=False,
                    )
            console.print(
                f"\n  the data stays in project [cyan]{sc.project}[/] (rate card {sc.card})"
            )
            return 0
        with ExitStack() as stack:
            with console.status(
                "starting a throw-away trainledger (embedded Valkey, temporary data) ..."
            ):
                url, token, data_dir = stack.enter_context(local_service())
            console.print(
                f"started trainledger at {url} (data in {data_dir}, removed at the end) and a "
                f"webhook receiver at {receiver.url}"
            )
            sc = Scenario.for_now("llm-7b", "default")
            run_demo(url, token, sc, receiver, console, card)
            if not args.keep:
                console.print(
                    "\n  run [bold]trainledger demo --keep[/] to keep its service running and "
                    "open its dashboard"
                )
            if args.keep:
                _explore(console, url, token, sc)
                with suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
        return 0
    except DemoError as exc:
        console.print(f"[red]demo failed[/]: {escape(str(exc))}")
        return 1
    except httpx.HTTPError as exc:
        console.print(f"[red]demo failed[/]: cannot reach the service ({escape(str(exc))})")
        return 1
    finally:
        receiver.stop()
