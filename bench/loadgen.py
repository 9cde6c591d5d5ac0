"""Load generators: wrk with a Lua script (batches), and a lean asyncio HTTP/1.1 client.

Batches must carry fresh event ids on every request (a re-posted batch is answered as
duplicates, which is a different, cheaper path). Both generators therefore keep one encoded
body *template* whose ids all begin with an 8-byte marker and splice a unique 8-byte prefix
into it per request (`table.concat(parts, prefix)` in Lua, `prefix.join(parts)` in Python):
a copy of the body, no encoding on the load generator's side. The prefix has the marker's
length, so the msgpack string headers stay valid.

The asyncio client speaks raw HTTP/1.1 over keep-alive connections (no httpx: its per-request
cost would be measured instead of the server's). Its open-loop mode sends each request at its
scheduled time whether or not earlier ones were answered, on as many connections as needed,
and measures latency from the *scheduled* time, so a stalled server cannot hide its stall
(no coordinated omission).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import string
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = b"@@@@@@@@"
_ALNUM = string.ascii_lowercase + string.digits


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


_tags_used = random.randrange(len(_ALNUM) ** 2)


def run_tag() -> str:
    """Two characters: keeps the ids of successive runs on one server apart.

    Successive tags of one process never repeat (a counter from a random start); two random
    picks collided once in a scaling run, whose warm-up post then came back as duplicates.
    """
    global _tags_used
    _tags_used += 1
    n = _tags_used % len(_ALNUM) ** 2
    return _ALNUM[n // len(_ALNUM)] + _ALNUM[n % len(_ALNUM)]


def request_bytes(method: str, path: str, host: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# --- wrk ------------------------------------------------------------------------------------

WRK_LUA = r"""
-- trainledger bench: POST body templates in turn, each with a fresh 8-byte id prefix.
-- args: template file prefix (files <prefix>0 ... <prefix>N-1), marker, content type,
-- bearer token, run tag (2 chars), N
local counter = 0
local templates = {}
local tag = "xx"
local next_thread = 0

function setup(thread)
  thread:set("tid", next_thread)
  next_thread = next_thread + 1
end

