"""`trainledger demo`: a 7B pretraining run on a small cluster, replayed through the ledger.

The demo starts from nothing: by default it starts its own service (`trainledger serve` in a
subprocess, with the embedded Valkey in a temporary directory, on a free port) and a local
webhook receiver (a small HTTP server on 127.0.0.1), then walks through the API step by step:

1. put the example rate card (`docs/examples/ratecard.json`);
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
6. wait for the webhook deliveries and print what arrived;
7. print the spend by stage and category, plan against actual, the alerts, and the waste
   findings, each with a line saying what it means.

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
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ..webhooks.signing import verify_standard

__all__ = [
    "BATCH_EVENTS",
    "DAYS",
    "Demo",
    "DemoOutcome",
    "Receiver",
    "Scenario",
    "add_arguments",
    "demo_rate_card",
    "generate_events",
    "run",
    "run_demo",
]

EXAMPLE_CARD = Path(__file__).resolve().parent.parent / "docs" / "examples" / "ratecard.json"
DAYS = 33  # simulated days, ending at today's midnight (UTC): inside the 35-day dedup window
BATCH_EVENTS = 5_000
SEED = 7
USAGE_SKU = "gpu.h100.reserved.used.hour"
RESERVED_SKU = "gpu.h100.reserved.hour"

# The cluster and the run (see `generate_events`).
NODES = 4
GPUS_PER_NODE = 8
PARAMETERS = 7_000_000_000
PLANNED_TOKENS = 1_000_000_000_000
PEAK_FLOPS = Decimal("989e12")  # H100 SXM dense BF16
PLANNED_MFU = Decimal("0.4")
ACTUAL_MFU = Decimal("0.38")  # what the run achieves: a little below plan
CHECKPOINT_GB = 120  # 7B weights + fp32 master copy + Adam moments, rounded up
KEEP_LAST = 3

# Timeline, in days after the start day (day 0).
PRETRAIN_START = 6
CRASH = ((17, 2), (19, 14))  # (day, hour) the job died .. (day, hour) it was restarted
HANG_START = 12  # the learning-rate ablation starts (planned: 2 days)
HANG_LAST_PROGRESS = (13, 6)  # its last progress report; then it hangs
CKPT_BREAK_DAY = 24  # checkpoint rotation stops deleting old checkpoints
PLAN_STAGES = ("data_prep", "quality_scoring", "pretrain", "midtrain", "eval")
MAIN = "pretrain-7b-main"
HUNG = "ablation-lr-warmup"
HEALTHY = "ablation-mix-b"

MEANING = {
    "reserved_idle": "The reserved block is paid for every hour whether jobs run or not: these "
    "are the GPU-hours paid for and not used (the job died at night and nobody restarted it).",
    "experiment_no_progress": "This experiment kept spending but has reported no progress: a "
    "hung job holding on-demand GPUs long past its planned two days.",
    "experiment_stalled": "This experiment still reports, but its metric stopped improving "
    "while it keeps spending.",
    "checkpoint_growth": "More checkpoint storage than the policy expects (size × keep_last): "
    "old checkpoints are no longer deleted, so the bill grows every day.",
    "storage_past_retention": "Data kept past its class's retention period.",
    "cross_region_repull": "The same dataset copied to the same region again.",
    "log_ingest_over_cap": "Logs ingested above the daily cap.",
    "log_past_retention": "Logs kept past their retention period.",
}


# --------------------------------------------------------------------------------------------
# The scenario: rate card, plan, budgets, events, progress — pure data, no I/O
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """Names and dates of one demo run. `start` is midnight UTC of simulated day 0."""

    project: str
    card: str
    start: datetime

    @classmethod
    def for_now(cls, project: str, card: str, now: datetime | None = None) -> Scenario:
        today = (now or datetime.now(UTC)).astimezone(UTC)
        midnight = today.replace(hour=0, minute=0, second=0, microsecond=0)
        return cls(project, card, midnight - timedelta(days=DAYS))

    def at(self, day: int, hour: int = 0, minute: int = 0) -> datetime:
        return self.start + timedelta(days=day, hours=hour, minutes=minute)

    def day(self, day: int) -> date:
        return (self.start + timedelta(days=day)).date()

    @property
    def end(self) -> datetime:
        """The end of the replay: today's midnight (every event is before it)."""
        return self.at(DAYS)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_example_card(path: Path = EXAMPLE_CARD) -> dict[str, Any]:
    card: dict[str, Any] = json.loads(path.read_text())
    return card


def demo_rate_card(example: Mapping[str, Any], start: datetime) -> dict[str, Any]:
    """The example card, plus the usage SKU of the reserved block when it lacks one.

    A reservation is posted as what is paid (`gpu.h100.reserved.hour`, fixed) and its use on
    `gpu.h100.reserved.used.hour` at price 0 (the scheduler's accounting), so the ledger can
    tell paid from used. The card takes effect no later than the day before the replay.
    """
    card: dict[str, Any] = json.loads(json.dumps(dict(example)))  # a deep copy
    codes = {s["code"] for s in card["skus"]}
    if USAGE_SKU not in codes:
        card["skus"].append(
            {
                "code": USAGE_SKU,
                "category": "compute",
                "unit": "gpu_hour",
                "unit_price": "0",
                "description": "GPU-hours of the reserved block actually used by jobs (posted by "
                "the scheduler; the block itself is billed on gpu.h100.reserved.hour).",
                "source": "Not a price: usage accounting for the idle-reservation check.",
            }
        )
    latest = start - timedelta(days=1)
    effective = datetime.fromisoformat(str(card["effective_from"]).replace("Z", "+00:00"))
    if effective > latest:
        card["effective_from"] = _iso(latest)
    return card


