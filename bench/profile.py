"""Where the server's time goes: py-spy on `trainledger serve` under a benchmark's load.

    .venv/bin/pip install py-spy
    .venv/bin/python -m bench.profile --what json      # 5,000-event JSON batches (wrk)
    .venv/bin/python -m bench.profile --what msgpack   # the same as msgpack
    .venv/bin/python -m bench.profile --what single    # one-event posts at 1,000 req/s
    .venv/bin/python -m bench.profile --what queries --events 1000000   # /v1/costs group_by=stage

It starts the server as the benchmarks do, attaches `py-spy record` (raw collapsed stacks,
200 Hz, non-blocking) to the worker for `--seconds`, drives the load meanwhile, and prints the
functions with the most samples, by own time and including callees. The raw stacks are kept
in bench/results/profile-<what>.txt (feed them to flamegraph.pl or speedscope).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import loadgen
from bench.common import BENCH_CARD, Workload, encode
from bench.ingest_http import post_load, template
from bench.server import Server

RESULTS = Path(__file__).resolve().parent / "results"


def _frame(raw: str) -> str:
    name, _, where = raw.partition(" (")
    path = where.split(":", 1)[0]
    for prefix in ("site-packages/", "/work/main/", str(Path.cwd()) + "/"):
        if prefix in path:
            path = path.split(prefix, 1)[1]
    return f"{name} ({path})" if where else name


def summarize(raw_file: Path, top: int = 25) -> str:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw_file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"{total} samples (busy time only)", "", "own time:"]
    out += [f"  {100 * c / total:5.1f} %  {f}" for f, c in own.most_common(top)]
    out += ["", "including callees:"]
    out += [f"  {100 * c / total:5.1f} %  {f}" for f, c in incl.most_common(top + 20)]
    return "\n".join(out)


def _record_cmd(spy: str, pid: int, seconds: float, out: Path) -> list[str]:
    cmd = [spy, "record", "--pid", str(pid), "-d", str(int(seconds)), "-r", "200"]
    return [*cmd, "-f", "raw", "-o", str(out), "--nonblocking"]


def _profile_ingest(spy: str, out: Path, args: argparse.Namespace) -> None:
    with Server(workers=1) as server:
        server.put_card(BENCH_CARD)
        record = _record_cmd(spy, server.worker_pids()[0], args.seconds, out)
        if args.what == "single":
            from bench.latency import _event_requests

            requests = _event_requests(server, int(1000 * (args.seconds + 3)), loadgen.run_tag())
            spy_proc = subprocess.Popen(record)
            time.sleep(1.0)
            asyncio.run(loadgen.open_loop(server.host, server.port, requests, rate=1000.0))
        else:
            body = [encode(t, args.what) for t in template(Workload(days=1), args.batch, 8)]
            spy_proc = subprocess.Popen(record)
            time.sleep(1.0)
            r = post_load(
                server, body, args.what, batch=args.batch, seconds=args.seconds, connections=4
            )
            print(f"{r.events_per_s:,.0f} events/s during the profile", flush=True)
        spy_proc.wait(timeout=args.seconds + 60)


def _profile_queries(spy: str, out: Path, seconds: float, events: int) -> None:
    import http.client

    from bench import dataset

    ds = dataset.load(events, Workload(days=90))
    print(f"loaded {events:,} events at {ds.load_rate:,.0f} events/s", flush=True)
    try:
        with Server(workers=1, redis_url=ds.url, token=ds.admin_token) as server:
            spy_proc = subprocess.Popen(_record_cmd(spy, server.worker_pids()[0], seconds, out))
            time.sleep(1.0)
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
            deadline = time.monotonic() + seconds - 2
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                conn.request(
                    "GET",
                    "/v1/costs?project=bench&group_by=stage",
                    headers={"Authorization": f"Bearer {server.token}"},
                )
                conn.getresponse().read()
                print(f"group_by=stage: {time.perf_counter() - t0:.2f} s", flush=True)
            conn.close()
            spy_proc.wait(timeout=seconds + 600)
    finally:
        ds.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--what", choices=("json", "msgpack", "single", "queries"), default="json")
    parser.add_argument("--events", type=int, default=1_000_000, help="for --what queries")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--batch", type=int, default=5_000)
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"profile-{args.what}.txt"
    if args.what == "queries":
        _profile_queries(spy, out, args.seconds, args.events)
    else:
        _profile_ingest(spy, out, args)
    print(f"raw stacks: {out}")
    print(summarize(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
