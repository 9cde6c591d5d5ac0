"""The phases of `bench.instructions`, run by one tree's python from that tree's root.

Not a module of the `bench` package at run time: `bench/instructions.py` starts it with the
tree's `.venv/bin/python -c` (so the tree's root heads sys.path and `import service` finds the
old layout's package) and passes its settings as one JSON argument. It imports the service by
the tree's layout and the workload from bench/common.py by file path (a tree before issue 16
has a bench/ of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from typing import Any

import redis.asyncio

# Where each thing lives, by layout (`service`: before issue 16; `trainledger`: after).
WHERE: dict[str, dict[str, str]] = {
    "service": {
        "create_app": "service.http.app:create_app",
        "Store": "service.storage.redis_store:Store",
        "settle": "service.domain.folding:settle",
        "EmbeddedValkey": "service.storage.embedded:EmbeddedValkey",
        "ensure_admin_token": "service.cli.serve:ensure_admin_token",
        "tune_garbage_collector": "service.runtime:tune_garbage_collector",
    },
    "trainledger": {
        "create_app": "trainledger.http.app:create_app",
        "Store": "trainledger.stores:Stores",
        "settle": "trainledger.ledger.folding:settle",
        "EmbeddedValkey": "trainledger.storage.embedded:EmbeddedValkey",
        # cli/local_store.py since the CLI starts light; cli/serve.py before.
        "ensure_admin_token": "trainledger.cli.local_store:ensure_admin_token"
        "|trainledger.cli.serve:ensure_admin_token",
        "tune_garbage_collector": "trainledger.runtime:tune_garbage_collector",
    },
}

BUDGETED = "bench-budgets"
# As bench/ingest_http.py's BUDGETS: never reached, so no alert fires.
BUDGETS: tuple[dict[str, Any], ...] = (
    {"period": "monthly"},
    {"period": "weekly", "scope": {"stage": "pretrain"}},
    {"period": "monthly", "scope": {"category": "storage"}, "growth": {"trailing_days": 7}},
)
QUERIES = (
    "group_by=stage",
    "group_by=experiment",
    "group_by=sku",
    "group_by=day",
    "group_by=stage,sku",
    "group_by=experiment,sku&from={last7}",
    "group_by=category&from={last30}",
)
ASGI = {"version": "3.0", "spec_version": "2.3"}


def load(spec: str) -> Any:
    """`module:name`, or the first of `a:x|b:y` that the tree has."""
    *earlier, last = spec.split("|")
    for choice in earlier:
        module, _, name = choice.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    module, _, name = last.partition(":")
    return getattr(importlib.import_module(module), name)


def load_common() -> Any:
    spec = spec_from_file_location("_tl_bench_common", Path(__file__).with_name("common.py"))
    assert spec is not None and spec.loader is not None
    module = module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the Structs' annotations through it
    spec.loader.exec_module(module)
    return module


class Callgrind:
    """Callgrind's client requests (a no-op without valgrind or without the shim)."""

    def __init__(self, shim: str | None) -> None:
        self.lib = ctypes.CDLL(shim) if shim else None
        if self.lib is not None:
            self.lib.tl_dump.argtypes = [ctypes.c_char_p]
        self.on = bool(self.lib is not None and self.lib.tl_on_valgrind())

    def start(self) -> None:
        if self.lib is not None:
            self.lib.tl_start()

    def zero(self) -> None:
        if self.lib is not None:
            self.lib.tl_zero()

    def dump(self, why: str) -> None:
        if self.lib is not None:
            self.lib.tl_dump(why.encode())