def plan_body(sc: Scenario) -> dict[str, Any]:
    """The 7B plan: 8 weeks from the start day; pretraining sized by 6·N·D."""
    hot_raw = 30_000  # GB of raw crawl kept hot
    return {
        "project": sc.project,
        "name": "7b-base",
        "rate_card": sc.card,
        "currency": "USD",
        "window_start": _iso(sc.start),
        "window_end": _iso(sc.at(56)),
        "region": "us",
        "description": "7B dense model, 1T tokens, on a reserved block of 4 x 8 H100",
        "stages": [
            {
                "stage": "data_prep",
                "label": "licensed text, crawl copy, dedup (1 node)",
                "start_day": "0",
                "duration_days": "4",
                "contingency_pct": "10",
                "resources": [
                    {"sku": "gpu.h100.hour", "quantity": str(GPUS_PER_NODE * 24 * 4)},
                    {"sku": "data.license.gb", "quantity": "200"},
                    {"sku": "network.cross_region.gb", "quantity": "36000"},
                ],
                "overheads": [
                    {"sku": "storage.hot.gb_day", "quantity": str(hot_raw * 56 + 15_000 * 10)},
                    {"sku": "storage.archive.gb_day", "quantity": str(200_000 * 56)},
                ],
            },
            {
                "stage": "quality_scoring",
                "label": "150B tokens through a hosted 8B judge",
                "start_day": "2",
                "duration_days": "6",
                "contingency_pct": "10",
                "resources": [{"sku": "inference.quality_score.mtok", "quantity": "150000"}],
            },
            {
                "stage": "pretrain",
                "label": "7B x 1T tokens on 32 reserved H100",
                "start_day": str(PRETRAIN_START),
                "duration_days": "39",
                "contingency_pct": "10",
                "model": {
                    "parameters": PARAMETERS,
                    "tokens": PLANNED_TOKENS,
                    "accelerator_sku": RESERVED_SKU,
                    "peak_flops_per_accelerator": "989e12",
                    "mfu": str(PLANNED_MFU),
                },
                "overheads": [
                    {"sku": "storage.checkpoint.gb_day", "quantity": str(CHECKPOINT_GB * 3 * 39)},
                    {"sku": "storage.hot.gb_day", "quantity": str(4_000 * 50)},
                    {"sku": "logs.ingest.gb", "quantity": str(48 * 39)},
                    {"sku": "ops.engineer.hour", "quantity": str(2 * 39)},
                    # side experiments: three 2-day ablations on one on-demand node
                    {"sku": "gpu.h100.hour", "quantity": str(3 * 2 * 24 * GPUS_PER_NODE)},
                ],
            },
            {
                "stage": "midtrain",
                "label": "7B x 60B tokens of math/code-heavy mix",
                "start_day": "45",
                "duration_days": "3",
                "contingency_pct": "10",
                "model": {
                    "parameters": PARAMETERS,
                    "tokens": 60_000_000_000,
                    "accelerator_sku": RESERVED_SKU,
                    "peak_flops_per_accelerator": "989e12",
                    "mfu": str(PLANNED_MFU),
                },
            },
            {
                "stage": "eval",
                "label": "benchmarks on checkpoints (1 node)",
                "resources": [
                    {"sku": "gpu.h100.hour", "quantity": "1600"},
                    {"sku": "storage.warm.gb_day", "quantity": str(2_000 * 56)},
                ],
            },
        ],
    }


def budget_bodies(sc: Scenario) -> list[dict[str, Any]]:
    return [
        {
            "project": sc.project,
            "name": "monthly cap",
            "amount": "150000",
            "period": "monthly",
            "thresholds": [50, 80, 100],
            "forecast": {"min_elapsed_pct": 10},
        },
        {
            "project": sc.project,
            "name": "pretrain monthly",
            "amount": "120000",
            "period": "monthly",
            "scope": {"stage": "pretrain"},
            "thresholds": [50, 80, 100],
            "forecast": {"min_elapsed_pct": 10},
        },
    ]


def _crashed(day: int, hour: int) -> bool:
    return CRASH[0] <= (day, hour) < CRASH[1]


def _checkpoint_gb(day: int, hour: int) -> int:
    """GB of checkpoints stored during an hour of pretraining."""
    if day < CKPT_BREAK_DAY:
        return CHECKPOINT_GB * KEEP_LAST
    hours_broken = (
        (day - CKPT_BREAK_DAY) * 24 + hour + 1
    )  # one new checkpoint an hour, none deleted
    return CHECKPOINT_GB * (KEEP_LAST + hours_broken)


