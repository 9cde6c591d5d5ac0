"""Every setting read from the environment (`TRAINLEDGER_*`) and checked here, in one place.

`VARIABLES` lists each variable with what it allows; `Settings.from_env` reads them all and
raises `ConfigError` naming every bad one (the variable, the value, what is allowed), which the
command line answers with exit status 2. Variables that another module reads itself (the
read timeouts, the webhook delivery pacing, the key, the client's URL and token) are checked
here too, so a bad value stops a command before anything starts. Every variable is in
docs/reference/configuration.md (a test keeps the two together).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet
from platformdirs import user_data_dir

from .spend_metrics.settings import PROJECTS_RANGE, TOP_RANGE, SpendConfig, parse_dimensions
from .storage.urls import redact
from .webhooks.delivery.config import DeliveryConfig

APP_NAME = "trainledger"


def default_data_dir() -> Path:
    """The user's data directory for trainledger, whatever directory a command runs from:
    `$XDG_DATA_HOME/trainledger` or `~/.local/share/trainledger` on Linux (platformdirs'
    rule elsewhere)."""
    return Path(user_data_dir(APP_NAME, appauthor=False))


class ConfigError(SystemExit):
    """Bad settings; `problems` has one line per variable: its name, value and what is allowed.
    A `SystemExit` with status 2: a process that does not catch it ends with that status."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(2)
        self.problems = problems

    def __str__(self) -> str:
        return "; ".join(self.problems)


@dataclass(frozen=True)
class Kind:
    """What a variable allows: `parse` turns an allowed value into the setting (ValueError
    otherwise); `refused` is a value it refuses (the tests set each variable to it)."""

    allowed: str
    parse: Callable[[str], Any]
    refused: str | None


def _integer(minimum: int) -> Kind:
    def parse(raw: str) -> int:
        value = int(raw)
        if value < minimum:
            raise ValueError
        return value

    return Kind(f"a whole number, at least {minimum}", parse, "many")


def _seconds(*, positive: bool) -> Kind:
    def parse(raw: str) -> float:
        value = float(raw)
        if not (value > 0 if positive else value >= 0) or value == float("inf"):
            raise ValueError
        return value

    allowed = "a number of seconds, " + ("more than 0" if positive else "0 or more")
    return Kind(allowed, parse, "-1" if not positive else "0")


def _choice(*values: str) -> Kind:
    def parse(raw: str) -> str:
        if raw.lower() not in values:
            raise ValueError
        return raw.lower()

    return Kind("one of " + ", ".join(values), parse, "loud")


def _url(*schemes: str) -> Kind:
    def parse(raw: str) -> str:
        parts = urlsplit(raw)
        if parts.scheme not in schemes or not (parts.netloc or parts.path):
            raise ValueError
        if parts.scheme.startswith(("http", "redis")) and not parts.hostname:
            raise ValueError
        return raw

    return Kind("a URL starting " + " or ".join(f"{s}://" for s in schemes), parse, "localhost")


def _fernet_keys(raw: str) -> str:
    for key in (k.strip() for k in raw.replace("\n", ",").split(",")):
        if key:
            Fernet(key.encode("ascii"))
    return raw


def _allowlist(raw: str) -> tuple[str, ...]:
    # Checking a host takes httpx's URL parser: imported when the variable is set, so that a
    # command that needs no HTTP (`slurm-hook`) does not load it.
    from .webhooks.targets.checks import parse_allowlist_env

    return parse_allowlist_env(raw)


def _path(raw: str) -> Path:
    return Path(raw).expanduser().absolute()


def _on_off(raw: str) -> bool:
    if raw.lower() not in ("1", "0", "on", "off", "true", "false", "yes", "no"):
        raise ValueError
    return raw.lower() in ("1", "on", "true", "yes")


ON_OFF = Kind("on or off (also 1/0, true/false, yes/no)", _on_off, "maybe")
PATH = Kind("a directory or file path", _path, None)
TEXT = Kind("any text", str, None)
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_LEVEL = _choice(*LOG_LEVELS)
LOG_FORMAT = _choice("json", "text")


def _spend_top(raw: str) -> int:
    value = int(raw)
    if not TOP_RANGE[0] <= value <= TOP_RANGE[1]:
        raise ValueError
    return value


def _spend_projects(raw: str) -> int:
    value = int(raw)
    if not PROJECTS_RANGE[0] <= value <= PROJECTS_RANGE[1]:
        raise ValueError
    return value


