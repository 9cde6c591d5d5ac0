"""1. Core: events per second through the Cython kernel against the plain-Python reference.

One batch (default 100,000 events, 20 SKUs of which 4 graduated, 100 experiments x 6
stages) is turned into the kernel's columns exactly as `trainledger.ingest.pricing.price_events`
does (rate row per (version, SKU), one group per (day, dims) cell, one tier slot per
(month, tiered SKU)), against the catalog the service builds from the same rate card
(`service.ratecards.catalog.build_catalog`). Then `costcore.price_batch` (compiled) and
`costcore.price_batch_reference` (plain Python) each price the same batch, from the same
tier counters, and their results are checked equal.

Timed: the `price_batch` call only (argument checks, validation passes, pricing with tiers,
aggregation into groups; fresh tier counters before each call, untimed). The kernel is
single-threaded (it releases the GIL but does not split the batch), so its figure is per core.
Target (issue): >= 20 million events/s per core and >= 20x the reference.
"""

from __future__ import annotations

from array import array
from datetime import UTC, datetime
from typing import Any

import msgspec
from trainledger.ratecards.catalog import PricingCatalog, build_catalog
from trainledger.ratecards.model import RateCardIn, RateCardVersion

from bench.common import BENCH_CARD, EventFactory, Workload, median, result, time_repeated
from costcore import price_batch, price_batch_reference
from costcore.money import parse_quantity

DEFAULTS: dict[str, Any] = {"events": 100_000, "repeat": 30, "min_seconds": 2.0, "ref_repeat": 3}
QUICK: dict[str, Any] = {"events": 100_000, "repeat": 10, "min_seconds": 0.5, "ref_repeat": 1}
TINY: dict[str, Any] = {"events": 2_000, "repeat": 2, "min_seconds": 0.0, "ref_repeat": 1}

TARGET_RATE = 20_000_000.0
TARGET_RATIO = 20.0


def bench_catalog() -> PricingCatalog:
    card = msgspec.convert(BENCH_CARD, RateCardIn, strict=False)
    version = RateCardVersion(
        name="default",
        version=1,
        currency=card.currency,
        effective_from=card.effective_from.astimezone(UTC),
        created_at=datetime.now(UTC),
        skus=card.skus,
    )
    return build_catalog("default", 1, [version])


class KernelBatch:
    """The kernel's input columns for one batch, built as the service builds them."""

    def __init__(self, events: list[dict[str, Any]], catalog: PricingCatalog) -> None:
        n = len(events)
        self.catalog = catalog
        self.quantity = array("q", [parse_quantity(e["quantity"]) for e in events])
        self.rate_row = array("i", bytes(4 * n))
        self.group = array("i", bytes(4 * n))
        self.tier_slot = array("i", bytes(4 * n))
        slots: dict[tuple[str, str], int] = {}
        groups: dict[tuple[str, ...], int] = {}
        for i, e in enumerate(events):
            when = datetime.fromisoformat(e["time"])
            vi = catalog.history.index_at(when)
            row = catalog.row_of[(vi, e["sku"])]
            self.rate_row[i] = row
            sku = catalog.sku_of_row[row]
            day = e["time"][:10]
            if sku.tiers:
                slot_key = (day[:7], e["sku"])
                self.tier_slot[i] = slots.setdefault(slot_key, len(slots))
            else:
                self.tier_slot[i] = -1
            gkey = (day, e["stage"], e["experiment"], sku.category, e["sku"], e["owner"])
            self.group[i] = groups.setdefault(gkey, len(groups))
        self.n_groups = len(groups)
        self.n_slots = len(slots)
        self.n_tiered = sum(1 for s in self.tier_slot if s >= 0)
        # Counters part-way through a month, so events cross tier bounds.
        self.cum_before = array("q", [7_000_000_000 * (s + 1) for s in range(len(slots))])
        self.cum = array("q", self.cum_before)

    def reset(self) -> None:
        self.cum[:] = self.cum_before

    def kernel(self) -> Any:
        return price_batch(
            self.quantity,
            self.rate_row,
            self.group,
            self.tier_slot,
            self.catalog.table,
            self.cum,
            self.n_groups,
        )

    def reference(self) -> Any:
        return price_batch_reference(
            self.quantity,
            self.rate_row,
            self.group,
            self.tier_slot,
            self.catalog.table,
            self.cum,
            self.n_groups,
        )


def _subset(events: list[dict[str, Any]], tiered: bool) -> list[dict[str, Any]]:
    tiered_codes = {s["code"] for s in BENCH_CARD["skus"] if s.get("tiers")}
    return [e for e in events if (e["sku"] in tiered_codes) == tiered]


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    n = int(p["events"])
    catalog = bench_catalog()
    events = EventFactory(Workload(days=1)).batch(0, n)
    batch = KernelBatch(events, catalog)

    # Correctness first: the compiled kernel and the reference agree on this batch.
    batch.reset()
    expected = batch.reference()
    tier_after_ref = array("q", batch.cum)
    batch.reset()
    got = batch.kernel()
    if got != expected or batch.cum != tier_after_ref:
        raise AssertionError("kernel and reference disagree on the benchmark batch")

    kernel_times = time_repeated(
        batch.kernel,
        repeat=int(p["repeat"]),
        min_seconds=float(p["min_seconds"]),
        setup=batch.reset,
    )
    ref_times = time_repeated(batch.reference, repeat=int(p["ref_repeat"]), setup=batch.reset)
    kernel_rate = n / median(kernel_times)
    kernel_best = n / min(kernel_times)
    ref_rate = n / median(ref_times)

    # Fixed cost of one call (argument checks, rate-table copy and validation, allocation).
    one = KernelBatch(events[:1], catalog)
    overhead = median(time_repeated(one.kernel, repeat=200, setup=one.reset))

    variants: dict[str, Any] = {}
    for label, subset in (
        ("flat_only", _subset(events, False)),
        ("tiered_only", _subset(events, True)),
    ):
        if not subset:
            continue
        vb = KernelBatch(subset, catalog)
        times = time_repeated(vb.kernel, repeat=max(3, int(p["repeat"]) // 2), setup=vb.reset)
        variants[label] = {"events": len(subset), "events_per_s": len(subset) / median(times)}

    ratio = kernel_rate / ref_rate
    met = kernel_rate >= TARGET_RATE and ratio >= TARGET_RATIO
    per_event_ns = median(kernel_times) / n * 1e9
    loop_ns = max(0.0, median(kernel_times) - overhead) / n * 1e9
    return result(
        "core",
        figure=kernel_rate,
        unit="events/s",
        ceiling=ref_rate,
        ceiling_label="plain-Python reference, events/s (baseline, same batch)",
        ratio=ratio,
        ratio_label="kernel / reference",
        target=">= 20,000,000 events/s per core and >= 20x the reference",
        met=met,
        details={
            "events": n,
            "groups": batch.n_groups,
            "tier_slots": batch.n_slots,
            "tiered_events": batch.n_tiered,
            "kernel_median_s": median(kernel_times),
            "kernel_best_events_per_s": kernel_best,
            "kernel_ns_per_event": per_event_ns,
            "kernel_loop_ns_per_event": loop_ns,
            "call_overhead_us": overhead * 1e6,
            "reference_median_s": median(ref_times),
            "kernel_samples": len(kernel_times),
            "variants": variants,
        },
        notes=[
            "single-threaded kernel: the figure is per core",
            "results of kernel and reference checked equal on the benchmark batch",
        ],
    )
