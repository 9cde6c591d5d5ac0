"""7. Scaling: HTTP ingest throughput with 1 and 2 workers, by batch size and by key count.

Each point is the closed-loop batch ingest of bench/ingest_http.py (`post_load`: wrk, JSON,
fresh ids per request) against a `trainledger serve` subprocess with its embedded Valkey:

* workers: `--workers 1` and `--workers 2` (a fresh server each), 5,000-event batches,
  2 connections per worker;
* batch size: 100, 1,000, 5,000, 20,000 events per request (1 worker);
* key count: how many distinct totals cells (day x stage x experiment x category x SKU x
  owner) one 5,000-event batch touches, from 1 (one experiment, one flat SKU, one stage) to
  the issue's 100 x 20 x 6 (1 worker). Each cell is three HINCRBY in the ingest script.

Figure: events/s with 2 workers. Ceiling: linear scaling, twice the 1-worker figure; the
ratio is the 2-worker speed-up. The issue sets no target; the curves are in the rows.
"""

from __future__ import annotations

from typing import Any

from bench.common import BENCH_CARD, Workload, encode, result, row
from bench.ingest_http import post_load, template
from bench.server import Server

DEFAULTS: dict[str, Any] = {
    "seconds": 10.0,
    "batch": 5_000,
    "batch_sizes": (100, 1_000, 5_000, 20_000),
    # (experiments, skus, stages) per point
    "key_shapes": ((1, 1, 1), (10, 2, 3), (25, 10, 6), (100, 20, 6)),
    "workers": (1, 2),
    "connections_per_worker": 2,
    "tool": "auto",
    "templates": 8,  # different bodies posted in turn, as in ingest_http
}
QUICK: dict[str, Any] = {**DEFAULTS, "seconds": 4.0}
TINY: dict[str, Any] = {
    **DEFAULTS,
    "seconds": 1.0,
    "batch": 50,
    "batch_sizes": (20,),
    "key_shapes": ((1, 1, 1),),
    "templates": 2,
}


def _cells(events: list[dict[str, Any]]) -> int:
    return len(
        {(e["time"][:10], e["stage"], e["experiment"], e["sku"], e["owner"]) for e in events}
    )


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    seconds = float(p["seconds"])
    batch = int(p["batch"])
    cpw = int(p["connections_per_worker"])
    tool = str(p["tool"])
    base = Workload(days=1)

    by_workers: dict[int, dict[str, Any]] = {}
    by_batch: dict[int, dict[str, Any]] = {}
    by_keys: dict[int, dict[str, Any]] = {}
    # As in ingest_http: several different bodies posted in turn (see its docstring).
    n_bodies = int(p["templates"])
    body = [encode(t, "json") for t in template(base, batch, n_bodies)]
    for workers in sorted(p["workers"]):
        with Server(workers=workers) as server:
            server.put_card(BENCH_CARD)
            r = post_load(
                server,
                body,
                "json",
                batch=batch,
                seconds=seconds,
                connections=cpw * workers,
                tool=tool,
            )
            by_workers[workers] = r.as_dict()
            if workers != 1:
                continue
            # The batch-size and key-count curves, on the same 1-worker server.
            for size in p["batch_sizes"]:
                b = [encode(t, "json") for t in template(base, int(size), n_bodies)]
                r = post_load(
                    server, b, "json", batch=int(size), seconds=seconds, connections=cpw, tool=tool
                )
                by_batch[int(size)] = r.as_dict()
            for experiments, skus, stages in p["key_shapes"]:
                w = Workload(days=1, experiments=experiments, skus=skus, stages=stages)
                drawn = template(w, batch, n_bodies)
                cells = _cells(drawn[0])
                r = post_load(
                    server,
                    [encode(events, "json") for events in drawn],
                    "json",
                    batch=batch,
                    seconds=seconds,
                    connections=cpw,
                    tool=tool,
                )
                by_keys[cells] = {**r.as_dict(), "shape": [experiments, skus, stages]}

    one = by_workers[min(by_workers)]["events_per_s"]
    top_workers = max(by_workers)
    top = by_workers[top_workers]["events_per_s"]
    rows = [
        row(
            f"{w} worker{'s' if w > 1 else ''} ({batch:,}-event batches)",
            r["events_per_s"],
            "events/s",
            ceiling=one * w,
            ratio=r["events_per_s"] / (one * w),
        )
        for w, r in by_workers.items()
    ]
    rows += [
        row(f"batch {size:,} events (1 worker)", r["events_per_s"], "events/s")
        for size, r in by_batch.items()
    ]
    rows += [
        row(f"{cells:,} cells per batch (1 worker)", r["events_per_s"], "events/s")
        for cells, r in by_keys.items()
    ]
    return result(
        "scaling",
        figure=top,
        unit="events/s",
        ceiling=one * top_workers,
        ceiling_label=f"linear: {top_workers} x the 1-worker figure",
        ratio=top / (one * top_workers),
        ratio_label=f"{top_workers}-worker figure / linear scaling",
        target=None,
        met=True,
        details={
            "seconds": seconds,
            "batch": batch,
            "by_workers": by_workers,
            "by_batch_size": by_batch,
            "by_cells": by_keys,
            "speedup": top / one,
        },
        notes=[
            "no target in the issue; 2 cores hold the workers, Valkey and wrk together",
        ],
        rows=rows,
    )