@dataclass(frozen=True)
class Variable:
    name: str
    kind: Kind
    default: str  # as the docs show it
    # The `Settings` field it sets; None: another module reads it (it is only checked here).
    setting: str | None = None
    secret: bool = False  # never echoed in an error


def _delivery(field_name: str, kind: Kind) -> Variable:
    return Variable(
        DeliveryConfig.ENV[field_name], kind, str(getattr(DeliveryConfig(), field_name))
    )


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "TRAINLEDGER_REDIS_URL",
        _url("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"),
        "(unset: the embedded Valkey)",
        "redis_url",
    ),
    Variable("TRAINLEDGER_DATA_DIR", PATH, "the user data dir", "data_dir"),
    Variable(
        "TRAINLEDGER_APPENDFSYNC", _choice("everysec", "always", "no"), "everysec", "appendfsync"
    ),
    Variable("TRAINLEDGER_DEDUP_WINDOW_DAYS", _integer(1), "35", "dedup_window_days"),
    Variable("TRAINLEDGER_MAX_FUTURE_SKEW_HOURS", _integer(0), "24", "max_future_skew_hours"),
    Variable("TRAINLEDGER_LOG_RETENTION_DAYS", _integer(0), "0", "log_retention_days"),
    Variable("TRAINLEDGER_MAX_BATCH_EVENTS", _integer(1), "50000", "max_batch_events"),
    Variable("TRAINLEDGER_MAX_BODY_BYTES", _integer(1), "67108864", "max_body_bytes"),
    Variable("TRAINLEDGER_MAX_JSON_BODY_BYTES", _integer(1), "1048576", "max_json_body_bytes"),
    Variable("TRAINLEDGER_DEAD_LETTER_LIMIT", _integer(0), "10000", "dead_letter_limit"),
    Variable("TRAINLEDGER_MAX_EVALUATION_RESULTS", _integer(1), "100000", "max_evaluation_results"),
    Variable(
        "TRAINLEDGER_PUBLIC_URL", _url("http", "https"), "http://127.0.0.1:8000", "public_url"
    ),
    Variable("TRAINLEDGER_RATE_LIMIT_PER_SECOND", _integer(0), "1000", "rate_limit_per_second"),
    Variable(
        "TRAINLEDGER_WEBHOOK_ALLOWLIST",
        Kind(
            "host names, IP addresses and CIDR networks, comma-separated", _allowlist, "10.0.0.0/33"
        ),
        "(empty)",
        "webhook_allowlist",
    ),
    Variable("TRAINLEDGER_LOG_FORMAT", LOG_FORMAT, "json", "log_format"),
    Variable("TRAINLEDGER_LOG_LEVEL", LOG_LEVEL, "info", "log_level"),
    Variable("TRAINLEDGER_FOLD_IN_WORKERS", ON_OFF, "1", "fold_in_workers"),
    Variable(
        "TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS",
        _integer(0),
        "30",
        "healthz_unreachable_seconds",
    ),
    Variable("TRAINLEDGER_HEADER_TIMEOUT_S", _seconds(positive=True), "10"),
    Variable("TRAINLEDGER_BODY_TIMEOUT_S", _seconds(positive=True), "30"),
    Variable(
        "TRAINLEDGER_SECRET_KEY",
        Kind("Fernet keys (44 characters of URL-safe base64), comma-separated", _fernet_keys, "k"),
        "(unset)",
        secret=True,
    ),
    Variable("TRAINLEDGER_SECRET_KEY_FILE", PATH, "(unset)"),
    Variable("TRAINLEDGER_ADMIN_TOKEN_FILE", PATH, "(unset)"),
    _delivery("enabled", ON_OFF),
    _delivery("max_attempts", _integer(1)),
    _delivery("base_delay_s", _seconds(positive=False)),
    _delivery("max_delay_s", _seconds(positive=False)),
    _delivery("retry_after_cap_s", _seconds(positive=False)),
    _delivery("timeout_s", _seconds(positive=True)),
    _delivery("lease_s", _seconds(positive=True)),
    _delivery("claim_idle_s", _seconds(positive=False)),
    _delivery("poll_s", _seconds(positive=True)),
    _delivery("concurrency", _integer(1)),
    _delivery("batch", _integer(1)),
    Variable("TRAINLEDGER_URL", _url("http", "https"), "http://127.0.0.1:8000"),
    Variable("TRAINLEDGER_TOKEN", TEXT, "the admin token in the data dir", secret=True),
    Variable("TRAINLEDGER_TOKEN_FILE", PATH, "(unset)"),
    Variable("TRAINLEDGER_SPOOL", PATH, "(unset)"),
    Variable(
        "TRAINLEDGER_METRICS_SPEND_DIMENSIONS",
        Kind("a comma-separated list of category, experiment, owner", parse_dimensions, "stage"),
        "(empty)",
    ),
    Variable(
        "TRAINLEDGER_METRICS_SPEND_TOP",
        Kind(f"a whole number from {TOP_RANGE[0]} to {TOP_RANGE[1]}", _spend_top, "1"),
        "20",
    ),
    Variable(
        "TRAINLEDGER_METRICS_SPEND_PROJECTS",
        Kind(
            f"a whole number from {PROJECTS_RANGE[0]} to {PROJECTS_RANGE[1]}",
            _spend_projects,
            "0",
        ),
        "500",
    ),
    Variable("TRAINLEDGER_METRICS_SPEND_TTL_SECONDS", _integer(0), "10"),
    Variable("TRAINLEDGER_METRICS_SPEND_DEADLINE_MS", _integer(1), "2000"),
)