def generate_events(sc: Scenario) -> list[dict[str, Any]]:
    """Every usage event of the 33 simulated days, in time order. Deterministic (seeded)."""
    rng = random.Random(SEED)
    out: list[tuple[datetime, dict[str, Any]]] = []

    def add(
        ident: str,
        when: datetime,
        sku: str,
        quantity: str,
        stage: str,
        *,
        experiment: str = "",
        owner: str = "",
        tags: dict[str, str] | None = None,
    ) -> None:
        ev: dict[str, Any] = {
            "id": ident,
            "time": _iso(when),
            "project": sc.project,
            "sku": sku,
            "quantity": quantity,
            "stage": stage,
        }
        if experiment:
            ev["experiment"] = experiment
        if owner:
            ev["owner"] = owner
        if tags:
            ev["tags"] = tags
        out.append((when, ev))

    day0 = sc.day(0).isoformat()
    data = {"team": "data"}
    # --- data prep: licence, one copy of the crawl, dedup on an on-demand node -------------
    add(
        "license-corpus", sc.at(0, 9), "data.license.gb", "200", "data_prep", owner="ana", tags=data
    )
    add(
        "copy-crawl",
        sc.at(0, 1),
        "network.cross_region.gb",
        "36000",
        "data_prep",
        owner="ana",
        tags={**data, "dataset": "crawl-2026-09", "dest_region": "us-east-1"},
    )
    for d in range(4):
        for h in range(24):
            for g in range(GPUS_PER_NODE):
                add(
                    f"dedup-d{d:02d}h{h:02d}-g{g}",
                    sc.at(d, h),
                    "gpu.h100.hour",
                    "1",
                    "data_prep",
                    owner="ana",
                    tags=data,
                )
    # --- quality scoring: 4 workers calling a hosted judge, a request batch every 10 min ---
    for d in range(2, 8):
        for slot in range(144):
            for w in range(4):
                mtok = Decimal(rng.randint(38_000_000, 49_000_000)).scaleb(-6)
                add(
                    f"score-d{d:02d}s{slot:03d}-w{w}",
                    sc.at(d, 0, slot * 10 + w),
                    "inference.quality_score.mtok",
                    str(mtok),
                    "quality_scoring",
                    owner="ana",
                    tags={**data, "judge": "llama-3.1-8b"},
                )
    # --- storage, posted daily as GB-days ---------------------------------------------------
    archived = (sc.start - timedelta(days=120)).date().isoformat()
    shards_made = sc.day(PRETRAIN_START).isoformat()
    for d in range(DAYS):
        when = sc.at(d, 23, 30)
        add(
            f"hot-raw-d{d:02d}",
            when,
            "storage.hot.gb_day",
            "30000",
            "data_prep",
            owner="ana",
            tags={**data, "data_class": "raw", "created": day0, "dataset": "crawl-2026-09"},
        )
        add(
            f"archive-d{d:02d}",
            when,
            "storage.archive.gb_day",
            "200000",
            "data_prep",
            owner="ana",
            tags={**data, "data_class": "raw", "created": archived, "dataset": "crawl-2025"},
        )
        add(
            f"warm-evalsets-d{d:02d}",
            when,
            "storage.warm.gb_day",
            "2000",
            "eval",
            owner="dee",
            tags={"team": "eval", "data_class": "other", "dataset": "eval-suites"},
        )
        if d < 10:
            add(
                f"hot-dedup-d{d:02d}",
                when,
                "storage.hot.gb_day",
                "15000",
                "data_prep",
                owner="ana",
                tags={
                    **data,
                    "data_class": "intermediate",
                    "created": day0,
                    "dataset": "dedup-out",
                },
            )
        if d >= PRETRAIN_START:
            add(
                f"hot-shards-d{d:02d}",
                when,
                "storage.hot.gb_day",
                "4000",
                "pretrain",
                owner="ben",
                tags={
                    "team": "pretrain",
                    "data_class": "intermediate",
                    "created": shards_made,
                    "dataset": "mix-v3-tokenized",
                },
            )
    # --- pretraining on the reserved block ----------------------------------------------------
    pre = {"team": "pretrain"}
    for d in range(PRETRAIN_START, DAYS):
        for h in range(24):
            when = sc.at(d, h)
            for n in range(NODES):
                node = f"gpu-node-{n + 1}"
                # The capacity block bills every node every hour, used or not.
                add(
                    f"block-d{d:02d}h{h:02d}-n{n}",
                    when,
                    RESERVED_SKU,
                    str(GPUS_PER_NODE),
                    "pretrain",
                    owner="ops",
                    tags={**pre, "node": node},
                )
                if _crashed(d, h):
                    continue
                for g in range(GPUS_PER_NODE):
                    add(
                        f"train-d{d:02d}h{h:02d}-n{n}g{g}",
                        when,
                        USAGE_SKU,
                        "1",
                        "pretrain",
                        experiment=MAIN,
                        owner="ben",
                        tags={**pre, "node": node},
                    )
                gb = Decimal(rng.randint(1_800_000, 2_200_000)).scaleb(-3)
                add(
                    f"fabric-d{d:02d}h{h:02d}-n{n}",
                    when,
                    "network.intra_cluster.gb",
                    str(gb),
                    "pretrain",
                    experiment=MAIN,
                    owner="ben",
                    tags=pre,
                )
                logs = Decimal(rng.randint(450, 550)).scaleb(-3)
                add(
                    f"logs-d{d:02d}h{h:02d}-n{n}",
                    when,
                    "logs.ingest.gb",
                    str(logs),
                    "pretrain",
                    experiment=MAIN,
                    owner="ben",
                    tags=pre,
                )
            gb_day = Decimal(_checkpoint_gb(d, h)) / 24
            add(
                f"ckpt-d{d:02d}h{h:02d}",
                when,
                "storage.checkpoint.gb_day",
                str(gb_day.normalize()),
                "pretrain",
                experiment=MAIN,
                owner="ben",
                tags={**pre, "data_class": "checkpoint"},
            )
        add(
            f"logstore-d{d:02d}",
            sc.at(d, 23, 45),
            "logs.retention.gb_day",
            str(48 * (d - PRETRAIN_START + 1)),
            "pretrain",
            owner="ben",
            tags=pre,
        )
        add(
            f"oncall-d{d:02d}",
            sc.at(d, 18),
            "ops.engineer.hour",
            "2",
            "pretrain",
            owner="ops",
            tags=pre,
        )
    # --- side experiments on one on-demand node -----------------------------------------------
    research = {"team": "research"}
    for d in range(8, 11):  # healthy: three days, reports progress, finishes
        for h in range(24):
            for g in range(GPUS_PER_NODE):
                add(
                    f"mixb-d{d:02d}h{h:02d}-g{g}",
                    sc.at(d, h),
                    "gpu.h100.hour",
                    "1",
                    "pretrain",
                    experiment=HEALTHY,
                    owner="chen",
                    tags=research,
                )
    for d in range(HANG_START, DAYS):  # planned for 2 days; hangs after day 13 and never stops
        for h in range(24):
            for g in range(GPUS_PER_NODE):
                add(
                    f"lrwu-d{d:02d}h{h:02d}-g{g}",
                    sc.at(d, h),
                    "gpu.h100.hour",
                    "1",
                    "pretrain",
                    experiment=HUNG,
                    owner="chen",
                    tags=research,
                )
    # --- evaluation of the latest checkpoint, four times a day --------------------------------
    for d in range(PRETRAIN_START + 1, DAYS):
        for h in (2, 8, 14, 20):
            add(
                f"eval-d{d:02d}h{h:02d}",
                sc.at(d, h),
                "gpu.h100.hour",
                str(GPUS_PER_NODE),
                "eval",
                owner="dee",
                tags={"team": "eval"},
            )
    out.sort(key=lambda pair: (pair[0], pair[1]["id"]))
    return [ev for _, ev in out]


def _loss(hours: float) -> Decimal:
    """A smoothly falling eval loss (strictly decreasing at 4 decimals over the run)."""
    value = Decimal("2.05") + Decimal("1.9") / (Decimal(1) + Decimal(str(hours)) / Decimal(40))
    return value.quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN)


