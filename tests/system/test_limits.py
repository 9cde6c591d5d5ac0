"""Every operation of the OpenAPI document that takes a body, attacked over real HTTP.

Driven from `openapi/openapi.json`: an endpoint added to the spec is covered without editing
this file. Each operation, in each content type it declares, gets a body over the size
limit, a deeply nested body, a body as large as allowed that is one huge array of empty
objects, a body of the wrong type and a body that is not JSON/msgpack at all. Each must get
a 4xx problem answer (never a 5xx, never a 401/403: the admin token is let in, so the body is
what is judged), and meanwhile the worker must go on answering.

"Goes on answering" is measured on the one worker of a `trainledger serve` process: a probe
thread asks `/healthz` every few milliseconds, and the slowest probe in flight during each
attack is compared with the probe's idle median (no wall-clock bound): it must stay below
`STALL_RATIO` (300) times that. A stall past the bound counts only if it comes back when the
attack is sent twice more, so that a loaded 2-core machine's scheduling hiccups do not fail
the test while a loop held by a request's work (which comes back every time) does. Before
events were counted ahead of decoding, one 4 MiB array of `{}` held the loop for seconds
(thousands of times the idle probe); a 100,000-deep JSON body was a 500 on every JSON route.

The server's peak memory (VmHWM) is read from /proc before and after: it may grow by a
bounded multiple of the body limit, not by what decoding a million items would take.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from tests.conftest import (
    TEST_SECRET_KEY,
    free_port,
    make_admin_token,
    sync_client,
    wait_until_ready,
)

REPO = Path(__file__).resolve().parents[2]
SPEC = json.loads((REPO / "openapi" / "openapi.json").read_text())
BODY_LIMIT = 4 * 1024 * 1024  # TRAINLEDGER_MAX_BODY_BYTES of the server under test (ingest)
JSON_LIMIT = 1024 * 1024  # TRAINLEDGER_MAX_JSON_BODY_BYTES (every other route; the default)
EVENT_LIMIT = 50_000  # TRAINLEDGER_MAX_BATCH_EVENTS (the default)
NESTING = 100_000
# How many times its idle median a /healthz probe may wait while an attack is in flight. The
# largest work a refused body may still cost is Litestar's decoding of a JSON body at the
# 1 MiB limit (150 ms measured on a loaded 2-core machine, 40-150x its probe), and the
# exact path's report of a batch at the event limit (~100x); the work this guards against
# was 500-10,000x (a 4 MiB array of `{}` held the loop for seconds).
STALL_RATIO = 300

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # path parameters filled in
    query: dict[str, str]
    media_types: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _value_for(param: dict[str, Any]) -> str:
    """A value that the parameter's schema accepts (pattern-checked), so the request gets as
    far as its body."""
    schema = param.get("schema", {})
    pattern = schema.get("pattern")
    for candidate in ("limits", "limits-1", "L1"):
        if pattern is None or re.search(pattern, candidate):
            return candidate
    raise AssertionError(f"no value for parameter {param['name']!r} matches {pattern}")


def operations_with_bodies() -> list[Operation]:
    found = []
    for path, item in SPEC["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "requestBody" not in op:
                continue
            query: dict[str, str] = {}
            filled = path
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    filled = filled.replace("{" + param["name"] + "}", _value_for(param))
                elif param["in"] == "query" and param.get("required"):
                    query[param["name"]] = _value_for(param)
            media = tuple(sorted(op["requestBody"]["content"]))
            found.append(Operation(method.upper(), filled, query, media))
    return found


def attacks(media_type: str) -> Iterator[tuple[str, bytes]]:
    """(name, body) of each attack in this content type; the bodies as large as allowed are
    made for both limits (the route's limit is not in the spec)."""
    yield from _attacks(media_type, JSON_LIMIT)
    # As many items as a batch may hold (each a rejection with its reason, on the ingest
    # route): the most work a body within every limit asks for.
    if "msgpack" in media_type:
        at_limit = b"\xdd" + EVENT_LIMIT.to_bytes(4, "big") + b"\x80" * EVENT_LIMIT
    elif "ndjson" in media_type:
        at_limit = b"{}\n" * EVENT_LIMIT
    else:
        at_limit = b"[" + b",".join([b"{}"] * EVENT_LIMIT) + b"]"
    yield "array of empty objects at the event limit", at_limit
    for name, body in _attacks(media_type, BODY_LIMIT):
        if name in ("over the size limit", "huge array of empty objects"):
            yield f"{name} (ingest limit)", body


def _attacks(media_type: str, limit: int) -> Iterator[tuple[str, bytes]]:
    if "msgpack" in media_type:
        n = limit - 5
        yield (
            "over the size limit",
            b"\xdd" + (limit).to_bytes(4, "big") + b"\x80" * (limit + 1),
        )
        yield "deeply nested", b"\x91" * NESTING + b"\xc0"
        yield "huge array of empty objects", b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n
        yield "wrong type", msgspec.msgpack.encode("not what this takes")
        yield "not msgpack", b"\xc1\xc1\xc1"
        return
    if "ndjson" in media_type:
        yield "over the size limit", b"{}\n" * (limit // 3 + 1)
        yield "deeply nested", b"[" * NESTING + b"]" * NESTING + b"\n"
        yield "huge array of empty objects", b"{}\n" * ((limit - 1) // 3)
        yield "wrong type", b'"not what this takes"\n'
        yield "not JSON", b"\xff{\n"
        return
    n = (limit - 2) // 3
    yield "over the size limit", b"[" + b"{}," * (limit // 3) + b"{}]"
    yield "deeply nested", b"[" * NESTING + b"]" * NESTING
    yield "deeply nested object", b'{"a":' * NESTING + b"1" + b"}" * NESTING
    yield "huge array of empty objects", b"[" + b",".join([b"{}"] * n) + b"]"
    yield "wrong type", b'"not what this takes"'
    yield "not JSON", b"\xff{"


class Prober:
    """Asks /healthz over and over in a thread of its own; keeps each latency (seconds)."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=120)
        self.latencies: list[float] = []
        self.started: list[float] = []  # perf_counter at each probe's start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def probe(self) -> float:
        start = time.perf_counter()
        r = self.client.get("/healthz")
        took = time.perf_counter() - start
        assert r.status_code == 200, r.text
        return took

    def settle(self, after: float) -> None:
        """Wait until a probe that started after `after` (perf_counter) has been answered: every
        probe in flight before then is counted."""
        deadline = time.perf_counter() + 600
        while time.perf_counter() < deadline:
            done = len(self.latencies)
            if done and self.started[done - 1] > after:
                return
            time.sleep(0.005)
        raise AssertionError("the /healthz probe got no answer for 10 minutes")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.started.append(time.perf_counter())
            self.latencies.append(self.probe())
            self._stop.wait(0.005)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=300)


def peak_rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert match, status
    return int(match.group(1)) * 1024


@pytest.fixture
def served(embedded_valkey: str, tmp_path: Path) -> Iterator[tuple[str, str, int]]:
    """(base URL, admin token, pid) of a one-worker `trainledger serve` on a clean Valkey."""
    client = sync_client(embedded_valkey)
    client.flushdb()
    client.close()
    import asyncio

    token = asyncio.run(make_admin_token(embedded_valkey))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env.update(
        TRAINLEDGER_REDIS_URL=embedded_valkey,
        TRAINLEDGER_SECRET_KEY=TEST_SECRET_KEY,  # an external Redis needs one given
        TRAINLEDGER_DATA_DIR=str(tmp_path),
        TRAINLEDGER_MAX_BODY_BYTES=str(BODY_LIMIT),
        TRAINLEDGER_MAX_JSON_BODY_BYTES=str(JSON_LIMIT),
        TRAINLEDGER_MAX_BATCH_EVENTS=str(EVENT_LIMIT),
        TRAINLEDGER_RATE_LIMIT_PER_SECOND="0",
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(proc, base, log.read_text)
        yield base, token, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_spec_lists_the_body_taking_operations() -> None:
    ops = {str(op) for op in operations_with_bodies()}
    # The driver reads the spec: these are there, and so is anything added later.
    assert "POST /v1/events" in ops and "PUT /v1/rate-cards/limits" in ops
    assert len(ops) >= 10


Attack = tuple[Operation, str, str, bytes]  # operation, media type, name, body


def all_attacks() -> list[Attack]:
    return [
        (op, media, name, body)
        for op in operations_with_bodies()
        for media in op.media_types
        for name, body in attacks(media)
    ]


def worst_probe_during(prober: Prober, sent: float, answered: float) -> float:
    """The slowest probe that was waiting at some point while the attack was in flight."""
    return max(
        (
            took
            for start, took in zip(prober.started, prober.latencies, strict=False)
            if start <= answered and sent <= start + took
        ),
        default=0.0,
    )


def test_every_body_taking_operation_refuses_hostile_bodies_without_holding_the_worker(
    served: tuple[str, str, int],
) -> None:
    base, token, pid = served
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    stalls: dict[int, float] = {}  # attack index -> worst probe while it was in flight
    with httpx.Client(base_url=base, headers=headers, timeout=300) as client:

        def send(attack: Attack) -> tuple[httpx.Response, float, float]:
            op, media, _, body = attack
            sent = time.perf_counter()
            r = client.request(
                op.method, op.path, params=op.query, content=body, headers={"content-type": media}
            )
            return r, sent, time.perf_counter()

        prober = Prober(base)
        for _ in range(5):  # warm up (first requests import and compile things)
            prober.probe()
            client.post("/v1/events", json=[{}])
        idle = [prober.probe() for _ in range(50)]
        idle_median = statistics.median(idle)
        bound = STALL_RATIO * idle_median
        rss_before = peak_rss_bytes(pid)
        attacks_ = all_attacks()
        with prober:
            for index, attack in enumerate(attacks_):
                op, media, name, _ = attack
                r, sent, answered = send(attack)
                prober.settle(answered)  # the probes it held are answered and counted
                stalls[index] = worst_probe_during(prober, sent, answered)
                what = f"{op} [{media}] {name}: {r.status_code} {r.text[:300]!r}"
                if not 400 <= r.status_code < 500 or r.status_code in (401, 403):
                    failures.append(what)
                elif not r.headers.get("content-type", "").startswith("application/problem+json"):
                    failures.append(what + " (not a problem document)")
            assert len(prober.latencies) > len(attacks_)
            # A stall counts only if it comes back: the attack is sent twice more, and held
            # the worker if every probe's worst was past the bound (a busy machine's
            # scheduling delays come and go; a loop held by the work of a request does not).
            held = []
            for index in (i for i, worst in stalls.items() if worst >= bound):
                again = []
                for _ in range(2):
                    _, sent, answered = send(attacks_[index])
                    prober.settle(answered)
                    again.append(worst_probe_during(prober, sent, answered))
                if min(again) >= bound:
                    op, media, name, _ = attacks_[index]
                    ratios = ", ".join(f"{w / idle_median:.0f}x" for w in [stalls[index], *again])
                    held.append(f"{op} [{media}] {name}: /healthz waited {ratios} its idle median")
        rss_growth = peak_rss_bytes(pid) - rss_before
    assert not failures, "\n".join(failures)
    assert not held, f"idle median {idle_median * 1e3:.2f} ms; " + "\n".join(held)
    # The bodies themselves are up to 4 MiB; decoding a million items would take ~100x that.
    assert rss_growth < 25 * BODY_LIMIT, f"peak RSS grew by {rss_growth / 2**20:.0f} MiB"
