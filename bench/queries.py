"""5. Queries: p99 of `/v1/costs` group-by queries on a project of 10 million events.

The project (100 experiments x 20 SKUs x 6 stages, 90 days; default 10,000,000 events,
`--events` to scale down) is loaded through the real ingest path in-process (bench/dataset.py),
then served by a real `trainledger serve` subprocess pointed at that Valkey. Each query below
is sent over one keep-alive HTTP connection, one at a time (latency, not throughput), after
one untimed warm-up call whose answer is checked (`total_events` equals the events loaded
in its range):

    group_by=stage | experiment | sku | day | stage,sku (all 90 days)
    group_by=experiment,sku over the last 7 days, group_by=category over the last 30 days

Every 90-day answer must report the same total cost and `total_events` equal to the events
loaded, whichever roll-up the planner read it from (a cross-check of the roll-ups).

Figure: p99 over all timed queries. Ceiling: the storage floor of each query: the very
hashes the query planner reads for it (`service.costs.plan.plan_reads`: month roll-ups
for whole months, day roll-ups for the rest, or the finest per-day totals; from the big ones,
`xsku` and the finest totals, only their `c|`/`n|` fields, by HSCAN MATCH, as the server
does — only `c|` when grouped by SKU, the event total then coming from the smallest roll-up
by day), fetched straight from Valkey with redis-py/hiredis after the same state read
(roll-up counter, `accepted`, daily index), no summing; the server's follow-up HMGET of the
page's quantities and event counts is not in it. Also reported: GET /healthz over the same
connection (the HTTP floor), the floor of the finest layout alone (HGETALL of every per-day
totals hash: what every query read before roll-ups), and the memory the roll-ups take.
Target (issue): p99 < 50 ms.
"""

from __future__ import annotations

import http.client
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import dataset
from bench.common import Workload, percentile, result, row
from bench.server import Server

DEFAULTS: dict[str, Any] = {
    "events": 10_000_000,
    "days": 90,
    "repeat": 20,
    "max_seconds_per_query": 40.0,
}
QUICK: dict[str, Any] = {"events": 1_000_000, "days": 90, "repeat": 5, "max_seconds_per_query": 15}
TINY: dict[str, Any] = {"events": 3_000, "days": 3, "repeat": 2, "max_seconds_per_query": 5.0}

TARGET_MS = 50.0


def _queries(days_back: int) -> list[tuple[str, str, int | None]]:
    """(label, query string, days in range or None for all)."""
    today = datetime.now(UTC).date()
    last7 = (today - timedelta(days=6)).isoformat()
    last30 = (today - timedelta(days=29)).isoformat()
    out: list[tuple[str, str, int | None]] = [
        ("stage", "group_by=stage", None),
        ("experiment", "group_by=experiment", None),
        ("sku", "group_by=sku", None),
        ("day", "group_by=day", None),
        ("stage,sku", "group_by=stage,sku", None),
        ("experiment,sku last 7d", f"group_by=experiment,sku&from={last7}", 7),
        ("category last 30d", f"group_by=category&from={last30}", 30),
    ]
    return [q for q in out if q[2] is None or q[2] < days_back]


def _cost_query(project: str, query: str) -> Any:
    """The `CostQuery` the route builds from one of the query strings above."""
    from datetime import date

    from trainledger.costs.query import CostQuery

    params = dict(part.split("=", 1) for part in query.split("&"))
    return CostQuery(
        project,
        date.fromisoformat(params["from"]) if "from" in params else None,
        None,
        tuple(params["group_by"].split(",")),
    )


def wait_for_background_writes(url: str, limit: float = 300.0) -> float:
    """Seconds waited until Valkey runs no AOF rewrite or RDB save (at most `limit`).

    The first read after the load folds the batches it left queued (folding.py), and that
    burst of writes can start an AOF rewrite: its fork competes with the queries for the 2
    cores for seconds (`stage` went from ~2 to 30-100 ms meanwhile at 300 k events). A fold
    script still running answers BUSY: waited for too."""
    import redis

    client = redis.Redis.from_url(url)
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < limit:
            try:
                info = client.info("persistence")
            except redis.exceptions.BusyLoadingError:
                info = {"loading": 1}
            except redis.exceptions.ResponseError as exc:  # BUSY: a long script (a fold)
                if not str(exc).startswith("BUSY"):
                    raise
                info = {"script": 1}
            busy = ("aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress")
            if not any(int(info.get(name, 0)) for name in (*busy, "loading", "script")):
                break
            time.sleep(0.2)
    finally:
        client.close()
    return time.perf_counter() - started