def refusal(variable: Variable | str, raw: str, allowed: str, *, secret: bool = False) -> str:
    """One problem line: `NAME='value' is not allowed: <allowed>` (a secret's value and a
    URL's password are not shown)."""
    name = variable if isinstance(variable, str) else variable.name
    shown = "(value not shown)" if secret else repr(redact(raw) if "://" in raw else raw)
    return f"{name}={shown} is not allowed: {allowed}"


def read_variables(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every set variable's value parsed, by variable name; `ConfigError` lists every bad one."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for var in VARIABLES:
        raw = environ.get(var.name, "").strip()
        if not raw:
            continue
        try:
            values[var.name] = var.kind.parse(raw)
        except (ValueError, UnicodeError):
            problems.append(refusal(var, raw, var.kind.allowed, secret=var.secret))
    if not problems:
        problems += _delivery_conflicts(environ)
    if problems:
        raise ConfigError(problems)
    return values


def _delivery_conflicts(environ: Mapping[str, str]) -> list[str]:
    """The webhook delivery values allowed one by one but not together (the lease must
    outlast the timeout), with `DeliveryConfig`'s field names put back as variable names."""
    given = {v: environ[v] for v in DeliveryConfig.ENV.values() if environ.get(v, "").strip()}
    try:
        DeliveryConfig.from_env(given)
    except SystemExit as exc:
        text = str(exc.code).removeprefix("webhook delivery settings: ")
        for name, var in DeliveryConfig.ENV.items():
            text = re.sub(rf"\b{name}\b", var, text)
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        return [f"{text} (set: {shown or 'the defaults'})"]
    return []


def _spend_config(values: Mapping[str, Any]) -> SpendConfig:
    """The spend gauges of /metrics (service/spend_metrics, docs/reference/metrics.md)."""
    deadline_ms = values.get("TRAINLEDGER_METRICS_SPEND_DEADLINE_MS")
    return SpendConfig(
        values.get("TRAINLEDGER_METRICS_SPEND_DIMENSIONS", SpendConfig.dimensions),
        values.get("TRAINLEDGER_METRICS_SPEND_TOP", SpendConfig.top),
        float(values.get("TRAINLEDGER_METRICS_SPEND_TTL_SECONDS", SpendConfig.ttl_seconds)),
        deadline_ms / 1000 if deadline_ms is not None else SpendConfig.deadline_seconds,
        values.get("TRAINLEDGER_METRICS_SPEND_PROJECTS", SpendConfig.projects),
    )


@dataclass(frozen=True)
class Settings:
    # None means: start the embedded Valkey in `data_dir`.
    redis_url: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
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
    # Evaluation results kept per project; a batch that would pass it is refused whole (409).
    max_evaluation_results: int = 100_000
    # Seconds a resolved bearer token is cached per worker (revocation delay).
    token_cache_seconds: float = 2.0
    # "everysec" (default) or "always" for the embedded Valkey's append-only file.
    appendfsync: str = "everysec"
    public_url: str = "http://127.0.0.1:8000"
    # Requests a second one token may make (all workers together); 0 turns the limit off.
    rate_limit_per_second: int = 1000
    # Webhook targets exempt from "https only, public addresses only": host names (exact,
    # case-insensitive), IP addresses and CIDR networks (service/webhooks/targets/checks.py).
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
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings from the environment (`ConfigError` names every bad value)."""
        values = read_variables(os.environ if environ is None else environ)
        return cls(
            **{
                var.setting: values[var.name]
                for var in VARIABLES
                if var.setting and var.name in values
            },
            metrics_spend=_spend_config(values),
        )
