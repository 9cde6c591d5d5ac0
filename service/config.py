"""Settings read from the environment (`TRAINLEDGER_*`), with sane defaults for a laptop."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .spend_metrics.model import TOP_RANGE, SpendConfig, parse_dimensions
from .webhooks.targets import parse_allowlist_env


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from exc


def _allowlist_env(name: str) -> tuple[str, ...]:
    try:
        return parse_allowlist_env(os.environ.get(name, ""))
    except ValueError as exc:
        raise SystemExit(f"{name}: {exc}") from exc


def _log_format_env() -> str:
    fmt = os.environ.get("TRAINLEDGER_LOG_FORMAT", "")
    if fmt not in ("", "json", "text"):
        raise SystemExit("TRAINLEDGER_LOG_FORMAT must be json or text")
    return fmt


def _spend_metrics_env() -> SpendConfig:
    """The spend gauges of /metrics (service/spend_metrics, docs/reference/metrics.md)."""
    name = "TRAINLEDGER_METRICS_SPEND_DIMENSIONS"
    try:
        dimensions = parse_dimensions(os.environ.get(name, ""))
    except ValueError as exc:
        raise SystemExit(f"{name}: {exc}") from exc
    top = _int_env("TRAINLEDGER_METRICS_SPEND_TOP", SpendConfig.top)
    if not TOP_RANGE[0] <= top <= TOP_RANGE[1]:
        raise SystemExit(
            f"TRAINLEDGER_METRICS_SPEND_TOP must be {TOP_RANGE[0]} to {TOP_RANGE[1]}, got {top}"
        )
    ttl = _int_env("TRAINLEDGER_METRICS_SPEND_TTL_SECONDS", int(SpendConfig.ttl_seconds))
    deadline = _int_env(
        "TRAINLEDGER_METRICS_SPEND_DEADLINE_MS", int(SpendConfig.deadline_seconds * 1000)
    )
    if ttl < 0:
        raise SystemExit(f"TRAINLEDGER_METRICS_SPEND_TTL_SECONDS must be 0 or more, got {ttl}")
    if deadline < 1:
        raise SystemExit(f"TRAINLEDGER_METRICS_SPEND_DEADLINE_MS must be 1 or more, got {deadline}")
    return SpendConfig(dimensions, top, float(ttl), deadline / 1000)


@dataclass(frozen=True)
class Settings:
    # None means: start the embedded Valkey in `data_dir`.
    redis_url: str | None = None
    data_dir: Path = Path(".trainledger")
    # Events older than this (by their own time) are rejected; ids are remembered this long.
    dedup_window_days: int = 35
    # Events this far ahead of the server clock are rejected (clock skew allowance).
    max_future_skew_hours: int = 24
    # 0 keeps the accepted-event log for ever (so a rebuild can always re-derive totals).
    log_retention_days: int = 0
    max_batch_events: int = 50_000
    max_body_bytes: int = 64 * 1024 * 1024
    # The body limit of every other route (JSON bodies of settings, rate cards, plans...).
    max_json_body_bytes: int = 1024 * 1024
    # Rejected events (dead letters) kept per project; past it the oldest are dropped.
    dead_letter_limit: int = 10_000
    # Seconds a resolved bearer token is cached per worker (revocation delay).
    token_cache_seconds: float = 2.0
    # "everysec" (default) or "always" for the embedded Valkey's append-only file.
    appendfsync: str = "everysec"
    public_url: str = "http://127.0.0.1:8000"
    # Requests a second one token may make (all workers together); 0 turns the limit off.
    rate_limit_per_second: int = 1000
    # Webhook targets exempt from "https only, public addresses only": host names (exact,
    # case-insensitive), IP addresses and CIDR networks (service/webhooks/targets.py).
    webhook_allowlist: tuple[str, ...] = ()
    # "json" or "text" sets up the process's logging (the `serve` command does); "" leaves it.
    log_format: str = ""
    log_level: str = "info"
    # Whether each worker folds the projects it ingested into in the background; `trainledger
    # serve` turns it off and runs one folding process beside the workers instead.
    fold_in_workers: bool = True
    # `/healthz` (liveness) answers 503 once Redis has been unreachable this long; 0: never.
    healthz_unreachable_seconds: int = 30
    # The spend gauges a /metrics scrape with a token gets: opt-in dimensions, cap, TTL, deadline.
    metrics_spend: SpendConfig = field(default_factory=SpendConfig)
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> Settings:
        fsync = os.environ.get("TRAINLEDGER_APPENDFSYNC", "everysec")
        if fsync not in ("everysec", "always", "no"):
            raise SystemExit("TRAINLEDGER_APPENDFSYNC must be everysec, always or no")
        return cls(
            redis_url=os.environ.get("TRAINLEDGER_REDIS_URL") or None,
            data_dir=Path(os.environ.get("TRAINLEDGER_DATA_DIR", ".trainledger")),
            dedup_window_days=_int_env("TRAINLEDGER_DEDUP_WINDOW_DAYS", 35),
            max_future_skew_hours=_int_env("TRAINLEDGER_MAX_FUTURE_SKEW_HOURS", 24),
            log_retention_days=_int_env("TRAINLEDGER_LOG_RETENTION_DAYS", 0),
            max_batch_events=_int_env("TRAINLEDGER_MAX_BATCH_EVENTS", 50_000),
            max_body_bytes=_int_env("TRAINLEDGER_MAX_BODY_BYTES", 64 * 1024 * 1024),
            max_json_body_bytes=_int_env("TRAINLEDGER_MAX_JSON_BODY_BYTES", 1024 * 1024),
            dead_letter_limit=_int_env("TRAINLEDGER_DEAD_LETTER_LIMIT", 10_000),
            appendfsync=fsync,
            public_url=os.environ.get("TRAINLEDGER_PUBLIC_URL", "http://127.0.0.1:8000"),
            rate_limit_per_second=_int_env("TRAINLEDGER_RATE_LIMIT_PER_SECOND", 1000),
            webhook_allowlist=_allowlist_env("TRAINLEDGER_WEBHOOK_ALLOWLIST"),
            log_format=_log_format_env(),
            log_level=os.environ.get("TRAINLEDGER_LOG_LEVEL", "info"),
            fold_in_workers=os.environ.get("TRAINLEDGER_FOLD_IN_WORKERS", "1") != "0",
            healthz_unreachable_seconds=_int_env("TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS", 30),
            metrics_spend=_spend_metrics_env(),
        )
