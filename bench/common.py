"""Shared pieces of the benchmark suite: the rate card, synthetic events, result records.

Everything here is deterministic (seeded) so that two runs post the same workload.
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

# --- the workload ---------------------------------------------------------------------------

# Six of the service's stages (the "6 stages").
BENCH_STAGES: tuple[str, ...] = (
    "data_prep",
    "quality_scoring",
    "pretrain",
    "midtrain",
    "eval",
    "post_train",
)


def _sku(
    code: str,
    category: str,
    unit: str,
    price: str,
    *,
    fixed: bool = False,
    tiers: list[tuple[str | None, str]] | None = None,
) -> dict[str, Any]:
    sku: dict[str, Any] = {"code": code, "category": category, "unit": unit, "unit_price": price}
    if fixed:
        sku["fixed"] = True
    if tiers:
        sku["tiers"] = [
            {"unit_price": p} if up_to is None else {"up_to": up_to, "unit_price": p}
            for up_to, p in tiers
        ]
    return sku


# 20 SKUs (the "20 SKUs"); 4 of them graduated (tiered), so about a fifth of the
# events advance a monthly tier counter, as storage, egress and log ingestion do in practice.
BENCH_SKUS: list[dict[str, Any]] = [
    _sku("gpu.h100.hour", "compute", "hour", "2.50"),
    _sku("gpu.h100.reserved.hour", "compute", "hour", "1.80", fixed=True),
    _sku("gpu.h200.hour", "compute", "hour", "3.20"),
    _sku("gpu.b200.hour", "compute", "hour", "4.50"),
    _sku("gpu.a100.hour", "compute", "hour", "1.60"),
    _sku("cpu.vcpu.hour", "compute", "hour", "0.04"),
    _sku("inference.quality_score.mtok", "compute", "Mtok", "0.15"),
    _sku(
        "storage.hot.gb_day",
        "storage",
        "GB-day",
        "0.002",
        tiers=[("50000", "0.002"), ("500000", "0.0015"), (None, "0.001")],
    ),
    _sku(
        "storage.checkpoint.gb_day",
        "storage",
        "GB-day",
        "0.0012",
        tiers=[("100000", "0.0012"), ("1000000", "0.0009"), (None, "0.0007")],
    ),
    _sku("storage.warm.gb_day", "storage", "GB-day", "0.0008"),
    _sku("storage.archive.gb_day", "storage", "GB-day", "0.00003"),
    _sku("storage.dataset.gb_day", "storage", "GB-day", "0.0006"),
    _sku(
        "network.egress.gb",
        "network",
        "GB",
        "0.09",
        tiers=[("10240", "0.09"), ("51200", "0.085"), ("153600", "0.07"), (None, "0.05")],
    ),
    _sku("network.cross_region.gb", "network", "GB", "0.02"),
    _sku("network.intra_cluster.gb", "network", "GB", "0"),
    _sku("logs.ingest.gb", "logging", "GB", "0.50", tiers=[("5000", "0.50"), (None, "0.25")]),
    _sku("logs.retention.gb_day", "logging", "GB-day", "0.0001"),
    _sku("ops.engineer.hour", "ops", "hour", "95", fixed=True),
    _sku("data.license.gb", "data", "GB", "0.25", fixed=True),
    _sku("hidden.rework.gpu_hour", "hidden", "hour", "2.50"),
]
assert len(BENCH_SKUS) == 20

BENCH_CARD: dict[str, Any] = {
    "currency": "USD",
    "effective_from": "2020-01-01T00:00:00Z",
    "description": "benchmark card: 20 SKUs, 4 graduated",
    "skus": BENCH_SKUS,
}

SKU_CODES: tuple[str, ...] = tuple(s["code"] for s in BENCH_SKUS)

# Quantities per SKU kind: a handful of realistic decimal strings each.
_QUANTITIES: dict[str, tuple[str, ...]] = {
    "hour": ("1", "8", "64", "0.25", "512", "2.5", "16", "128"),
    "GB-day": ("1200", "80.5", "3000", "12.75", "250", "9000", "0.5", "640"),
    "GB": ("12", "0.8", "250.25", "4", "1024", "33.5", "2", "75"),
    "Mtok": ("1.5", "20", "0.25", "300", "7", "64", "2.125", "11"),
}
_QTY_BY_SKU: tuple[tuple[str, ...], ...] = tuple(_QUANTITIES[s["unit"]] for s in BENCH_SKUS)


class Workload(msgspec.Struct, frozen=True):
    """Shape of a synthetic event stream.

    Cardinality is `experiments x skus x stages` (the issue's 100 x 20 x 6); the owner is a
    function of the experiment, so it adds no cells. Events are spread uniformly over `days`
    days that end one hour before `end`, in time order (batches follow the clock, as a
    scheduler's flushes do).
    """

    project: str = "bench"
    experiments: int = 100
    skus: int = 20
    stages: int = 6
    days: int = 1
    owners: int = 10
    seed: int = 7


def now_utc() -> datetime:
    return datetime.now(UTC)


class EventFactory:
    """Deterministic generator of usage-event dicts (the wire form of `EventIn`).

    Event ids look like scheduler step ids, 21 characters: ``j<8-digit batch>.s<8-digit seq>``
    (with a 2-character run tag in front when one is given).
    """

    def __init__(self, workload: Workload, *, end: datetime | None = None, tag: str = "") -> None:
        self.w = workload
        self.tag = tag
        self.rng = random.Random(workload.seed)
        end = (end or now_utc()) - timedelta(hours=1)
        self.start = end - timedelta(days=workload.days)
        # A pool of time stamps at one-minute steps (formatting each event's time would cost
        # more than everything else here); day boundaries fall where the clock puts them.
        span_minutes = workload.days * 24 * 60
        step = max(1, span_minutes // 200_000)
        self._times = [
            (self.start + timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M:%SZ")
            for m in range(0, span_minutes, step)
        ]
        self._experiments = [f"exp-{i:03d}" for i in range(workload.experiments)]
        self._owners = [f"owner-{i % workload.owners:02d}" for i in range(workload.experiments)]
        self._stages = BENCH_STAGES[: workload.stages]
        self._skus = SKU_CODES[: workload.skus]

    def batch(
        self, batch_no: int, size: int, *, position: float | None = None, width: float = 0.001
    ) -> list[dict[str, Any]]:
        """One batch of `size` events. `position` in [0, 1) places the batch on the time axis
        (its events fall in a window `width` of the span wide); None: anywhere in the span."""
        rng = self.rng
        times = self._times
        n_times = len(times)
        if position is None:
            lo, hi = 0, n_times - 1
        else:
            lo = min(n_times - 1, int(position * n_times))
            hi = min(n_times - 1, lo + max(1, int(width * n_times)))
        exps, owners, stages, skus = self._experiments, self._owners, self._stages, self._skus
        n_exp, n_stage, n_sku = len(exps), len(stages), len(skus)
        qtys = _QTY_BY_SKU
        prefix = f"{self.tag}j{batch_no:08d}.s"
        out = []
        for i in range(size):
            e = rng.randrange(n_exp)
            k = rng.randrange(n_sku)
            out.append(
                {
                    "id": f"{prefix}{i:08d}",
                    "time": times[rng.randint(lo, hi)],
                    "project": self.w.project,
                    "sku": skus[k],
                    "quantity": qtys[k][rng.randrange(8)],
                    "stage": stages[rng.randrange(n_stage)],
                    "experiment": exps[e],
                    "owner": owners[e],
                }
            )
        return out


def encode(events: Sequence[dict[str, Any]], fmt: str) -> bytes:
    if fmt == "json":
        return msgspec.json.encode(events)
    if fmt == "msgpack":
        return msgspec.msgpack.encode(events)
    raise ValueError(fmt)


CONTENT_TYPE = {"json": "application/json", "msgpack": "application/msgpack"}


# --- results ------------------------------------------------------------------------------


def result(
    name: str,
    *,
    figure: float,
    unit: str,
    ceiling: float | None,
    ceiling_label: str,
    ratio: float | None,
    ratio_label: str,
    target: str | None,
    met: bool,
    details: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
    rows: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The record every benchmark's `run()` returns (and bench/results/*.json holds).

    `figure`/`ceiling`/`ratio` are the headline; `rows` (see `row`) are the sub-figures a
    benchmark also reports (JSON and msgpack, p50 and p99, each worker count, ...), each with
    its own ceiling, ratio and target. `met` is true when every target the benchmark states
    is met; a benchmark the issue sets no target for has `target` None and `met` True.
    """
    return {
        "name": name,
        "figure": figure,
        "unit": unit,
        "ceiling": ceiling,
        "ceiling_label": ceiling_label,
        "ratio": ratio,
        "ratio_label": ratio_label,
        "target": target,
        "met": bool(met),
        "details": details or {},
        "notes": list(notes),
        "rows": list(rows),
    }


def row(
    label: str,
    figure: float,
    unit: str,
    *,
    ceiling: float | None = None,
    ratio: float | None = None,
    target: str | None = None,
    met: bool | None = None,
) -> dict[str, Any]:
    """One sub-figure of a benchmark (`met` None: no target for this row)."""
    return {
        "label": label,
        "figure": figure,
        "unit": unit,
        "ceiling": ceiling,
        "ratio": ratio,
        "target": target,
        "met": met,
    }


RESULT_KEYS = frozenset(
    (
        "name",
        "figure",
        "unit",
        "ceiling",
        "ceiling_label",
        "ratio",
        "ratio_label",
        "target",
        "met",
        "details",
        "notes",
        "rows",
    )
)
ROW_KEYS = frozenset(("label", "figure", "unit", "ceiling", "ratio", "target", "met"))


# --- timing helpers -----------------------------------------------------------------------


def time_repeated(
    fn: Callable[[], Any],
    *,
    repeat: int,
    min_seconds: float = 0.0,
    setup: Callable[[], Any] | None = None,
    gc_enabled: bool = False,
) -> list[float]:
    """Wall-clock seconds of `repeat` calls (at least `min_seconds` in total), setup untimed.

    With `gc_enabled` the cyclic garbage collector runs during the calls as it does in the
    server (after a full collection before each call, untimed); otherwise it is paused.
    """
    samples: list[float] = []
    started = time.perf_counter()
    was_enabled = gc.isenabled()
    try:
        while len(samples) < repeat or time.perf_counter() - started < min_seconds:
            if setup is not None:
                setup()
            if gc_enabled:
                gc.collect()
                gc.enable()
            else:
                gc.disable()
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
            if len(samples) >= 10 * repeat:
                break
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()
    return samples


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 of 100 samples is the 99th smallest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-pct * len(ordered) // 100))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_info() -> dict[str, Any]:
    import platform

    info: dict[str, Any] = {
        "cpus": cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import subprocess
        from pathlib import Path

        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "service", "costcore"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
        info["git"] = head + ("+uncommitted changes in service/costcore" if dirty else "")
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total_kb"] = int(f.readline().split()[1])
    except OSError:
        pass
    return info
