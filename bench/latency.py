"""4. Single events: p50/p99 latency of one-event posts at a fixed 1,000 requests/s.

Server: `trainledger serve --workers 1` with its embedded Valkey (bench/server.py). Load: the
asyncio client of bench/loadgen.py in open loop: request i is sent at start + i/1000 s
whatever happened to the earlier ones, on a free keep-alive connection (a new one is opened
when all are busy), and its latency counts from that *scheduled* time to the last byte of
the answer. A server that stalls therefore shows every request the stall delayed (no
coordinated omission); a client that wakes late is charged to the figure too, which is why
the ceiling is measured the same way.

Every request is a JSON body with one event and a fresh id (so every one is priced and
applied, none is a duplicate). Warm-up: `warmup_seconds` at the same rate, not counted.
Ceiling: the same schedule and client against `GET /healthz` (no auth, no Redis): the floor of
client + uvicorn + Litestar on this machine. Target (issue): p99 < 5 ms. A second, shorter run
at a quarter of the rate (after the first one's backlog drained) is reported beside it: the
latency of one request when the server is not saturated.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from bench import loadgen
from bench.common import BENCH_CARD, percentile, result, row
from bench.server import Server, process_cpu_seconds

# low_rate: a second, shorter run at a quarter of the rate (informational: latency when the
# server is not saturated, to tell queueing from the cost of one request).
DEFAULTS: dict[str, Any] = {
    "rate": 1000.0,
    "seconds": 20.0,
    "warmup_seconds": 3.0,
    "low_rate": 250.0,
    "low_seconds": 10.0,
}
QUICK: dict[str, Any] = {**DEFAULTS, "seconds": 8.0, "warmup_seconds": 2.0, "low_seconds": 4.0}
TINY: dict[str, Any] = {
    "rate": 100.0,
    "seconds": 1.0,
    "warmup_seconds": 0.3,
    "low_rate": 50.0,
    "low_seconds": 0.5,
    "drain_seconds": 0.1,
}

TARGET_P99_MS = 5.0


def _event_requests(server: Server, n: int, tag: str) -> list[bytes]:
    when = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    out = []
    for i in range(n):
        body = msgspec.json.encode(
            {
                "id": f"lat-{tag}-{i:08d}",
                "time": when,
                "project": "bench",
                "sku": "gpu.h100.hour" if i % 5 else "storage.hot.gb_day",
                "quantity": "8",
                "stage": "pretrain",
                "experiment": f"exp-{i % 100:03d}",
                "owner": f"owner-{i % 10:02d}",
            }
        )
        out.append(loadgen.request_bytes("POST", "/v1/events", server.host, body, headers))
    return out


def _summary(res: loadgen.OpenLoopResult) -> dict[str, Any]:
    lat = res.latencies_s
    return {
        "sent": res.sent,
        "ok": res.ok,
        "errors": res.errors,
        "statuses": {str(k): v for k, v in res.statuses.items()},
        "seconds": res.seconds,
        "achieved_rps": res.ok / res.seconds if res.seconds else 0.0,
        "p50_ms": percentile(lat, 50) * 1000,
        "p90_ms": percentile(lat, 90) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "p999_ms": percentile(lat, 99.9) * 1000,
        "max_ms": max(lat) * 1000 if lat else float("nan"),
        "connections_used": res.max_connections,
        "late_sends": res.late_sends,
        "send_delay_p50_ms": percentile(res.send_delays_s, 50) * 1000,
        "send_delay_p99_ms": percentile(res.send_delays_s, 99) * 1000,
    }


async def _measure(server: Server, p: dict[str, Any]) -> dict[str, Any]:
    rate = float(p["rate"])
    tag = loadgen.run_tag()
    warm = _event_requests(server, int(rate * float(p["warmup_seconds"])), tag + "w")
    await loadgen.open_loop(server.host, server.port, warm, rate=rate)
    requests = _event_requests(server, int(rate * float(p["seconds"])), tag + "m")
    pids = server.worker_pids()
    cpu0 = process_cpu_seconds(pids)
    res = await loadgen.open_loop(server.host, server.port, requests, rate=rate)
    cpu = (process_cpu_seconds(pids) - cpu0) / res.seconds
    low = None
    if p.get("low_rate"):
        # Let the backlog of the first run drain before the second one starts.
        await asyncio.sleep(float(p.get("drain_seconds", 2.0)))
        low_requests = _event_requests(
            server, int(float(p["low_rate"]) * float(p["low_seconds"])), tag + "l"
        )
        low = _summary(
            await loadgen.open_loop(
                server.host, server.port, low_requests, rate=float(p["low_rate"])
            )
        )
    health_req = loadgen.request_bytes("GET", "/healthz", server.host, b"", {})
    n_health = max(1, int(rate * float(p["seconds"]) / 2))
    floor = await loadgen.open_loop(server.host, server.port, [health_req] * n_health, rate=rate)
    return {
        "events": _summary(res),
        "healthz": _summary(floor),
        "server_cpu": cpu,
        "events_low_rate": low,
    }


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    with Server(workers=1) as server:
        server.put_card(BENCH_CARD)
        m = runner(_measure(server, p))
    ev, hz = m["events"], m["healthz"]
    met = ev["p99_ms"] < TARGET_P99_MS and ev["errors"] == 0
    rows = [
        row("p50", ev["p50_ms"], "ms", ceiling=hz["p50_ms"], ratio=ev["p50_ms"] / hz["p50_ms"]),
        row(
            "p99",
            ev["p99_ms"],
            "ms",
            ceiling=hz["p99_ms"],
            ratio=ev["p99_ms"] / hz["p99_ms"],
            target="< 5 ms",
            met=met,
        ),
        row("p99.9", ev["p999_ms"], "ms", ceiling=hz["p999_ms"]),
        row("max", ev["max_ms"], "ms", ceiling=hz["max_ms"]),
        row(
            f"achieved rate (offered {p['rate']:,.0f}/s)",
            ev["achieved_rps"],
            "req/s",
            ceiling=hz["achieved_rps"],
        ),
    ]
    low = m["events_low_rate"]
    if low is not None:
        rows.append(
            row(
                f"p99 at {p['low_rate']:,.0f} req/s (p50 {low['p50_ms']:,.1f} ms)",
                low["p99_ms"],
                "ms",
                ceiling=hz["p99_ms"],
                ratio=low["p99_ms"] / hz["p99_ms"] if hz["p99_ms"] else None,
            )
        )
    return result(
        "latency",
        figure=ev["p99_ms"],
        unit="ms (p99)",
        ceiling=hz["p99_ms"],
        ceiling_label="GET /healthz at the same rate, same client: p99 ms (HTTP floor)",
        ratio=ev["p99_ms"] / hz["p99_ms"] if hz["p99_ms"] else None,
        ratio_label="single-event p99 / healthz p99",
        target="p99 < 5 ms at 1,000 requests/s (open loop)",
        met=met,
        details={**m, "rate": p["rate"], "seconds": p["seconds"]},
        notes=[
            "open loop: latency from each request's scheduled send time",
            "client, server and Valkey share the machine's 2 cores",
        ],
        rows=rows,
    )