class Asgi:
    """Requests straight into the ASGI app: the whole middleware stack, no socket."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        path, _, query = path.partition("?")
        headers = [(b"host", b"bench"), (b"authorization", b"Bearer " + self.token)]
        if body:
            headers += [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ]
        scope = {
            "type": "http",
            "asgi": ASGI,
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        done = asyncio.Event()
        sent = False
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    done.set()

        await self.app(scope, receive, send)
        return status, b"".join(chunks)

    async def ok(self, method: str, path: str, body: bytes = b"", ctype: str = "") -> Any:
        status, answer = await self.request(method, path, body, ctype or "application/json")
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path}: {status} {answer[:500]!r}")
        return json.loads(answer) if answer else None


async def start_app(app: Any) -> tuple[asyncio.Task[None], asyncio.Queue[Any]]:
    """Run the app's lifespan start-up (as uvicorn does); the task lives until shutdown."""
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    outbox: asyncio.Queue[Any] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    scope = {"type": "lifespan", "asgi": ASGI, "state": {}}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    answer = await outbox.get()
    if answer["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"start-up failed: {answer}")
    return task, inbox


def post_events(asgi: Asgi, bodies: list[bytes], ctype: str) -> Callable[[], Awaitable[int]]:
    async def run() -> int:
        accepted = 0
        for body in bodies:
            report = await asgi.ok("POST", "/v1/events", body, ctype)
            accepted += int(report["accepted"])
        return accepted

    return run


def environment(data_dir: Path) -> None:
    from cryptography.fernet import Fernet

    os.environ |= {
        "TRAINLEDGER_DATA_DIR": str(data_dir),
        "TRAINLEDGER_RATE_LIMIT_PER_SECOND": "1000000",  # as bench/server.py
        "TRAINLEDGER_FOLD_IN_WORKERS": "0",  # as `serve` sets it: its folding process folds
        "TRAINLEDGER_SECRET_KEY": Fernet.generate_key().decode(),
        "TRAINLEDGER_LOG_FORMAT": "json",
        "TRAINLEDGER_LOG_LEVEL": "info",
        # No probe of Redis from /healthz however slowly valgrind runs the phases.
        "TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS": "100000000",
    }
    os.environ.pop("TRAINLEDGER_REDIS_URL", None)


def workloads(common: Any, cfg: dict[str, Any]) -> dict[str, tuple[list[bytes], str]]:
    """The bodies of every posting phase (and of the warm-up), fresh ids throughout."""
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    size, n = int(cfg["size"]), int(cfg["batches"])
    plain = common.EventFactory(common.Workload(days=1), end=end)
    budgeted = common.EventFactory(common.Workload(days=1, project=BUDGETED), end=end)
    when = (end - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    singles = [
        common.encode(
            {
                "id": f"one-{i:08d}",
                "time": when,
                "project": "bench",
                "sku": "gpu.h100.hour" if i % 5 else "storage.hot.gb_day",
                "quantity": "8",
                "stage": "pretrain",
                "experiment": f"exp-{i % 100:03d}",
                "owner": f"owner-{i % 10:02d}",
            },
            "json",
        )
        for i in range(int(cfg["requests"]) + 1)
    ]
    json_, mp = "application/json", "application/msgpack"
    return {
        "warm-json": ([common.encode(plain.batch(900, size), "json")], json_),
        "warm-msgpack": ([common.encode(plain.batch(901, size), "msgpack")], mp),
        "warm-budgets": ([common.encode(budgeted.batch(902, size), "json")], json_),
        "warm-single": (singles[:1], json_),
        "single": (singles[1:], json_),
        "json": ([common.encode(plain.batch(b, size), "json") for b in range(n)], json_),
        "msgpack": (
            [common.encode(plain.batch(100 + b, size), "msgpack") for b in range(n)],
            mp,
        ),
        "budgets": ([common.encode(budgeted.batch(b, size), "json") for b in range(n)], json_),
    }


def query_paths(rounds: int) -> list[str]:
    today = datetime.now(UTC).date()
    dates = {
        "last7": (today - timedelta(days=6)).isoformat(),
        "last30": (today - timedelta(days=29)).isoformat(),
    }
    return [f"/v1/costs?project=bench&{q.format(**dates)}" for _ in range(rounds) for q in QUERIES]


@contextlib.contextmanager
def frozen_clock() -> Iterator[None]:
    """`time.time` and `time.monotonic` stand still: the caches that expire by the clock (the
    token's, the rate card's revision) and the rate limiter's one-second window would
    otherwise add Redis round trips in proportion to how slowly the phase runs (valgrind runs
    it ~50 times slower, and slower still on a busy machine). Nothing in a phase sleeps."""
    real_time, real_monotonic = time.time, time.monotonic
    now, mono = real_time(), real_monotonic()
    time.time, time.monotonic = (lambda: now), (lambda: mono)
    try:
        yield
    finally:
        time.time, time.monotonic = real_time, real_monotonic


class GcWatch:
    """Collections per generation, and the time they took, while installed."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.collections[info["generation"]] += 1

    def snapshot(self) -> tuple[list[int], float]:
        return list(self.collections), self.seconds


async def start(cfg: dict[str, Any], url: str, data_dir: Path) -> tuple[Any, Any, Any, Any]:
    """The app as a `serve` worker has it, its background loops stopped; (app, lifespan task,
    its inbox, the token)."""
    where = WHERE[cfg["layout"]]
    bootstrap = load(where["Store"]).from_url(url)
    token = await load(where["ensure_admin_token"])(bootstrap, data_dir)
    await bootstrap.close()
    app = load(where["create_app"])(redis_url=url)
    mine = asyncio.current_task()
    lifespan, inbox = await start_app(app)
    # The sweep, the webhook worker, the reachability probe (and the folder, if any) wake on
    # timers; a phase must count only its own work.
    loops = {"sweep_forever", "DeliveryWorker.run", "StoreReachability.run", "Folder.run"}
    stopped = []
    for task in asyncio.all_tasks():
        name = getattr(task.get_coro(), "__qualname__", "")
        if task is not mine and task is not lifespan and name in loops:
            task.cancel()
            stopped.append(name)
    if "sweep_forever" not in stopped or "DeliveryWorker.run" not in stopped:
        raise RuntimeError(f"background loops not found: {stopped}")
    await asyncio.sleep(0)
    return app, lifespan, inbox, token


async def measure(cfg: dict[str, Any], url: str, data_dir: Path) -> dict[str, Any]:
    common = load_common()
    where = WHERE[cfg["layout"]]
    settle = load(where["settle"])
    app, lifespan, inbox, token = await start(cfg, url, data_dir)
    gc.collect()
    started: dict[str, Any] = {"objects": len(gc.get_objects()), "modules": len(sys.modules)}
    load(where["tune_garbage_collector"])()  # as `serve` does on start-up
    started["frozen"] = gc.get_freeze_count()
    asgi = Asgi(app, token)
    await asgi.ok("PUT", "/v1/rate-cards/default", json.dumps(common.BENCH_CARD).encode())
    for i, spec in enumerate(BUDGETS):
        budget: dict[str, Any] = {"project": BUDGETED, "name": f"b{i}", "amount": "1000000000"}
        budget |= {"thresholds": [50, 90], **spec}
        await asgi.ok("POST", "/v1/budgets", json.dumps(budget).encode())
    bodies = workloads(common, cfg)
    store = app.state.store
    # Warm-up outside the counts: caches (token, catalog, budgets), scripts, connections.
    for name in ("warm-json", "warm-msgpack", "warm-budgets", "warm-single"):
        await post_events(asgi, *bodies[name])()
    await asgi.ok("GET", "/healthz")
    for project in ("bench", BUDGETED):
        await settle(store, project)
    await asgi.ok("GET", query_paths(1)[0])

    async def fold() -> int:
        return sum([await settle(store, p) for p in ("bench", BUDGETED)])

    async def healthz() -> int:
        for _ in range(int(cfg["requests"])):
            await asgi.ok("GET", "/healthz")
        return int(cfg["requests"])

    async def queries() -> int:
        paths = query_paths(int(cfg["query_rounds"]))
        for path in paths:
            await asgi.ok("GET", path)
        return len(paths)

    async def empty() -> int:
        return 1

    posted = 0
    work: dict[str, Callable[[], Awaitable[int]]] = {
        "empty": empty,
        "healthz": healthz,
        "single": post_events(asgi, *bodies["single"]),
        "json": post_events(asgi, *bodies["json"]),
        "msgpack": post_events(asgi, *bodies["msgpack"]),
        "budgets": post_events(asgi, *bodies["budgets"]),
        "fold": fold,
        "queries": queries,
    }
    valkey = redis.asyncio.Redis.from_url(url)
    callgrind = Callgrind(cfg["shim"])
    callgrind.start()
    watch = GcWatch()
    phases = []
    for name, run in work.items():
        await valkey.config_resetstat()
        before, gc_before = watch.snapshot(), time.perf_counter()
        with frozen_clock():
            callgrind.zero()
            units = await run()
            callgrind.dump(name)
        after = watch.snapshot()
        seconds = time.perf_counter() - gc_before
        commands = {
            name.removeprefix("cmdstat_"): {"calls": int(row["calls"]), "usec": int(row["usec"])}
            for name, row in (await valkey.info("commandstats")).items()
            if not name.startswith(("info", "config"))
        }
        if name == "fold":
            units = posted  # the events of the batches folded (settle counts batches)
        elif name in ("single", "json", "msgpack", "budgets"):
            posted += units
        phases.append(
            {
                "name": name,
                "units": units,
                "collections": [a - b for a, b in zip(after[0], before[0], strict=True)],
                "gc_seconds": after[1] - before[1],
                "seconds": seconds,
                "valkey_commands": commands,
                "valkey_calls": sum(c["calls"] for c in commands.values()),
            }
        )
    await valkey.aclose()
    await inbox.put({"type": "lifespan.shutdown"})
    await lifespan
    return {"layout": cfg["layout"], "valgrind": callgrind.on, "started": started, "phases": phases}


def main(cfg: dict[str, Any]) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="tl-bench-instr-data-"))
    environment(data_dir)
    valkey = load(WHERE[cfg["layout"]]["EmbeddedValkey"])(data_dir)
    try:
        report = asyncio.run(measure(cfg, valkey.start(), data_dir))
    finally:
        valkey.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    (Path(cfg["out"]) / "phases.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
