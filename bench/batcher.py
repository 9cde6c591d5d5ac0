"""What `Batcher.add` costs a caller: in memory (no spool) and written through a spool
(issue 33.2: durable before `add` returns), one event at a time and `extend` in batches.

    .venv/bin/python -m bench.batcher [--events N] [--dir PATH]

No service is reached: the client points at a closed port and the batcher's size and timer
are out of reach, so the figures are the caller's side only. `--dir` puts the spool on the
filesystem to measure (an fsync costs what the disk makes it cost: tmpfs nothing, a network
disk much); the default is a temporary directory. Prints per-event times and their ratio to
the in-memory `add` (before issue 33.2, `add` with a spool cost the same as without).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from trainledger.client import NO_RETRY, Batcher, BatcherError, Client, Spool


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _event(n: int) -> dict[str, str]:
    return {
        "id": f"bench-{n}",
        "time": "2026-11-20T00:00:00Z",
        "project": "llm-7b",
        "sku": "gpu.h100.hour",
        "quantity": "1",
    }


def per_event(count: int, run: Callable[[list[dict[str, str]]], None]) -> float:
    """Seconds per event of `run` over `count` fresh events."""
    events = [_event(n) for n in range(count)]
    start = time.perf_counter()
    run(events)
    return (time.perf_counter() - start) / count


def measure(count: int, directory: Path) -> dict[str, float]:
    # Connection refused at once: `close` gives up on its one try and the events stay put.
    client = Client(f"http://127.0.0.1:{_closed_port()}", "tl_unused", retry=NO_RETRY)
    out: dict[str, float] = {}
    for name, spooled, batch in (
        ("add, in memory", False, 1),
        ("add, written through a spool", True, 1),
        ("extend(1000), written through a spool", True, 1000),
    ):
        spool = Spool(directory / str(len(out))) if spooled else None
        batcher = client.batcher(
            size=10 * count, interval=3600.0, max_queued=10 * count, spool=spool
        )

        def run(events: list[dict[str, str]], batch: int = batch, b: Batcher = batcher) -> None:
            if batch == 1:
                for e in events:
                    b.add(e)
            else:
                for first in range(0, len(events), batch):
                    b.extend(events[first : first + batch])

        out[name] = per_event(count, run)
        with contextlib.suppress(BatcherError):  # the in-memory one has nowhere to go
            batcher.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        figures = measure(args.events, Path(scratch))
    base = figures["add, in memory"]
    print(f"{'Batcher.add':42} {'µs/event':>10} {'× in memory':>12}")
    for name, seconds in figures.items():
        print(f"{name:42} {seconds * 1e6:10.1f} {seconds / base:12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
