"""The demo's usage, simulated: every event of the 33 days and the experiments' progress
reports, generated from a fixed seed relative to the scenario's start day. No I/O."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from .scenario import (
    ACTUAL_MFU,
    DAYS,
    GPUS_PER_NODE,
    HANG_LAST_PROGRESS,
    HANG_START,
    HEALTHY,
    HUNG,
    MAIN,
    NODES,
    PARAMETERS,
    PEAK_FLOPS,
    PLANNED_TOKENS,
    PRETRAIN_START,
    RESERVED_SKU,
    SEED,
    USAGE_SKU,
    Scenario,
    checkpoint_gb,
    crashed,
    iso,
)
from .study import study_events


class _EventLog:
    """The events of one scenario as they are generated, each with its time for the sort."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.timed: list[tuple[datetime, dict[str, Any]]] = []

    def add(
        self,
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
            "time": iso(when),
            "project": self.sc.project,
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
        self.timed.append((when, ev))


def generate_events(sc: Scenario) -> list[dict[str, Any]]:
    """Every usage event of the 33 simulated days, the cost-and-effect study's included
    (`study.py`), in time order. Deterministic (seeded)."""
    # One generator, drawn from in this order (scoring, then pretraining): the seed fixes the
    # figures only as long as the order of the draws stays the same.
    rng = random.Random(SEED)
    log = _EventLog(sc)
    _data_prep(sc, log)
    _quality_scoring(sc, log, rng)
    _storage(sc, log)
    _pretraining(sc, log, rng)
    _side_experiments(sc, log)
    _evaluation(sc, log)
    study_events(sc, log)
    log.timed.sort(key=lambda pair: (pair[0], pair[1]["id"]))
    return [ev for _, ev in log.timed]


def _data_prep(sc: Scenario, log: _EventLog) -> None:
    """Data prep: licence, one copy of the crawl, dedup on an on-demand node."""
    data = {"team": "data"}
    log.add(
        "license-corpus", sc.at(0, 9), "data.license.gb", "200", "data_prep", owner="ana", tags=data
    )
    log.add(
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
                log.add(
                    f"dedup-d{d:02d}h{h:02d}-g{g}",
                    sc.at(d, h),
                    "gpu.h100.hour",
                    "1",
                    "data_prep",
                    owner="ana",
                    tags=data,
                )


def _quality_scoring(sc: Scenario, log: _EventLog, rng: random.Random) -> None:
    """Quality scoring: 4 workers calling a hosted judge, a request batch every 10 min."""
    data = {"team": "data"}
    for d in range(2, 8):
        for slot in range(144):
            for w in range(4):
                mtok = Decimal(rng.randint(38_000_000, 49_000_000)).scaleb(-6)
                log.add(
                    f"score-d{d:02d}s{slot:03d}-w{w}",
                    sc.at(d, 0, slot * 10 + w),
                    "inference.quality_score.mtok",
                    str(mtok),
                    "quality_scoring",
                    owner="ana",
                    tags={**data, "judge": "llama-3.1-8b"},
                )


def _storage(sc: Scenario, log: _EventLog) -> None:
    """Storage, posted daily as GB-days."""
    data = {"team": "data"}
    day0 = sc.day(0).isoformat()
    archived = (sc.start - timedelta(days=120)).date().isoformat()
    shards_made = sc.day(PRETRAIN_START).isoformat()
    for d in range(DAYS):
        when = sc.at(d, 23, 30)
        log.add(
            f"hot-raw-d{d:02d}",
            when,
            "storage.hot.gb_day",
            "30000",
            "data_prep",
            owner="ana",
            tags={**data, "data_class": "raw", "created": day0, "dataset": "crawl-2026-09"},
        )
        log.add(
            f"archive-d{d:02d}",
            when,
            "storage.archive.gb_day",
            "200000",
            "data_prep",
            owner="ana",
            tags={**data, "data_class": "raw", "created": archived, "dataset": "crawl-2025"},
        )
        log.add(
            f"warm-evalsets-d{d:02d}",
            when,
            "storage.warm.gb_day",
            "2000",
            "eval",
            owner="dee",
            tags={"team": "eval", "data_class": "other", "dataset": "eval-suites"},
        )
        if d < 10:
            log.add(
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
            log.add(
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


def _pretraining(sc: Scenario, log: _EventLog, rng: random.Random) -> None:
    """Pretraining on the reserved block: hourly, then the daily log storage and on-call."""
    pre = {"team": "pretrain"}
    for d in range(PRETRAIN_START, DAYS):
        for h in range(24):
            _pretraining_hour(sc, log, rng, d, h)
        log.add(
            f"logstore-d{d:02d}",
            sc.at(d, 23, 45),
            "logs.retention.gb_day",
            str(48 * (d - PRETRAIN_START + 1)),
            "pretrain",
            owner="ben",
            tags=pre,
        )
        log.add(
            f"oncall-d{d:02d}",
            sc.at(d, 18),
            "ops.engineer.hour",
            "2",
            "pretrain",
            owner="ops",
            tags=pre,
        )


def _pretraining_hour(sc: Scenario, log: _EventLog, rng: random.Random, d: int, h: int) -> None:
    """One hour of day `d`: the block billed per node, its use, fabric traffic and logs
    (none of these while the job is down), and the checkpoints stored."""
    pre = {"team": "pretrain"}
    when = sc.at(d, h)
    for n in range(NODES):
        node = f"gpu-node-{n + 1}"
        # The capacity block bills every node every hour, used or not.
        log.add(
            f"block-d{d:02d}h{h:02d}-n{n}",
            when,
            RESERVED_SKU,
            str(GPUS_PER_NODE),
            "pretrain",
            owner="ops",
            tags={**pre, "node": node},
        )
        if crashed(d, h):
            continue
        for g in range(GPUS_PER_NODE):
            log.add(
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
        log.add(
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
        log.add(
            f"logs-d{d:02d}h{h:02d}-n{n}",
            when,
            "logs.ingest.gb",
            str(logs),
            "pretrain",
            experiment=MAIN,
            owner="ben",
            tags=pre,
        )
    gb_day = Decimal(checkpoint_gb(d, h)) / 24
    log.add(
        f"ckpt-d{d:02d}h{h:02d}",
        when,
        "storage.checkpoint.gb_day",
        str(gb_day.normalize()),
        "pretrain",
        experiment=MAIN,
        owner="ben",
        tags={**pre, "data_class": "checkpoint"},
    )


def _side_experiments(sc: Scenario, log: _EventLog) -> None:
    """Side experiments on one on-demand node: one healthy, one that hangs."""
    research = {"team": "research"}
    for d in range(8, 11):  # healthy: three days, reports progress, finishes
        for h in range(24):
            for g in range(GPUS_PER_NODE):
                log.add(
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
                log.add(
                    f"lrwu-d{d:02d}h{h:02d}-g{g}",
                    sc.at(d, h),
                    "gpu.h100.hour",
                    "1",
                    "pretrain",
                    experiment=HUNG,
                    owner="chen",
                    tags=research,
                )


def _evaluation(sc: Scenario, log: _EventLog) -> None:
    """Evaluation of the latest checkpoint, four times a day."""
    for d in range(PRETRAIN_START + 1, DAYS):
        for h in (2, 8, 14, 20):
            log.add(
                f"eval-d{d:02d}h{h:02d}",
                sc.at(d, h),
                "gpu.h100.hour",
                str(GPUS_PER_NODE),
                "eval",
                owner="dee",
                tags={"team": "eval"},
            )


def _loss(hours: float) -> Decimal:
    """A smoothly falling eval loss (strictly decreasing at 4 decimals over the run)."""
    value = Decimal("2.05") + Decimal("1.9") / (Decimal(1) + Decimal(str(hours)) / Decimal(40))
    return value.quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN)


def experiment_progress(sc: Scenario) -> list[dict[str, Any]]:
    """Progress reports (eval loss) with their simulated times, in time order."""
    reports: list[dict[str, Any]] = []
    for d in range(PRETRAIN_START, DAYS):
        for h in (0, 6, 12, 18):
            if crashed(d, h):
                continue
            hours = (d - PRETRAIN_START) * 24 + h
            reports.append(
                {
                    "experiment": MAIN,
                    "metric": "eval_loss",
                    "value": str(_loss(hours)),
                    "time": iso(sc.at(d, h, 30)),
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
                    "time": iso(sc.at(d, h, 30)),
                }
            )
    for i, (d, h) in enumerate(((12, 6), (12, 18), HANG_LAST_PROGRESS)):
        reports.append(
            {
                "experiment": HUNG,
                "metric": "eval_loss",
                "value": str(Decimal("3.1") - i * Decimal("0.05")),
                "time": iso(sc.at(d, h, 30)),
            }
        )
    reports.sort(key=lambda r: str(r["time"]))
    return reports


def pretrain_tokens_done(events: Sequence[Mapping[str, Any]]) -> int:
    """Tokens the main run processed: its GPU-hours at the achieved MFU, by 6·N·D backwards."""
    gpu_hours = sum(Decimal(e["quantity"]) for e in events if e["sku"] == USAGE_SKU)
    tokens = gpu_hours * 3600 * PEAK_FLOPS * ACTUAL_MFU / (6 * PARAMETERS)
    return min(int(tokens), PLANNED_TOKENS)
