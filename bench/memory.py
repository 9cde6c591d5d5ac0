"""6. Memory: Redis bytes per ingested event (deduplication state plus log).

The project of the queries benchmark (default 10 million events over 90 days, loaded through
the real ingest path in-process, see bench/dataset.py) is measured key by key with
`MEMORY USAGE <key> SAMPLES 0` (every element counted, allocator overhead included):

* dedup state: the 64 `tl:{p:P}:seen:<shard>` hashes (event id -> expiry day);
* log: the `tl:{p:P}:log` stream (one entry per accepted batch: LZ4(msgpack(coded
  columns)); zlib before the fourth session);
* totals (`tot:<day>`, `daily`, `tier:<month>`): bounded by cells x days, not by events,
  reported beside the figure but not in it.

Figure: (dedup + log) bytes / events. Its floor ("ceiling" column) is the payload itself:
the event id bytes plus the compressed log blob bytes per event, with no Redis structure
around them; the ratio is the structures' overhead factor. The same figures are taken at
25/50/75/100 % of the load, so the per-event cost can be seen to be flat in the event count;
when the run loads fewer than 10 million events (`--events`), the 10-million figure is an
extrapolation from the measured per-event bytes and is labelled as such.

Retention: every id in the dedup hashes carries its expiry day (event day + window + 1) and
the hourly sweep (`IngestStore.sweep_seen`) deletes expired ones, so the dedup state holds at most
`events per day x (TRAINLEDGER_DEDUP_WINDOW_DAYS + 1)` ids; the log is kept for ever by
default and is trimmed (`XADD ... MINID ~`) to `TRAINLEDGER_LOG_RETENTION_DAYS` when that is
set. This benchmark keeps every id (window 92 days, to accept 90 days of events) and the
whole log: the worst case for 10 million events.
"""

from __future__ import annotations

from typing import Any

from bench import dataset
from bench.common import Workload, result, row

DEFAULTS: dict[str, Any] = {"events": 10_000_000, "days": 90}
QUICK: dict[str, Any] = {"events": 1_000_000, "days": 90}
TINY: dict[str, Any] = {"events": 3_000, "days": 3}

TARGET_BYTES = 150.0
ISSUE_EVENTS = 10_000_000


def log_blob_bytes(url: str, project: str) -> tuple[int, int]:
    """(entries, total bytes of the blobs) of the project's log stream."""
    import redis
    from trainledger.storage.keys import Keys

    client = redis.Redis.from_url(url)
    entries = 0
    total = 0
    start = "-"
    try:
        while True:
            page = client.xrange(Keys.log(project), min=start, max="+", count=200)
            if not page:
                break
            for entry_id, fields in page:
                entries += 1
                total += len(fields[b"b"])
                start = "(" + (entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id))
            if len(page) < 200:
                break
    finally:
        client.close()
    return entries, total


def run(params: dict[str, Any] | None = None) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    n = int(p["events"])
    workload = Workload(days=int(p["days"]))
    ds = dataset.get_dataset(n, workload, p.get("progress"))
    final = ds.checkpoints[-1]
    seen = final.get("seen", 0)
    log = final.get("log", 0)
    totals = final.get("tot", 0) + final.get("daily", 0) + final.get("tier", 0)
    entries, blob_bytes = log_blob_bytes(ds.url, workload.project)
    per_event = (seen + log) / n
    floor = (ds.id_bytes + blob_bytes) / n
    curve = [
        {
            "events": c["events"],
            "dedup_bytes_per_event": c.get("seen", 0) / c["events"],
            "log_bytes_per_event": c.get("log", 0) / c["events"],
            "totals_bytes": c.get("tot", 0) + c.get("daily", 0) + c.get("tier", 0),
            "used_memory": c["used_memory"],
        }
        for c in ds.checkpoints
    ]
    measured_at_issue_size = n >= ISSUE_EVENTS
    projected_mb = per_event * ISSUE_EVENTS / 1e6
    notes = [
        f"measured at {n:,} events loaded in-process through Ingestor.ingest "
        f"({ds.load_rate:,.0f} events/s load rate)",
    ]
    spread = [
        (c.get("seen", 0) + c.get("log", 0)) / c["events"] for c in ds.checkpoints if c["events"]
    ]
    if not measured_at_issue_size:
        notes.append(
            f"EXTRAPOLATED to 10,000,000 events: {per_event:.1f} B/event x 10M = "
            f"{projected_mb:,.0f} MB of dedup+log, assuming the per-event cost stays as "
            f"measured (it ranged {min(spread):.1f}-{max(spread):.1f} B/event across the load "
            "checkpoints; hashtable resizes make it step by a few percent)"
        )
    days = workload.days
    per_day = n / days
    rows = [
        row(
            "dedup + log bytes/event",
            per_event,
            "B/event",
            ceiling=floor,
            ratio=per_event / floor if floor else None,
            target="<= 150",
            met=per_event <= TARGET_BYTES,
        ),
        row("dedup (seen hashes) bytes/event", seen / n, "B/event"),
        row(
            "dedup + log at 10M events"
            + ("" if measured_at_issue_size else f" (EXTRAPOLATED from {n:,})"),
            per_event * ISSUE_EVENTS / 1e6 if not measured_at_issue_size else (seen + log) / 1e6,
            "MB",
        ),
        row("log (stream) bytes/event", log / n, "B/event"),
        row("totals (not per event), MB", totals / 1e6, "MB"),
        row(
            "used_memory growth / event (everything)",
            (final["used_memory"] - ds.used_memory_before) / n,
            "B/event",
        ),
    ]
    return result(
        "memory",
        figure=per_event,
        unit="B/event",
        ceiling=floor,
        ceiling_label="payload floor: id bytes + compressed log bytes per event",
        ratio=per_event / floor if floor else None,
        ratio_label="Redis bytes / payload bytes (structure overhead)",
        target="<= 150 bytes/event (dedup + log) at 10M events",
        met=per_event <= TARGET_BYTES,
        details={
            "events": n,
            "days": days,
            "measured_at_issue_size": measured_at_issue_size,
            "projected_10m_dedup_plus_log_mb": projected_mb,
            "dedup_bytes": seen,
            "log_bytes": log,
            "totals_bytes": totals,
            "log_entries": entries,
            "log_blob_bytes": blob_bytes,
            "id_bytes": ds.id_bytes,
            "avg_id_length": ds.id_bytes / n,
            "used_memory_before": ds.used_memory_before,
            "used_memory_after": final["used_memory"],
            "load_seconds": ds.load_seconds,
            "load_events_per_s": ds.load_rate,
            "checkpoints": curve,
            "retention": {
                "dedup_ids_resident": "events/day x (TRAINLEDGER_DEDUP_WINDOW_DAYS + 1), "
                "swept hourly",
                "log_resident": "events/day x TRAINLEDGER_LOG_RETENTION_DAYS (0 = all)",
                "example_defaults_at_this_rate_mb": (
                    per_day * 36 * seen / n + per_day * days * log / n
                )
                / 1e6,
                "example_note": f"{per_day:,.0f} events/day, 35-day window, log kept 90 days",
            },
        },
        notes=notes,
        rows=rows,
    )