class _Client:
    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> tuple[int, bytes, float]:
        t0 = time.perf_counter()
        self.conn.request("GET", path, headers=self.headers)
        response = self.conn.getresponse()
        body = response.read()
        return response.status, body, time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()


def storage_floor(
    url: str, project: str, queries: list[tuple[str, str, int | None]], repeat: int
) -> tuple[dict[str, list[float]], dict[str, dict[str, Any]]]:
    """Seconds to fetch what each query reads (as `costs.grouping.grouped` does, minus the
    sums), and per query the source, the hashes and the fields read."""
    from dataclasses import replace

    import redis
    from trainledger.costs.plan import BIG_SOURCES, plan_reads
    from trainledger.costs.query import in_range
    from trainledger.ledger.rollups import ROLLUP_VERSION
    from trainledger.storage.keys import Keys

    client = redis.Redis.from_url(url)
    samples: dict[str, list[float]] = {}
    plans: dict[str, dict[str, Any]] = {}
    try:
        for label, query, _ in queries:
            cq = _cost_query(project, query)
            samples[label] = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                pipe = client.pipeline(transaction=False)
                pipe.hget(Keys.rollup_count(project), ROLLUP_VERSION)
                pipe.hget(Keys.meta(project), "accepted")
                pipe.hgetall(Keys.daily(project))
                covered, accepted, daily = pipe.execute()
                days = in_range({k.decode(): 0 for k in daily}, cq)
                complete = int(covered or 0) == int(accepted or 0)
                plan = plan_reads(cq, days, complete)
                pipe = client.pipeline(transaction=False)
                if plan.source == "tot":
                    keys = [Keys.totals(project, d) for d in plan.days]
                else:
                    periods = [*plan.days, *plan.months]
                    keys = [Keys.rollup(project, plan.source, p) for p in periods]
                # As the server reads them (no top= nor sort= here): grouped by SKU, the big
                # sources' event counts are read for the page only, their total by day from
                # the smallest roll-up (`costs.grouping.group_sums`).
                events = plan_reads(replace(cq, group_by=(), granularity="day"), days, complete)
                lean = (
                    plan.source in BIG_SOURCES
                    and "sku" in cq.group_by
                    and events.source not in BIG_SOURCES
                )
                for key in keys:
                    if plan.source in BIG_SOURCES:
                        pipe.hscan(key, 0, match="c|*" if lean else "[cn]|*", count=1_000_000)
                    else:
                        pipe.hgetall(key)
                if lean:
                    for d in events.days:
                        pipe.hgetall(Keys.rollup(project, events.source, d))
                hashes = [h[1] if isinstance(h, tuple) else h for h in pipe.execute()]
                samples[label].append(time.perf_counter() - t0)
            plans[label] = {
                "source": plan.source,
                "day_hashes": len(plan.days),
                "month_hashes": len(plan.months),
                "fields_read": sum(len(h) for h in hashes),
            }
    finally:
        client.close()
    return samples, plans