local function split(s, sep)
  local out, from = {}, 1
  while true do
    local i, j = string.find(s, sep, from, true)
    if not i then
      out[#out + 1] = string.sub(s, from)
      return out
    end
    out[#out + 1] = string.sub(s, from, i - 1)
    from = j + 1
  end
end

function init(args)
  for k = 0, tonumber(args[6]) - 1 do
    local f = assert(io.open(args[1] .. k, "rb"))
    templates[k + 1] = split(f:read("*a"), args[2])
    f:close()
  end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = args[3]
  wrk.headers["Authorization"] = "Bearer " .. args[4]
  tag = args[5] .. string.sub("0123456789abcdefghijklmnopqrstuvwxyz", tid + 1, tid + 1)
end

function request()
  counter = counter + 1
  local parts = templates[counter % #templates + 1]
  local body = table.concat(parts, string.format("%s%05d", tag, counter))
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d, "lat_p50_us": %d, "lat_p99_us": %d, ' ..
    '"lat_max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
"""


@dataclass
class LoadResult:
    requests: int  # completed with a 2xx answer
    errors: int
    seconds: float
    latency_p50_ms: float = float("nan")
    latency_p99_ms: float = float("nan")
    tool: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def wrk_post(
    host: str,
    port: int,
    path: str,
    template: bytes | Sequence[bytes],
    content_type: str,
    token: str,
    *,
    connections: int,
    seconds: float,
    threads: int = 1,
) -> LoadResult:
    """Closed-loop load with wrk: `connections` keep-alive connections, each posting the
    templates in turn with fresh ids as soon as its previous answer arrived, for `seconds`."""
    templates = [template] if isinstance(template, bytes) else list(template)
    if not templates or any(t.count(MARKER) == 0 for t in templates):
        raise ValueError("a template has no id marker")
    with tempfile.TemporaryDirectory(prefix="tl-bench-wrk-") as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(WRK_LUA)
        for k, body in enumerate(templates):
            (Path(tmp) / f"body-{k}").write_bytes(body)
        cmd = [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "120s",
            "-s",
            str(script),
            f"http://{host}:{port}{path}",
            "--",
            str(Path(tmp) / "body-"),
            MARKER.decode(),
            content_type,
            token,
            run_tag(),
            str(len(templates)),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    stats = json.loads(line[len("WRKJSON ") :])
    errors = sum(stats[k] for k in ("connect", "read", "write", "status", "timeout"))
    return LoadResult(
        requests=stats["requests"] - stats["status"],
        errors=errors,
        seconds=stats["duration_us"] / 1e6,
        latency_p50_ms=stats["lat_p50_us"] / 1000,
        latency_p99_ms=stats["lat_p99_us"] / 1000,
        tool="wrk",
        extra=stats,
    )


# --- asyncio HTTP/1.1 client ---------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection; one request in flight at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        return cls(reader, writer)

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise RuntimeError("chunked answers are not supported by the bench client")
        body = await self.reader.readexactly(length) if length else b""
        return status, body

    def close(self) -> None:
        self.writer.close()


async def closed_loop(
    host: str,
    port: int,
    make_request: Callable[[int], bytes],
    *,
    connections: int,
    seconds: float,
) -> LoadResult:
    """`connections` workers, each sending the next request as soon as it has an answer."""
    conns = [await Connection.open(host, port) for _ in range(connections)]
    counter = 0
    ok = 0
    errors = 0
    latencies: list[float] = []
    clock = time.perf_counter
    deadline = clock() + seconds

    async def worker(conn: Connection) -> None:
        nonlocal counter, ok, errors
        while clock() < deadline:
            counter += 1
            request = make_request(counter)
            t0 = clock()
            status, _ = await conn.exchange(request)
            latencies.append(clock() - t0)
            if 200 <= status < 300:
                ok += 1
            else:
                errors += 1

    started = clock()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = clock() - started
    for c in conns:
        c.close()
    latencies.sort()
    return LoadResult(
        requests=ok,
        errors=errors,
        seconds=elapsed,
        latency_p50_ms=latencies[len(latencies) // 2] * 1000 if latencies else float("nan"),
        latency_p99_ms=latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan"),
        tool="asyncio",
    )


@dataclass
class OpenLoopResult:
    latencies_s: list[float]  # from scheduled send time to answer, per request
    sent: int
    ok: int
    errors: int
    seconds: float
    max_connections: int
    late_sends: int  # requests the client itself sent > 1 ms after their scheduled time
    statuses: dict[int, int]
    send_delays_s: list[float] = field(default_factory=list)


async def open_loop(
    host: str,
    port: int,
    requests: list[bytes],
    *,
    rate: float,
    max_connections: int = 512,
    initial_connections: int = 16,
) -> OpenLoopResult:
    """Send requests[i] at start + i / rate, regardless of answers (open loop).

    Latency counts from the scheduled time, so it includes any delay in the client sending it
    (late_sends counts sends more than 1 ms behind schedule; send_delays has each delay) and
    any queueing for a free connection. Clocks: `time.perf_counter` (uvloop's `loop.time()`
    has millisecond resolution).
    """
    clock = time.perf_counter
    idle = [await Connection.open(host, port) for _ in range(initial_connections)]
    opened = len(idle)
    latencies: list[float] = []
    send_delays: list[float] = []
    statuses: dict[int, int] = {}
    late = 0
    errors = 0
    pending: set[asyncio.Task[None]] = set()

    async def one(i: int, scheduled: float) -> None:
        nonlocal opened, errors
        if idle:
            conn = idle.pop()
        elif opened < max_connections:
            opened += 1
            conn = await Connection.open(host, port)
        else:
            while not idle:
                await asyncio.sleep(0.0005)
            conn = idle.pop()
        send_delays.append(clock() - scheduled)
        try:
            status, _ = await conn.exchange(requests[i])
        except (OSError, asyncio.IncompleteReadError):
            errors += 1
            conn.close()
            opened -= 1
            return
        latencies.append(clock() - scheduled)
        statuses[status] = statuses.get(status, 0) + 1
        idle.append(conn)

    interval = 1.0 / rate
    start = clock() + 0.05
    n = len(requests)
    i = 0
    loop = asyncio.get_running_loop()
    while i < n:
        now = clock()
        # Send everything that is due (catching up after a late wake-up), then sleep.
        while i < n and start + i * interval <= now:
            scheduled = start + i * interval
            if now - scheduled > 0.001:
                late += 1
            task = loop.create_task(one(i, scheduled))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
        if i < n:
            await asyncio.sleep(max(0.0, start + i * interval - clock()))
    if pending:
        await asyncio.wait(pending, timeout=60)
    elapsed = clock() - start
    for c in idle:
        c.close()
    ok = sum(v for k, v in statuses.items() if 200 <= k < 300)
    return OpenLoopResult(
        latencies_s=latencies,
        sent=n,
        ok=ok,
        errors=errors + sum(v for k, v in statuses.items() if not 200 <= k < 300),
        seconds=elapsed,
        max_connections=opened,
        late_sends=late,
        statuses=statuses,
        send_delays_s=send_delays,
    )


def spliced(template: bytes) -> Callable[[str], bytes]:
    """A function prefix -> template with every MARKER replaced by the 8-byte prefix."""
    parts = template.split(MARKER)

    def make(prefix: str) -> bytes:
        p = prefix.encode()
        if len(p) != len(MARKER):
            raise ValueError("prefix must be 8 bytes")
        return p.join(parts)

    return make


def now() -> float:
    return time.perf_counter()
