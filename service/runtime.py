"""Process-wide tuning shared by the processes `trainledger serve` runs: its HTTP workers
(service/http/app.py, `serve_app`) and its folding process (service/cli/serve_runtime.py)."""

from __future__ import annotations

import gc


def tune_garbage_collector() -> None:
    """The objects alive after start-up (modules, the app, caches) live as long as the
    process: moving them out of the collector's sight, and collecting less often, cuts the
    full-collection pauses that otherwise set the tail latency of queries (bench/README.md,
    queries), and the folding process's collections (a fifth of its CPU under sustained
    ingest before it collected less often: bench/README.md, fourth session)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