def finest_floor(url: str, project: str, repeat: int) -> list[float]:
    """Seconds to fetch every per-day finest totals hash: what every query read before
    roll-ups (the old storage floor)."""
    import redis
    from trainledger.storage.keys import Keys

    client = redis.Redis.from_url(url)
    samples = []
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            days = sorted(client.hgetall(Keys.daily(project)))
            pipe = client.pipeline(transaction=False)
            for day in days:
                pipe.hgetall(Keys.totals(project, day.decode()))
            pipe.execute()
            samples.append(time.perf_counter() - t0)
    finally:
        client.close()
    return samples


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    n = int(p["events"])
    workload = Workload(days=int(p["days"]))
    ds = dataset.get_dataset(n, workload, p.get("progress"))
    repeat = int(p["repeat"])
    budget = float(p["max_seconds_per_query"])
    project = workload.project
    per_query: dict[str, Any] = {}
    all_samples: list[float] = []
    totals: set[str] = set()
    queries = _queries(workload.days)
    rows = []
    with Server(workers=1, redis_url=ds.url, token=ds.admin_token) as server:
        client = _Client(server.port, server.token)
        try:
            # One read first (it folds what the load left queued), then no timing while
            # Valkey rewrites its append-only file.
            client.get(f"/v1/costs?project={project}&group_by=stage")
            quiesce_seconds = wait_for_background_writes(ds.url)
            health = []
            for _ in range(max(20, repeat)):
                status, _, dt = client.get("/healthz")
                health.append(dt)
            for label, query, _days in queries:
                path = f"/v1/costs?project={project}&{query}"
                status, body, first = client.get(path)
                if status != 200:
                    raise RuntimeError(f"{path}: {status} {body[:300]!r}")
                answer = json.loads(body)
                if _days is None and answer["total_events"] != n:
                    raise RuntimeError(
                        f"{path}: total_events {answer['total_events']} != {n} loaded"
                    )
                if _days is None:
                    # Each is read from another roll-up: they must agree to the nano-unit.
                    totals.add(answer["total_cost"])
                    if len(totals) > 1:
                        raise RuntimeError(f"{path}: total_cost differs: {sorted(totals)}")
                samples: list[float] = []
                started = time.perf_counter()
                while len(samples) < repeat and (
                    len(samples) < 3 or time.perf_counter() - started < budget
                ):
                    status, body, dt = client.get(path)
                    if status != 200:
                        raise RuntimeError(f"{path}: {status}")
                    samples.append(dt)
                all_samples += samples
                per_query[label] = {
                    "query": query,
                    "samples": len(samples),
                    "first_ms": first * 1000,
                    "p50_ms": percentile(samples, 50) * 1000,
                    "p99_ms": percentile(samples, 99) * 1000,
                    "rows": answer["total_rows"],
                    "total_events": answer["total_events"],
                    "answer_bytes": len(body),
                }
                rows.append(
                    row(
                        f"{label} (p50 {per_query[label]['p50_ms']:,.0f} ms, {len(samples)} runs)",
                        per_query[label]["p99_ms"],
                        "ms (p99)",
                        target="< 50",
                        met=per_query[label]["p99_ms"] < TARGET_MS,
                    )
                )
        finally:
            client.close()
    floors, plans = storage_floor(ds.url, project, queries, max(3, min(repeat, 10)))
    floor = [t for samples in floors.values() for t in samples]
    finest = finest_floor(ds.url, project, int(p.get("finest_repeat", 2)))
    for label, plan in plans.items():
        per_query[label].update(plan)
        per_query[label]["floor_p50_ms"] = percentile(floors[label], 50) * 1000
        per_query[label]["floor_p99_ms"] = percentile(floors[label], 99) * 1000
    p99 = percentile(all_samples, 99) * 1000
    floor_p99 = percentile(floor, 99) * 1000
    dims = workload.experiments * workload.skus * workload.stages
    # Memory of the roll-ups against the finest totals (MEMORY USAGE, at the end of the load).
    final = ds.checkpoints[-1]
    rollup_bytes = final.get("ru", 0)
    finest_bytes = final.get("tot", 0)
    rows.append(
        row(
            "finest-layout floor: HGETALL of every day's totals (before roll-ups), p50",
            percentile(finest, 50) * 1000,
            "ms",
        )
    )
    rows.append(
        row(
            f"roll-ups memory, MB ({rollup_bytes / workload.days / 1e3:,.0f} kB/day; finest "
            f"totals {finest_bytes / 1e6:,.0f} MB)",
            rollup_bytes / 1e6,
            "MB",
        )
    )
    return result(
        "queries",
        figure=p99,
        unit="ms (p99)",
        ceiling=floor_p99,
        ceiling_label="storage floor: HGETALL of the hashes each query's plan reads, p99 ms",
        ratio=p99 / floor_p99 if floor_p99 else None,
        ratio_label="query p99 / storage-fetch p99",
        target="p99 < 50 ms",
        met=p99 < TARGET_MS,
        details={
            "events": n,
            "days": workload.days,
            "cells_per_day": dims,
            "samples": len(all_samples),
            "p50_ms": percentile(all_samples, 50) * 1000,
            "healthz_p99_ms": percentile(health, 99) * 1000,
            "storage_floor_p50_ms": percentile(floor, 50) * 1000,
            "finest_floor_p50_ms": percentile(finest, 50) * 1000,
            "rollup_bytes": rollup_bytes,
            "rollup_bytes_per_day": rollup_bytes / workload.days,
            "finest_totals_bytes": finest_bytes,
            "load_seconds": ds.load_seconds,
            "load_events_per_s": ds.load_rate,
            "quiesce_seconds": quiesce_seconds,
            "per_query": per_query,
        },
        notes=[
            f"data loaded in-process through Ingestor.ingest ({n:,} events at "
            f"{ds.load_rate:,.0f} events/s), served by `trainledger serve`",
            "each query reads the smallest roll-up covering its group_by and filters "
            "(service/ledger/rollups.py): month hashes for whole months, day hashes for the "
            "rest; the finest per-day totals (90 x 12,000 cells x 3 fields, saturated from ~3M "
            "events on) only when no roll-up covers it",
        ],
        rows=rows,
    )