def experiment_progress(sc: Scenario) -> list[dict[str, Any]]:
    """Progress reports (eval loss) with their simulated times, in time order."""
    reports: list[dict[str, Any]] = []
    for d in range(PRETRAIN_START, DAYS):
        for h in (0, 6, 12, 18):
            if _crashed(d, h):
                continue
            hours = (d - PRETRAIN_START) * 24 + h
            reports.append(
                {
                    "experiment": MAIN,
                    "metric": "eval_loss",
                    "value": str(_loss(hours)),
                    "time": _iso(sc.at(d, h, 30)),
                }
            )
    for d in range(8, 11):
        for h in (6, 12, 18):
            hours = (d - 8) * 24 + h
            reports.append(
                {
                    "experiment": HEALTHY,
                    "metric": "eval_loss",
                    "value": str(_loss(hours) + Decimal("0.4")),
                    "time": _iso(sc.at(d, h, 30)),
                }
            )
    for i, (d, h) in enumerate(((12, 6), (12, 18), HANG_LAST_PROGRESS)):
        reports.append(
            {
                "experiment": HUNG,
                "metric": "eval_loss",
                "value": str(Decimal("3.1") - i * Decimal("0.05")),
                "time": _iso(sc.at(d, h, 30)),
            }
        )
    reports.sort(key=lambda r: str(r["time"]))
    return reports


def pretrain_tokens_done(events: Sequence[Mapping[str, Any]]) -> int:
    """Tokens the main run processed: its GPU-hours at the achieved MFU, by 6·N·D backwards."""
    gpu_hours = sum(Decimal(e["quantity"]) for e in events if e["sku"] == USAGE_SKU)
    tokens = gpu_hours * 3600 * PEAK_FLOPS * ACTUAL_MFU / (6 * PARAMETERS)
    return min(int(tokens), PLANNED_TOKENS)


# --------------------------------------------------------------------------------------------
# The local webhook receiver
# --------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    webhook_id: str
    body: dict[str, Any]
    signed: bool
    received_at: datetime


