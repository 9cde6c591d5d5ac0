"""The demo's scenario: the cluster, the run, its timeline and incidents, and what is put into
the ledger before any usage (rate card, plan, budgets). Pure data, no I/O but reading the card.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

# The example card ships inside this package (package data), so an installed demo finds it;
# it is the one copy the README and the tests use too.
EXAMPLE_CARD: Traversable = files(__package__ or __name__) / "ratecard.json"
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


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_example_card(path: Traversable = EXAMPLE_CARD) -> dict[str, Any]:
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
        card["effective_from"] = iso(latest)
    return card


def plan_body(sc: Scenario) -> dict[str, Any]:
    """The 7B plan: 8 weeks from the start day; pretraining sized by 6·N·D."""
    return {
        "project": sc.project,
        "name": "7b-base",
        "rate_card": sc.card,
        "currency": "USD",
        "window_start": iso(sc.start),
        "window_end": iso(sc.at(56)),
        "region": "us",
        "description": "7B dense model, 1T tokens, on a reserved block of 4 x 8 H100",
        "stages": [*_data_stages(), *_model_stages()],
    }


def _data_stages() -> list[dict[str, Any]]:
    """Data prep and quality scoring: priced by resource."""
    hot_raw = 30_000  # GB of raw crawl kept hot
    return [
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
    ]


def _model_stages() -> list[dict[str, Any]]:
    """Pretraining and midtraining sized in model terms (6·N·D), then eval by resource."""
    return [
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
    ]


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


def crashed(day: int, hour: int) -> bool:
    return CRASH[0] <= (day, hour) < CRASH[1]


def checkpoint_gb(day: int, hour: int) -> int:
    """GB of checkpoints stored during an hour of pretraining."""
    if day < CKPT_BREAK_DAY:
        return CHECKPOINT_GB * KEEP_LAST
    hours_broken = (
        (day - CKPT_BREAK_DAY) * 24 + hour + 1
    )  # one new checkpoint an hour, none deleted
    return CHECKPOINT_GB * (KEEP_LAST + hours_broken)
