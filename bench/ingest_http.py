"""3. Ingest over HTTP: sustained events/s posting 5,000-event batches to the real server.

Server: `trainledger serve --workers 1` in a subprocess with its own embedded Valkey
(bench/server.py), the benchmark rate card, and nothing else. Load: wrk (one thread, four
keep-alive connections, closed loop) posting `templates` (8) pre-encoded 5,000-event bodies
in turn, whose ids are made fresh for every request by splicing in an 8-byte prefix
(bench/loadgen.py); without wrk on the machine, the same with the lean asyncio client. The
bodies are different random draws over the same day (each touches ~4,400 of the day's 12,000
totals cells), so the totals fold of the server (service/ledger/folding.py) merges no more than
it would for a scheduler's stream; one body posted again and again would let it merge more.
JSON and msgpack are run one after the other for `seconds` each, after two untimed warm-up
posts. After each run, one `GET /v1/costs` folds whatever is still queued: its time
(`drain_seconds`) and a check that the totals hold every accepted event are recorded.

Figure: 2xx answers x 5,000 / elapsed seconds, as wrk counts them (batches still in flight
when wrk stops are not counted); the accepted counter the server keeps in Valkey is read
before and after as a cross-check. Ceiling: the service's decoder on the same body, in the same
run (bench/decode.py `decode_rate`: `decode_wire_batch`, the decode these bodies get on the
HTTP path since the fourth session; `decode_events` before, a slower one; garbage collector
on, as in the server). Also recorded: CPU seconds of the server's worker, of its folding
process, of its Valkey and of Valkey's append-only-file rewrites (forked children, counted as
each ends) per second of load, and the share of the whole machine's CPU that was busy. Then,
informational: JSON on a second project that keeps `budgets` (3) budgets (`BUDGETS`: what a
project watching its spend might keep; their alerts are never reached), and JSON once more
with `more_connections` (8): the same worker with more batches in flight.
Target (issue): >= 250,000 events/s on this 2-core machine, and >= 30 % of the decode rate.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench import loadgen
from bench.common import BENCH_CARD, CONTENT_TYPE, EventFactory, Workload, encode, result, row
from bench.decode import decode_rate
from bench.server import Server, machine_cpu_seconds, process_cpu_seconds

if TYPE_CHECKING:
    from collections.abc import Sequence

DEFAULTS: dict[str, Any] = {
    "batch": 5_000,
    "seconds": 20.0,
    "connections": 4,
    "workers": 1,
    "formats": ("json", "msgpack"),
    "tool": "auto",
    "decode_repeat": 10,
    "templates": 8,
    # Informational, beside the headline: JSON again with more connections (more batches in
    # flight at once); 0 skips it.
    "more_connections": 8,
    # Informational: JSON again on a project with this many budgets (of BUDGETS); 0 skips it.
    "budgets": 3,
}
QUICK: dict[str, Any] = {**DEFAULTS, "seconds": 6.0, "decode_repeat": 5}
TINY: dict[str, Any] = {
    **DEFAULTS,
    "budgets": 1,
    "batch": 50,
    "seconds": 1.0,
    "connections": 2,
    "decode_repeat": 2,
    "templates": 2,
    "more_connections": 0,
}

TARGET_RATE = 250_000.0
TARGET_SHARE = 0.30


@dataclass
class IngestRun:
    fmt: str
    batch: int
    events_per_s: float
    requests: int
    errors: int
    seconds: float
    accepted_delta: int
    latency_p50_ms: float
    latency_p99_ms: float
    server_cpu: float  # CPU seconds of the HTTP worker(s) per wall second
    valkey_cpu: float  # CPU seconds of Valkey per wall second
    fold_cpu: float  # CPU seconds of the folding process per wall second
    # CPU seconds per wall second of Valkey's append-only-file rewrites (forked children,
    # counted as each ends), and how many rewrites ended in the run.
    rewrite_cpu: float
    rewrites: int
    # Share of the whole machine's CPU time that was busy during the load (all processes,
    # the load generator and the kernel included): 1.0 = every core busy all the time.
    machine_busy: float
    tool: str
    body_bytes: int
    # Valkey's own account of the load: microseconds per accepted event, by command
    # (EVALSHA is the ingest script, everything it runs included).
    valkey_us_per_event: dict[str, float]
    # After the load: how long one query took to fold what was still queued, and whether the
    # totals then held every accepted event.
    drain_seconds: float = 0.0
    totals_match: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# Budgets for the informational run: what a project watching its spend might keep (alerts at
# 50 and 90 %; the amounts are never reached, so no alert fires during the run).
BUDGETS: tuple[dict[str, Any], ...] = (
    {"period": "monthly"},
    {"period": "weekly", "scope": {"stage": "pretrain"}},
    {"period": "monthly", "scope": {"category": "storage"}, "growth": {"trailing_days": 7}},
)
BUDGETED_PROJECT = "bench-budgets"


def template(workload: Workload, batch: int, count: int = 1) -> list[list[dict[str, Any]]]:
    """`count` different batches whose ids all start with loadgen.MARKER (replaced per
    request)."""
    factory = EventFactory(workload, tag=loadgen.MARKER.decode())
    return [factory.batch(b, batch) for b in range(count)]


def _drain(server: Server, project: str) -> tuple[float, bool]:
    """Time one cost query (it folds every queued batch first); whether its events equal the
    accepted counter. Batches still in flight when the load generator stopped are waited for
    first (the accepted counter stops moving)."""
    accepted = _accepted(server, project)
    for _ in range(600):  # a bound on waiting
        time.sleep(0.2)
        now = _accepted(server, project)
        if now == accepted:
            break
        accepted = now
    t0 = time.perf_counter()
    status, answer = server.request("GET", f"/v1/costs?project={project}&group_by=stage")
    seconds = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"cost query failed: {status} {str(answer)[:300]}")
    return seconds, int(answer["total_events"]) == _accepted(server, project)


def _commandstats(server: Server, reset: bool = False) -> dict[str, dict[str, float]]:
    import redis

    client = redis.Redis.from_url(server.redis_url)
    try:
        if reset:
            client.config_resetstat()
            return {}
        return {
            k.removeprefix("cmdstat_"): v
            for k, v in client.info("commandstats").items()
            if isinstance(v, dict)
        }
    finally:
        client.close()


def _rewrites(server: Server) -> int:
    """Append-only-file rewrites Valkey has completed since it started."""
    import redis

    client = redis.Redis.from_url(server.redis_url)
    try:
        return int(client.info("persistence").get("aof_rewrites", 0))
    finally:
        client.close()


def _accepted(server: Server, project: str) -> int:
    import redis
    from trainledger.storage.keys import Keys

    client = redis.Redis.from_url(server.redis_url)
    try:
        return int(client.hget(Keys.meta(project), "accepted") or 0)
    finally:
        client.close()


def post_load(
    server: Server,
    body: bytes | Sequence[bytes],
    fmt: str,
    *,
    batch: int,
    seconds: float,
    connections: int,
    tool: str = "auto",
    project: str = "bench",
) -> IngestRun:
    """Closed-loop batch posting against a running server; see the module docstring."""
    bodies = [body] if isinstance(body, bytes) else list(body)
    makers = [loadgen.spliced(b) for b in bodies]
    make = makers[0]
    tag = loadgen.run_tag()
    # Warm-up: caches (token, rate card catalog, budgets) and connections of the server.
    for i in range(2):
        status, answer = server.request(
            "POST", "/v1/events", make(f"{tag}w{i:05d}"), content_type=CONTENT_TYPE[fmt]
        )
        if status != 200 or answer.get("accepted") != batch:
            raise RuntimeError(f"warm-up post failed: {status} {str(answer)[:300]}")
    pids = server.worker_pids()
    vpid = server.valkey_pid()
    fpid = server.fold_pid()
    accepted_before = _accepted(server, project)
    _commandstats(server, reset=True)
    cpu_before = process_cpu_seconds(pids)
    valkey = [vpid] if vpid else []
    vcpu_before = process_cpu_seconds(valkey)
    rcpu_before = process_cpu_seconds(valkey, reaped_children=True)
    rewrites_before = _rewrites(server)
    busy_before, all_before = machine_cpu_seconds()
    fcpu_before = process_cpu_seconds([fpid] if fpid else [])
    use_wrk = tool == "wrk" or (tool == "auto" and loadgen.have_wrk())
    if use_wrk:
        res = loadgen.wrk_post(
            server.host,
            server.port,
            "/v1/events",
            bodies,
            CONTENT_TYPE[fmt],
            server.token,
            connections=connections,
            seconds=seconds,
        )
    else:
        headers = {"Authorization": f"Bearer {server.token}", "Content-Type": CONTENT_TYPE[fmt]}
        run_tag = loadgen.run_tag()

        def make_request(i: int) -> bytes:
            return loadgen.request_bytes(
                "POST",
                "/v1/events",
                server.host,
                makers[i % len(makers)](f"{run_tag}{i:06d}"),
                headers,
            )

        res = asyncio.run(
            loadgen.closed_loop(
                server.host, server.port, make_request, connections=connections, seconds=seconds
            )
        )
    cpu = process_cpu_seconds(pids) - cpu_before
    vcpu = process_cpu_seconds(valkey) - vcpu_before
    busy_after, all_after = machine_cpu_seconds()
    rcpu = process_cpu_seconds(valkey, reaped_children=True) - rcpu_before
    rewrites = _rewrites(server) - rewrites_before
    fcpu = process_cpu_seconds([fpid] if fpid else []) - fcpu_before
    accepted_delta = _accepted(server, project) - accepted_before
    stats = _commandstats(server)
    per_event = {
        name: float(v.get("usec", 0)) / accepted_delta
        for name, v in sorted(stats.items(), key=lambda kv: -float(kv[1].get("usec", 0)))[:8]
        if accepted_delta
    }
    if res.requests == 0:
        raise RuntimeError(f"no batch was accepted in {seconds} s ({res.errors} errors)")
    drain_seconds, totals_match = _drain(server, project)
    return IngestRun(
        fmt=fmt,
        batch=batch,
        events_per_s=res.requests * batch / res.seconds,
        requests=res.requests,
        errors=res.errors,
        seconds=res.seconds,
        accepted_delta=accepted_delta,
        latency_p50_ms=res.latency_p50_ms,
        latency_p99_ms=res.latency_p99_ms,
        server_cpu=cpu / res.seconds,
        valkey_cpu=vcpu / res.seconds,
        fold_cpu=fcpu / res.seconds,
        rewrite_cpu=rcpu / res.seconds,
        rewrites=rewrites,
        machine_busy=(busy_after - busy_before) / max(all_after - all_before, 1e-9),
        tool=res.tool,
        body_bytes=len(bodies[0]),
        valkey_us_per_event=per_event,
        drain_seconds=drain_seconds,
        totals_match=totals_match,
    )


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    batch = int(p["batch"])
    workload = Workload(days=1)
    batches = template(workload, batch, int(p["templates"]))
    bodies = {fmt: [encode(events, fmt) for events in batches] for fmt in p["formats"]}
    del batches
    runs: dict[str, IngestRun] = {}
    with Server(workers=int(p["workers"])) as server:
        server.put_card(BENCH_CARD)
        for fmt, body in bodies.items():
            runs[fmt] = post_load(
                server,
                body,
                fmt,
                batch=batch,
                seconds=float(p["seconds"]),
                connections=int(p["connections"]),
                tool=str(p["tool"]),
            )
        budgeted = None
        if int(p["budgets"]) and "json" in bodies:
            for i, spec in enumerate(BUDGETS[: int(p["budgets"])]):
                budget = {"project": BUDGETED_PROJECT, "name": f"b{i}", "amount": "1000000000"}
                budget |= {"thresholds": [50, 90], **spec}
                status, answer = server.request("POST", "/v1/budgets", budget)
                if status != 201:
                    raise RuntimeError(f"POST budget: {status} {answer}")
            budgeted_bodies = [
                encode(events, "json")
                for events in template(
                    Workload(days=1, project=BUDGETED_PROJECT), batch, int(p["templates"])
                )
            ]
            budgeted = post_load(
                server,
                budgeted_bodies,
                "json",
                batch=batch,
                seconds=float(p["seconds"]),
                connections=int(p["connections"]),
                tool=str(p["tool"]),
                project=BUDGETED_PROJECT,
            )
        more = int(p["more_connections"])
        wider = None
        if more and "json" in bodies:
            wider = post_load(
                server,
                bodies["json"],
                "json",
                batch=batch,
                seconds=float(p["seconds"]),
                connections=more,
                tool=str(p["tool"]),
            )
    # The ceiling, measured in this run on the very same bodies (server stopped: no contention).
    decode_rates = {
        fmt: decode_rate(
            loadgen.spliced(body[0])("dc000000"), fmt, batch, int(p["decode_repeat"]), 1.0
        )
        for fmt, body in bodies.items()
    }
    rows = []
    all_met = True
    for fmt, r in runs.items():
        share = r.events_per_s / decode_rates[fmt]
        met = r.events_per_s >= TARGET_RATE and share >= TARGET_SHARE
        all_met = all_met and met
        rows.append(
            row(
                f"{fmt} {batch:,}-event batches ({r.tool}, {p['connections']} conns)",
                r.events_per_s,
                "events/s",
                ceiling=decode_rates[fmt],
                ratio=share,
                target=">= 250k/s and >= 30 % of decode",
                met=met,
            )
        )
    if wider is not None:
        rows.append(
            row(
                f"json, {wider.batch:,}-event batches ({wider.tool}, {more} conns; informational)",
                wider.events_per_s,
                "events/s",
                ceiling=decode_rates["json"],
                ratio=wider.events_per_s / decode_rates["json"],
            )
        )
    if budgeted is not None:
        rows.append(
            row(
                f"json, {int(p['budgets'])} budget{'s' * (int(p['budgets']) != 1)} on the "
                f"project ({budgeted.tool}, "
                f"{p['connections']} conns; informational)",
                budgeted.events_per_s,
                "events/s",
                ceiling=decode_rates["json"],
                ratio=budgeted.events_per_s / decode_rates["json"],
            )
        )
    head = runs.get("json") or next(iter(runs.values()))
    return result(
        "ingest_http",
        figure=head.events_per_s,
        unit="events/s",
        ceiling=decode_rates[head.fmt],
        ceiling_label="decode_wire_batch of the same body, events/s (same run)",
        ratio=head.events_per_s / decode_rates[head.fmt],
        ratio_label="HTTP ingest / decode-only (JSON headline; msgpack in rows)",
        target=">= 250,000 events/s and >= 30 % of the decode-only rate",
        met=all_met,
        details={
            "batch": batch,
            "workers": p["workers"],
            "connections": p["connections"],
            "seconds": p["seconds"],
            "templates": p["templates"],
            "runs": {fmt: r.as_dict() for fmt, r in runs.items()},
            "more_connections": wider.as_dict() if wider is not None else None,
            "budgets": budgeted.as_dict() if budgeted is not None else None,
            "decode_events_per_s": decode_rates,
        },
        notes=[
            "load generator on the same 2-core machine as the server and its Valkey",
            "server_cpu / valkey_cpu / fold_cpu / rewrite_cpu in details: CPU seconds per second"
            " of load; machine_busy: share of all cores busy during it",
        ],
        rows=rows,
    )