class Receiver:
    """A real HTTP server on 127.0.0.1 that keeps every webhook delivery it is sent."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.secret: str | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._keep(headers, raw)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the demo prints what arrived itself

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hooks/trainledger"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _keep(self, headers: dict[str, str], raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        signed = False
        if self.secret is not None:
            with suppress(ValueError):
                signed = verify_standard(self.secret, headers, raw)
        with self._lock:
            self.deliveries.append(
                Delivery(headers.get("webhook-id", ""), body, signed, datetime.now(UTC))
            )

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)


# --------------------------------------------------------------------------------------------
# The demo itself, against any running service
# --------------------------------------------------------------------------------------------


class DemoError(Exception):
    """A step failed; the message says which and why."""


@dataclass
class DemoOutcome:
    scenario: Scenario
    events: list[dict[str, Any]]
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    plan_id: str = ""
    webhook_id: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    waste: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    card: dict[str, Any] = field(default_factory=dict)


def money(value: str | Decimal | int, currency: str = "USD") -> str:
    """`USD 1,234.57`: rounded half-even to cents for display (the ledger keeps nanos)."""
    return f"{currency} {num(value)}"


def num(value: str | Decimal | int) -> str:
    amount = Decimal(value).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    return f"{amount:,.2f}"


def _pct(value: str | Decimal) -> str:
    return f"{Decimal(value) * 100:.1f} %"


def _short_budget(name: str) -> str:
    return name.replace("plan 7b-base / ", "plan: ").replace("plan 7b-base", "plan: whole")


def _table(*columns: str) -> Table:
    """A compact table; columns named with a leading '>' are right-aligned (figures)."""
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in columns:
        right = col.startswith(">")
        table.add_column(col.lstrip(">"), justify="right" if right else "left", no_wrap=right)
    return table


class Demo:
    """Runs the steps against `base_url` with an admin token, printing to `console`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        scenario: Scenario,
        receiver: Receiver | None,
        console: Console,
        card: Mapping[str, Any],
        delivery_timeout_s: float = 30.0,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=120.0,
            trust_env=False,
        )
        self.base_url = base_url.rstrip("/")
        self.sc = scenario
        self.receiver = receiver
        self.console = console
        self.example_card = card
        self.delivery_timeout_s = delivery_timeout_s
        self.outcome = DemoOutcome(scenario, generate_events(scenario))

    # helpers -------------------------------------------------------------------------------

    def _call(self, method: str, path: str, step: str, **kwargs: Any) -> Any:
        for _ in range(10):
            response = self.http.request(method, path, **kwargs)
            if response.status_code == 503 and "retry-after" in response.headers:
                time.sleep(min(float(response.headers["retry-after"]), 5.0))
                continue
            break
        if response.status_code >= 400:
            raise DemoError(
                f"{step}: {method} {path} answered {response.status_code}: {response.text[:800]}"
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def heading(self, number: int, title: str, why: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]{number}. {title}", align="left")
        self.console.print(f"[dim]{why}[/]")

    def say(self, text: str) -> None:
        self.console.print(text)

    def means(self, text: str) -> None:
        self.console.print(f"  [bold green]what it means:[/] {text}")

    @property
    def project_q(self) -> dict[str, str]:
        return {"project": self.sc.project}

    # steps ---------------------------------------------------------------------------------

    def run(self) -> DemoOutcome:
        self.intro()
        self.rate_card()
        self.plan()
        self.budgets()
        self.webhook()
        self.replay()
        self.progress()
        self.wait_for_deliveries()
        self.spend()
        self.plan_vs_actual()
        self.alerts()
        self.waste()
        self.wrap_up()
        return self.outcome

    def intro(self) -> None:
        sc = self.sc
        self.say(
            f"[bold]trainledger demo[/]: {DAYS} simulated days ({sc.day(0)} .. "
            f"{sc.day(DAYS - 1)}) of a 7B pretraining run on {NODES} nodes × {GPUS_PER_NODE} "
            f"H100, project [cyan]{sc.project}[/], replayed into {self.base_url}"
        )

    def rate_card(self) -> None:
        self.heading(
            1,
            "Rate card",
            "Every event is priced with the card in effect at its own time; this one holds public "
            "list prices (GPUs, storage tiers, transfer, inference, logs, people), sources named.",
        )
        card = demo_rate_card(self.example_card, self.sc.start)
        self.outcome.card = card
        version = self._call("PUT", f"/v1/rate-cards/{self.sc.card}", "rate card", json=card)
        if self.sc.card != "default":
            self._call(
                "PUT",
                f"/v1/projects/{self.sc.project}",
                "project",
                json={"rate_card": self.sc.card},
            )
        self.say(
            f"  PUT /v1/rate-cards/{self.sc.card} -> version {version['version']}: "
            f"{len(card['skus'])} SKUs in {card['currency']}"
        )
        if len(card["skus"]) > len(self.example_card["skus"]):
            self.say(
                f"  (docs/examples/ratecard.json plus [cyan]{USAGE_SKU}[/] at 0: the scheduler "
                "posts there the reserved GPU-hours jobs use, so paid can be told from used)"
            )
        prices = {s["code"]: Decimal(s["unit_price"]) for s in card["skus"]}
        self.say(
            f"  e.g. H100 on demand {money(prices['gpu.h100.hour'])} per GPU-hour; reserved "
            f"{money(prices[RESERVED_SKU])}, paid whether used or not; checkpoint storage "
            f"{money(prices['storage.checkpoint.gb_day'] * 1000)} per TB-day"
        )

    def plan(self) -> None:
        self.heading(
            2,
            "Plan",
            "What the run should cost before it spends. Pretraining is sized in model terms: "
            "FLOPs = 6 × parameters × tokens; GPU-hours = FLOPs ÷ (peak FLOP/s × MFU) ÷ 3600.",
        )
        record = self._call("POST", "/v1/plans", "plan", json=plan_body(self.sc))
        self.outcome.plan_id = record["id"]
        est = record["estimate"]
        table = _table("stage", "what", ">GPU-hours", ">days", ">USD (with 10 %)")
        for stage in est["stages"]:
            days = "whole window"
            if stage["start_day"] is not None:
                days = f"{Decimal(stage['start_day']):g} – {Decimal(stage['end_day']):g}"
            table.add_row(
                stage["stage"],
                stage["label"] or "",
                f"{Decimal(stage['accelerator_hours']):,.0f}",
                days,
                num(stage["total"]),
            )
        table.add_row(
            "[bold]plan",
            "8 weeks from day 0",
            f"{Decimal(est['accelerator_hours']):,.0f}",
            "",
            f"[bold]{num(est['total'])}",
        )
        self.console.print(table)
        der = next(s["derivation"] for s in est["stages"] if s["stage"] == "pretrain")
        hours = Decimal(der["accelerator_hours"])
        self.say(
            f"  pretrain: 6 × 7e9 parameters × 1e12 tokens = {Decimal(der['flops']):.2e} FLOPs; "
            f"÷ (989 TFLOP/s × {PLANNED_MFU} MFU) = {hours:,.0f} GPU-hours = "
            f"{hours / (NODES * GPUS_PER_NODE * 24):.1f} days on {NODES * GPUS_PER_NODE} GPUs"
        )
        peak = est["peak"]
        self.say(
            f"  energy {Decimal(est['energy_kwh']):,.0f} kWh "
            f"({Decimal(est['emissions_kg_co2e']) / 1000:,.1f} t CO2e on the US grid); "
            f"peak {money(peak['peak_daily'])} a day against an average of "
            f"{money(peak['average_daily'])}"
        )
        self.say(
            f"  POST /v1/plans -> {record['id']}, with {len(record['budget_ids'])} budgets over "
            "its window: the whole plan (with a forecast alert) and one per stage"
        )

    def budgets(self) -> None:
        self.heading(
            3,
            "Budgets",
            "Each threshold alerts once per period, decided in the same atomic step that adds a "
            "batch; a forecast alert fires when the spend projected to the period's end passes "
            "the amount.",
        )
        for body in budget_bodies(self.sc):
            self._call("POST", "/v1/budgets", "budget", json=body)
        table = _table("budget", "scope", "period", ">USD", "alerts at")
        order = ["plan 7b-base", *(f"plan 7b-base / {s}" for s in PLAN_STAGES)]
        listed = self._call("GET", "/v1/budgets", "budgets", params=self.project_q)
        listed.sort(key=lambda b: (order.index(b["name"]) if b["name"] in order else 99, b["name"]))
        for b in listed:
            scope = ", ".join(f"{k}={v}" for k, v in b.get("scope", {}).items()) or "project"
            alerts = "/".join(str(t) for t in b.get("thresholds", [])) + " %"
            if b.get("forecast"):
                alerts += " + forecast"
            period = "plan window" if b["period"] == "window" else b["period"]
            table.add_row(_short_budget(b["name"]), scope, period, num(b["amount"]), alerts)
        self.console.print(table)
        self.say(
            "  (the two monthly budgets are ours: POST /v1/budgets; the rest came with the plan)"
        )

    def webhook(self) -> None:
        self.heading(
            4,
            "Webhook",
            "Alerts are delivered durably (retries, dead letters), signed per Standard Webhooks.",
        )
        if self.receiver is None:
            self.say("  no local receiver: alerts are read from GET /v1/alerts only")
            return
        response = self.http.post(
            "/v1/webhooks",
            json={
                "url": self.receiver.url,
                "format": "standard",
                "projects": [self.sc.project],
                "description": "trainledger demo receiver",
            },
        )
        if response.status_code != 201:
            try:
                detail = str(response.json().get("detail", ""))
            except ValueError:
                detail = response.text[:300]
            self.say(
                f"  [yellow]the service refused the local receiver {self.receiver.url}[/] "
                f"({response.status_code}: {escape(detail)})."
            )
            self.say(
                "  A service sends plain http or to loopback only for hosts on its allow-list: "
                "start it with TRAINLEDGER_WEBHOOK_ALLOWLIST=127.0.0.1 to see deliveries. The "
                "alerts are still listed below, from GET /v1/alerts."
            )
            return
        created = response.json()
        self.receiver.secret = created.get("secret")
        self.outcome.webhook_id = created["id"]
        self.say(
            f"  POST /v1/webhooks -> {created['id']}: {self.receiver.url}, a small HTTP server "
            "this demo runs; it checks each delivery's signature with the secret shown once"
        )

    def replay(self) -> None:
        sc = self.sc
        self.heading(
            5,
            "Replay",
            f"{DAYS} days of usage as the cluster's exporters would post it, "
            f"~{BATCH_EVENTS:,} events a request.",
        )
        crash_from, crash_to = sc.at(*CRASH[0]), sc.at(*CRASH[1])
        self.say(
            f"  the cluster: {NODES} nodes × {GPUS_PER_NODE} H100 in a reserved block from day "
            f"{PRETRAIN_START} (billed per node-hour, its use posted per GPU-hour), one on-demand "
            "node for data prep and side experiments, hosted scoring inference, hot / warm / "
            "archive / checkpoint storage, a cross-region copy, logs, on-call hours"
        )
        self.say("  and three things going wrong in it:")
        self.say(
            f"   [bold]• idle reservation[/]: the pretraining job dies {crash_from:%a %d %b %H:%M} "
            f"and is restarted {crash_to:%a %d %b %H:%M}; the block is billed all along"
        )
        self.say(
            f"   [bold]• over-long experiment[/]: {HUNG}, planned for 2 days on an on-demand "
            f"node, starts {sc.day(HANG_START):%d %b}, hangs after its last progress report "
            f"{sc.at(*HANG_LAST_PROGRESS):%d %b %H:%M} and is never stopped"
        )
        self.say(
            f"   [bold]• checkpoint blow-up[/]: from {sc.day(CKPT_BREAK_DAY):%d %b} old "
            f"checkpoints are no longer deleted: a new {CHECKPOINT_GB} GB every hour, "
            f"{CHECKPOINT_GB * KEEP_LAST} GB kept becomes "
            f"{_checkpoint_gb(DAYS - 1, 23) / 1000:.1f} TB"
        )
        events = self.outcome.events
        batches = [events[i : i + BATCH_EVENTS] for i in range(0, len(events), BATCH_EVENTS)]
        with Progress(
            TextColumn("  [progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("events [cyan]{task.fields[day]}"),
            TimeElapsedColumn(),
            console=self.console,
        ) as progress:
            task = progress.add_task("POST /v1/events", total=len(events), day="")
            for batch in batches:
                answer = self._call(
                    "POST",
                    "/v1/events",
                    "replay",
                    content=json.dumps(batch).encode(),
                    headers={"content-type": "application/json"},
                )
                self.outcome.accepted += int(answer["accepted"])
                self.outcome.duplicates += int(answer["duplicates"])
                self.outcome.rejected += len(answer["rejected"])
                if answer["rejected"]:
                    first = answer["rejected"][0]
                    raise DemoError(
                        f"replay: event {first.get('id')} rejected: {first.get('reason')}"
                    )
                progress.update(task, advance=len(batch), day=f"up to {batch[-1]['time'][:10]}")
        self.say(
            f"  {len(batches)} requests: {self.outcome.accepted:,} events accepted, "
            f"{self.outcome.duplicates} duplicates, {self.outcome.rejected} rejected"
        )

    def progress(self) -> None:
        reports = experiment_progress(self.sc)
        for report in reports:
            self._call(
                "POST", "/v1/experiments/progress", "progress", params=self.project_q, json=report
            )
        tokens = pretrain_tokens_done(self.outcome.events)
        path = f"/v1/plans/{self.outcome.plan_id}/progress"
        for body in (
            {"stage": "data_prep", "fraction_done": "1"},
            {"stage": "quality_scoring", "fraction_done": "1"},
            {"stage": "pretrain", "tokens_done": tokens},
        ):
            self._call("POST", path, "plan progress", params=self.project_q, json=body)
        by_exp: dict[str, int] = {}
        for r in reports:
            by_exp[r["experiment"]] = by_exp.get(r["experiment"], 0) + 1
        self.say(
            f"  progress: {len(reports)} eval-loss reports ("
            + ", ".join(f"{k} {v}" for k, v in by_exp.items())
            + f"); plan: data prep and scoring done, pretraining at {tokens / 1e9:,.0f}B of "
            f"{PLANNED_TOKENS / 1e9:,.0f}B tokens"
        )

    def wait_for_deliveries(self) -> None:
        alerts = self._all_alerts()
        self.outcome.alerts = alerts
        if self.receiver is None or self.outcome.webhook_id is None:
            return
        wanted = {a["id"] for a in alerts}
        deadline = time.monotonic() + self.delivery_timeout_s
        with self.console.status(f"waiting for {len(wanted)} webhook deliveries ..."):
            while time.monotonic() < deadline:
                got = {d.webhook_id for d in self.receiver.received()}
                pending = self._call(
                    "GET",
                    "/v1/webhooks/deliveries",
                    "deliveries",
                    params={**self.project_q, "status": "pending", "limit": 1},
                )
                if wanted <= got and pending["total"] == 0:
                    break
                time.sleep(0.2)
            time.sleep(0.5)  # a delivery sent twice would have arrived by now
        self.outcome.deliveries = self.receiver.received()

    def _all_alerts(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            params: dict[str, Any] = {**self.project_q, "limit": 1000}
            if after:
                params["after"] = after
            page = self._call("GET", "/v1/alerts", "alerts", params=params)
            out += page
            if len(page) < 1000:
                return out
            after = page[-1]["cursor"]

    def spend(self) -> None:
        self.heading(
            6,
            "Where the money went",
            "GET /v1/costs/summary: exact running totals, each a sum of priced events.",
        )
        summary = self._call("GET", "/v1/costs/summary", "summary", params=self.project_q)
        self.outcome.summary = summary
        table = _table("stage", ">USD", ">share", "   category", ">USD ", ">share ")
        stages, cats = summary["by_stage"], summary["by_category"]
        for i in range(max(len(stages), len(cats))):
            s = stages[i] if i < len(stages) else None
            c = cats[i] if i < len(cats) else None
            table.add_row(
                s["name"] if s else "",
                num(s["cost"]) if s else "",
                _pct(s["share"]) if s else "",
                "   " + c["name"] if c else "",
                num(c["cost"]) if c else "",
                _pct(c["share"]) if c else "",
            )
        self.console.print(table)
        self.say(
            f"  total [bold]{money(summary['total_cost'])}[/] from "
            f"{summary['total_events']:,} events; fixed (paid whether used or not) "
            f"{money(summary['fixed_cost'])} = {_pct(summary['fixed_share'])}; the dearest day "
            f"{money(summary['peak_daily']['peak'])} against an average of "
            f"{money(summary['peak_daily']['average'])}"
        )
        self.means(
            "GPUs are most of the bill, and most of that is the reserved block, paid in full "
            "whether jobs run or not; storage, network and logs are small next to it."
        )

    def plan_vs_actual(self) -> None:
        self.heading(
            7,
            "Plan against actual",
            "GET /v1/plans/{id}/status, by earned value: EV = plan × fraction done; CPI = EV ÷ "
            "actual (below 1: over cost); forecast = actual ÷ fraction done.",
        )
        status = self._call(
            "GET", f"/v1/plans/{self.outcome.plan_id}/status", "plan status", params=self.project_q
        )
        self.outcome.status = status
        table = _table("stage", ">planned", ">actual", ">done", ">CPI", ">forecast", ">variance")
        for s in status["stages"]:
            done = _pct(s["fraction_done"]) if s["fraction_done"] is not None else "-"
            variance = Decimal(s["variance"])
            table.add_row(
                s["stage"],
                num(s["planned"]),
                num(s["actual"]),
                done,
                s["cpi"] or "-",
                num(s["forecast_at_completion"]),
                f"[{'red' if variance < 0 else 'green'}]{num(variance)}",
            )
        variance = Decimal(status["variance"])
        table.add_row(
            "[bold]plan (USD)",
            num(status["planned"]),
            num(status["actual"]),
            "",
            "",
            num(status["forecast_at_completion"]),
            f"[bold {'red' if variance < 0 else 'green'}]{num(variance)}",
        )
        self.console.print(table)
        pre = next(s for s in status["stages"] if s["stage"] == "pretrain")
        self.means(
            f"pretraining is {_pct(pre['fraction_done'])} done but has spent "
            f"{_pct(Decimal(pre['actual']) / Decimal(pre['planned']))} of its plan; at that "
            f"efficiency (CPI {pre['cpi']}) it finishes at {money(pre['forecast_at_completion'])}, "
            f"{money(-Decimal(pre['variance']))} over. The idle block and the hung ablation "
            "(step 9) are most of the gap; stages not started yet are forecast at plan."
        )

    def alerts(self) -> None:
        self.heading(
            8,
            "Alerts",
            "Recorded once per budget, period and limit, and delivered to the webhook. 'crossed' "
            "is the simulated hour the spend passed the limit; 'mostly' is the largest "
            "cost driver the delivered message names.",
        )
        received: dict[str, list[Delivery]] = {}
        for d in self.outcome.deliveries:
            received.setdefault(d.webhook_id, []).append(d)
        crossings = self._crossing_times()
        rows = sorted(
            self.outcome.alerts,
            key=lambda a: (crossings.get(a["id"], self.sc.end), a["budget_name"], a["id"]),
        )
        table = _table("crossed", "budget", "alert", ">limit USD", "mostly", "received")
        for a in rows:
            what = f"{a['threshold_pct']} %" if a["kind"] == "threshold" else a["kind"]
            got = received.get(a["id"], [])
            if self.outcome.webhook_id is None:
                mark = "-"
            elif len(got) == 1:
                mark = "[green]once[/]"
            else:
                mark = f"[red]{len(got)} times[/]"
            drivers = got[0].body.get("data", {}).get("top_drivers", []) if got else []
            top = drivers[0]["name"].split(" / ")[0] if drivers else ""
            when = crossings.get(a["id"])
            table.add_row(
                f"{when:%d %b %H:00}" if when else "?",
                _short_budget(a["budget_name"])
                + ("" if a["period"] == "window" else f" {a['period']}"),
                what,
                num(a["limit"]),
                top,
                mark,
            )
        self.console.print(table)
        if self.outcome.webhook_id is not None:
            ids = [d.webhook_id for d in self.outcome.deliveries]
            signed = sum(d.signed for d in self.outcome.deliveries)
            self.say(
                f"  the receiver got {len(ids)} deliveries for {len(set(ids))} distinct alerts, "
                f"{signed} with a valid signature; {len(self.outcome.alerts)} alerts were "
                "recorded (GET /v1/alerts)"
            )
        for d in self.outcome.deliveries:
            data = d.body.get("data", {})
            if data.get("kind") == "forecast" and data.get("forecast"):
                self.say(
                    f"  forecast, {_short_budget(data['budget_name'])}: at this pace "
                    f"{money(data['forecast'])} by the end of the period, against "
                    f"{money(data['amount'])}"
                )
        self.means(
            "a threshold alert says a budget's spend reached that share of it: data prep and "
            "scoring came in near their plan, pretraining passed half its plan well before half "
            "its tokens, and the forecast alerts say the spend rate would overrun the plan and "
            "the month. Monthly rows follow the calendar, so they change with today's date."
        )

    def _crossing_times(self) -> dict[str, datetime]:
        """The simulated hour each threshold or forecast limit was passed: the first hour the
        cumulative spend in the alert's scope and period reached it, from the hourly totals."""
        report = self._call(
            "GET",
            "/v1/costs",
            "hourly costs",
            params={
                **self.project_q,
                "group_by": "stage",
                "granularity": "hour",
                "limit": 10_000,
                "from": self.sc.day(0).isoformat(),
                "to": self.sc.day(DAYS).isoformat(),
            },
        )
        hourly: list[tuple[datetime, str, Decimal]] = []
        for row in report["rows"]:
            stamp = datetime.strptime(row["key"]["period"][:13], "%Y-%m-%dT%H")
            hourly.append((stamp.replace(tzinfo=UTC), row["key"]["stage"], Decimal(row["cost"])))
        hourly.sort(key=lambda r: r[0])
        budgets = {
            b["id"]: b for b in self._call("GET", "/v1/budgets", "budgets", params=self.project_q)
        }
        out: dict[str, datetime] = {}
        for a in self.outcome.alerts:
            budget = budgets.get(a["budget_id"])
            if budget is None or a["kind"] == "growth":
                continue
            stage = a["scope"].get("stage")
            limit = Decimal(a["limit"])
            total = Decimal(0)
            for stamp, row_stage, cost in hourly:
                if stage is not None and row_stage != stage:
                    continue
                if a["period"] == "window":
                    start = datetime.fromisoformat(budget["window_start"].replace("Z", "+00:00"))
                    end = datetime.fromisoformat(budget["window_end"].replace("Z", "+00:00"))
                    if not start <= stamp < end:
                        continue
                elif stamp.strftime("%Y-%m") != a["period"]:
                    continue
                total += cost
                if total >= limit if a["kind"] == "threshold" else total > limit:
                    out[a["id"]] = stamp
                    break
        return out

    def waste(self) -> None:
        self.heading(
            9,
            "Waste",
            "GET /v1/reports/waste: rules over the accepted events and the experiments' progress; "
            "no cost is counted in two findings.",
        )
        policy = {"checkpoint": {"size_gb": str(CHECKPOINT_GB), "keep_last": KEEP_LAST}}
        self._call(
            "PUT", "/v1/reports/waste/policy", "waste policy", params=self.project_q, json=policy
        )
        self.say(
            f"  PUT /v1/reports/waste/policy: a checkpoint is {CHECKPOINT_GB} GB and the last "
            f"{KEEP_LAST} are kept (defaults: progress every 2 days, improvement within 3)"
        )
        report = self._call(
            "GET",
            "/v1/reports/waste",
            "waste report",
            # Up to the last simulated day: figures do not move with the time of day.
            params={
                **self.project_q,
                "from": self.sc.day(0).isoformat(),
                "to": self.sc.day(DAYS - 1).isoformat(),
            },
        )
        self.outcome.waste = report
        for i, f in enumerate(report["findings"], 1):
            window = f["window"]
            self.say(
                f"\n  [bold red]{i}. {f['kind']}[/]: {escape(f['title'])}\n"
                f"     [bold]{money(f['cost_so_far'])}[/] so far ({window['start']} .. "
                f"{window['end']}), {money(f['cost_per_day_if_left'])} a day if left alone"
            )
            self.say(f"     [bold green]what it means:[/] {MEANING.get(f['kind'], '')}")
            self.say(f"     [bold]what to do:[/] {escape(f['action'])}")
        flagged = {f["evidence"]["keys"].get("experiment") for f in report["findings"]}
        fine = [e for e in (MAIN, HEALTHY) if e not in flagged]
        self.say(
            f"\n  total waste [bold]{money(report['total_waste'])}[/], "
            f"{money(report['total_per_day_if_left'])} a day if nothing changes. Not flagged: "
            + ", ".join(fine)
            + ": they reported a falling eval loss, or finished."
        )

    def wrap_up(self) -> None:
        self.console.print()
        self.console.rule("[bold]In short", align="left")
        waste = Decimal(self.outcome.waste.get("total_waste", "0"))
        total = Decimal(self.outcome.summary.get("total_cost", "0"))
        share = waste / total * 100 if total else Decimal(0)
        self.say(
            f"  {money(total)} spent in {DAYS} days, {money(waste)} of it ({share:.1f} %) waste. "
            "The ledger priced every event exactly, alerted as budgets were crossed, showed "
            "pretraining heading over plan, and named the three incidents with what each costs."
        )


def run_demo(
    base_url: str,
    token: str,
    scenario: Scenario,
    receiver: Receiver | None,
    console: Console,
    card: Mapping[str, Any] | None = None,
    delivery_timeout_s: float = 30.0,
) -> DemoOutcome:
    demo = Demo(
        base_url,
        token,
        scenario,
        receiver,
        console,
        card or load_example_card(),
        delivery_timeout_s,
    )
    try:
        outcome = demo.run()
    finally:
        demo.http.close()
    return outcome


# --------------------------------------------------------------------------------------------
# The demo's own service
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_SERVE = "import sys; from trainledger.cli import main; sys.exit(main(sys.argv[1:]))"


@contextmanager
def local_service() -> Iterator[tuple[str, str, Path]]:
    """`trainledger serve` in a subprocess on a free port, its embedded Valkey in a temporary
    directory; yields (url, admin token, data dir) and stops it afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix="trainledger-demo-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "TRAINLEDGER_REDIS_URL"}
    env.update(
        TRAINLEDGER_DATA_DIR=str(data_dir),
        TRAINLEDGER_PUBLIC_URL=url,
        # The demo's receiver is plain http on loopback: allowed for this service only.
        TRAINLEDGER_WEBHOOK_ALLOWLIST="127.0.0.1",
        TRAINLEDGER_WEBHOOK_POLL_S="0.2",
    )
    log_path = data_dir / "server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SERVE,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the demo, which then stops it in order
    )
    try:
        token = _wait_ready(proc, url, data_dir, log_path)
        yield url, token, data_dir
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, data_dir: Path, log_path: Path) -> str:
    deadline = time.monotonic() + 60
    token_file = data_dir / "admin-token"
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise DemoError(
                    f"trainledger serve exited with {proc.returncode}:\n"
                    + log_path.read_text(errors="replace")[-3000:]
                )
            with suppress(httpx.HTTPError):
                if client.get(url + "/readyz").status_code == 200 and token_file.exists():
                    return token_file.read_text().strip()
            time.sleep(0.1)
    raise DemoError(
        "trainledger serve did not become ready within 60 s:\n"
        + log_path.read_text(errors="replace")[-3000:]
    )


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Replay 33 simulated days of a 7B pretraining run (with three incidents) through the "
        "ledger and show the costs, plan against actual, the alerts and the waste it finds."
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
        help="the rate card to start from (default: docs/examples/ratecard.json)",
    )


def _token_for(args: argparse.Namespace) -> str:
    token = args.token or os.environ.get("TRAINLEDGER_TOKEN")
    if token:
        return str(token).strip()
    path = Path(os.environ.get("TRAINLEDGER_DATA_DIR", ".trainledger")) / "admin-token"
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
    ):
        console.print("  " + line, markup=False, highlight=False, soft_wrap=True)
    console.print("  Ctrl-C stops it and deletes its data.")


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
        card = load_example_card(Path(args.rate_card))
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


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="trainledger demo")
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
