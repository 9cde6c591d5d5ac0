"""Stress command: the failover scenario of tests/failover_scenario.py, many times in a row.

    .venv/bin/python -m tests.stress_failover --runs 20

Each run starts a fresh three-master, three-replica cluster in a temporary directory,
SIGKILLs the master that holds the rate card and the caller's token under load, keeps it
down past the failover, brings it back, and checks every answer (no 5xx but 503, every 503
with Retry-After and no claim that nothing was applied, every post to a healthy shard's
project answered 200, no answer held past the configured bound) and that every
acknowledged event is counted exactly once. Prints one line per run and a summary; exits 1
if any run broke a rule.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

from tests.failover_scenario import check, run_scenario


async def main(runs: int) -> int:
    for name in ("httpx", "trainledger.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    failed = 0
    started = time.monotonic()
    for i in range(1, runs + 1):
        with tempfile.TemporaryDirectory(prefix="tl-failover-") as tmp:
            t0 = time.monotonic()
            run = await run_scenario(Path(tmp))
            bad = check(run)
        status = "ok" if not bad else f"FAILED ({len(bad)})"
        print(f"run {i}/{runs}: {status} in {time.monotonic() - t0:.0f} s; {run.summary()}")
        for line in bad[:20]:
            print(f"    {line}")
        sys.stdout.flush()
        failed += bool(bad)
    print(
        f"{runs - failed} of {runs} runs held every rule "
        f"({time.monotonic() - started:.0f} s in all)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.runs)))
