"""`Settings`: every setting, declared once. A field made by `setting(default, NAME, help)` is
read from the environment variable NAME; its type and `Meta` bounds say what is allowed (the
error for a bad value and docs/reference/configuration.md both come from them). Adding a
setting is adding a field here and using `settings.<field>` where it matters
(docs/development.md, "Adding a setting")."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from msgspec import Meta
from platformdirs import user_data_dir

from ..spend_metrics.settings import PROJECTS_RANGE, TOP_RANGE, SpendConfig, parse_dimensions
from ..webhooks.delivery.config import DeliveryConfig
from .declare import (
    CLIENT,
    DELIVERY,
    FERNET_KEYS,
    ConfigError,
    Seconds,
    Variable,
    declared,
    refusal,
    setting,
    url,
)
from .environment import process_environment

APP_NAME = "trainledger"
DEFAULT_URL = "http://127.0.0.1:8000"


def default_data_dir() -> Path:
    """The user's data directory for trainledger, whatever directory a command runs from:
    `$XDG_DATA_HOME/trainledger` or `~/.local/share/trainledger` on Linux (platformdirs'
    rule elsewhere)."""
    return Path(user_data_dir(APP_NAME, appauthor=False))


def _allowlist(raw: str) -> tuple[str, ...]:
    # Checking a host takes httpx's URL parser: imported when the variable is set, so that a
    # command that needs no HTTP (`slurm-hook`) does not load it.
    from ..webhooks.targets.checks import parse_allowlist_env

    return parse_allowlist_env(raw)


AtLeast0 = Annotated[int, Meta(ge=0)]
AtLeast1 = Annotated[int, Meta(ge=1)]
Positive = Annotated[Seconds, Meta(gt=0, le=sys.float_info.max)]
NotNegative = Annotated[Seconds, Meta(ge=0, le=sys.float_info.max)]
LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
_D = DeliveryConfig  # the delivery defaults are the deliverer's own
_REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = setting(
        None, "TRAINLEDGER_REDIS_URL",
        "an existing Redis or Valkey, or a Redis Cluster (`redis+cluster://host:port`, options "
        "`?wait_replicas=N&wait_timeout_ms=T&request_timeout_ms=R`, see "
        "[scaling](../operations/scaling.md)); unset starts the embedded Valkey",
        **url(*_REDIS_SCHEMES),
    )  # fmt: skip
    data_dir: Path = setting(
        default_data_dir, "TRAINLEDGER_DATA_DIR",
        "embedded Valkey's data (append-only file), the local admin token, the secret key "
        "file; `serve` logs the path it uses at start. The default does not depend on the "
        "directory a command runs from, so `serve` and the client commands find the same "
        "ledger and token from anywhere. A start that finds `./.trainledger` (the default "
        "before) says so in a warning and leaves it alone",
        shown="the user data dir: `$XDG_DATA_HOME/trainledger`, else "
        "`~/.local/share/trainledger` on Linux (`~/Library/Application Support/trainledger` "
        "on macOS)",
        allowed="a directory path (a relative one is taken from the working directory)",
    )  # fmt: skip
    appendfsync: Literal["everysec", "always", "no"] = setting(
        "everysec", "TRAINLEDGER_APPENDFSYNC", "embedded Valkey's `appendfsync`"
    )
    dedup_window_days: AtLeast1 = setting(
        35, "TRAINLEDGER_DEDUP_WINDOW_DAYS",
        "how long event ids are remembered; older events are rejected",
    )  # fmt: skip
    max_future_skew_hours: AtLeast0 = setting(
        24, "TRAINLEDGER_MAX_FUTURE_SKEW_HOURS",
        "how far ahead of the server clock an event may be",
    )  # fmt: skip
    log_retention_days: AtLeast0 = setting(
        0, "TRAINLEDGER_LOG_RETENTION_DAYS",
        "trim the accepted-event log after this many days (never an entry not yet folded into "
        "the totals)",
        shown="`0` (keep)",
    )  # fmt: skip
    fold_in_workers: bool = setting(
        True, "TRAINLEDGER_FOLD_IN_WORKERS",
        "off: the app's workers do not fold in the background (`trainledger serve` runs its "
        "folding process instead); reads fold either way",
    )  # fmt: skip
    max_batch_events: AtLeast1 = setting(
        50_000, "TRAINLEDGER_MAX_BATCH_EVENTS", "events per request"
    )
    max_body_bytes: AtLeast1 = setting(
        64 * 1024 * 1024, "TRAINLEDGER_MAX_BODY_BYTES", "body size of `POST /v1/events`"
    )
    max_json_body_bytes: AtLeast1 = setting(
        1024 * 1024, "TRAINLEDGER_MAX_JSON_BODY_BYTES",
        "body size of every route but `POST /v1/events`",
    )  # fmt: skip
    dead_letter_limit: AtLeast0 = setting(
        10_000, "TRAINLEDGER_DEAD_LETTER_LIMIT",
        "rejected events kept per project; the oldest are dropped and counted",
    )  # fmt: skip
    max_evaluation_results: AtLeast1 = setting(
        100_000, "TRAINLEDGER_MAX_EVALUATION_RESULTS",
        "evaluation results kept per project; a batch whose new results would pass it is "
        "refused whole (409, nothing stored; "
        "[limits](../operations/limits.md#evaluation-results))",
    )  # fmt: skip
    rate_limit_per_second: AtLeast0 = setting(
        1000, "TRAINLEDGER_RATE_LIMIT_PER_SECOND",
        "requests a second per token, all workers together (429 with `Retry-After` above "
        "it); `0` turns it off",
    )  # fmt: skip
    public_url: str = setting(
        DEFAULT_URL, "TRAINLEDGER_PUBLIC_URL",
        "the service's public base URL as the people reading alert messages reach it: the "
        "messages' links to the dashboard view (`/ui/{project}?from=…&to=…`) and the API "
        "start with it",
        **url("http", "https"),
    )  # fmt: skip
    # Webhook targets exempt from "https only, public addresses only": host names (exact,
    # case-insensitive), IP addresses and CIDR networks (service/webhooks/targets.py).
    webhook_allowlist: tuple[str, ...] = setting(
        (), "TRAINLEDGER_WEBHOOK_ALLOWLIST",
        "webhook targets (email webhooks' SMTP servers too) exempt from \"https (or SMTP over "
        "TLS) only, public addresses only\" "
        "([Security](../operations/security.md#where-webhooks-may-go))",
        allowed="host names, IP addresses and CIDR networks, comma-separated",
        refused="10.0.0.0/33", check=_allowlist,
    )  # fmt: skip
    header_timeout_s: Positive = setting(
        10.0, "TRAINLEDGER_HEADER_TIMEOUT_S",
        "request line and headers must arrive within this time of connecting (or of a "
        "kept-alive request's first byte), else 408 and close",
    )  # fmt: skip
    body_timeout_s: Positive = setting(
        30.0, "TRAINLEDGER_BODY_TIMEOUT_S",
        "the whole body must arrive within this time of the headers, else 408 and close",
    )  # fmt: skip
    healthz_unreachable_seconds: AtLeast0 = setting(
        30, "TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS",
        "`/healthz` answers 503 (`storage-unreachable`) once no ping has reached Redis for "
        "this long; `0`: never",
    )  # fmt: skip
    metrics_spend_dimensions: tuple[str, ...] = setting(
        SpendConfig.dimensions, "TRAINLEDGER_METRICS_SPEND_DIMENSIONS",
        "opt-in dimensions of the spend gauges a `/metrics` scrape with a token gets "
        "([metrics](metrics.md#spend-and-budgets))",
        allowed="a comma-separated list of category, experiment, owner",
        refused="stage", check=parse_dimensions,
    )  # fmt: skip
    metrics_spend_top: Annotated[int, Meta(ge=TOP_RANGE[0], le=TOP_RANGE[1])] = setting(
        SpendConfig.top, "TRAINLEDGER_METRICS_SPEND_TOP",
        "experiment and owner series per project; the rest are summed into `_other`",
    )  # fmt: skip
    metrics_spend_projects: Annotated[
        int, Meta(ge=PROJECTS_RANGE[0], le=PROJECTS_RANGE[1])
    ] = setting(
        SpendConfig.projects, "TRAINLEDGER_METRICS_SPEND_PROJECTS",
        "projects a scrape shows at most: the largest by spend to date; the number left out "
        "is `trainledger_spend_projects_omitted` ([metrics](metrics.md#spend-and-budgets))",
    )  # fmt: skip
    metrics_spend_ttl_seconds: AtLeast0 = setting(
        int(SpendConfig.ttl_seconds), "TRAINLEDGER_METRICS_SPEND_TTL_SECONDS",
        "how long one read of the spend figures answers scrapes (0: every scrape reads)",
    )  # fmt: skip
    metrics_spend_deadline_ms: AtLeast1 = setting(
        int(SpendConfig.deadline_seconds * 1000), "TRAINLEDGER_METRICS_SPEND_DEADLINE_MS",
        "how long a scrape waits for that read before answering with the last figures "
        "(`trainledger_spend_read_ok 0`)",
    )  # fmt: skip
    secret_key: str | None = setting(
        None, "TRAINLEDGER_SECRET_KEY",
        "the key(s) sealing webhook URLs and secrets, the first seals (rotation: start once "
        "with `NEW,OLD`); required with `TRAINLEDGER_REDIS_URL` unless "
        "`TRAINLEDGER_SECRET_KEY_FILE` is set; with the embedded Valkey, `<data "
        "dir>/secret-key` is made 0600 when neither is set "
        "([secret key](../operations/secret-key.md))",
        **FERNET_KEYS,
    )  # fmt: skip
    secret_key_file: Path | None = setting(
        None, "TRAINLEDGER_SECRET_KEY_FILE",
        "a file holding the key(s), instead of the environment",
        allowed="a file path",
    )  # fmt: skip
    admin_token_file: Path | None = setting(
        None, "TRAINLEDGER_ADMIN_TOKEN_FILE",
        "`serve`: a file holding an admin token (a Docker or Kubernetes secret; 32–512 "
        "characters of `A-Za-z0-9._~+/=-`), registered at start when not yet known, never "
        "printed nor written to the data dir (instead of the first-start token); client "
        "commands read it too",
        allowed="a file path",
    )  # fmt: skip
    # "json" or "text" sets up the process's logging (the `serve` command does); None leaves it.
    log_format: Literal["json", "text"] | None = setting(
        None, "TRAINLEDGER_LOG_FORMAT",
        "`serve`'s log lines, every one of them (start-up lines included): `json` (one object "
        "a line) or `text`",
        shown="`json`",
    )  # fmt: skip
    log_level: LogLevel = setting(
        "info", "TRAINLEDGER_LOG_LEVEL", "the least severe lines written (any case)"
    )
    # How each worker's deliverer paces itself (`DeliveryConfig`, service/webhooks/config.py).
    webhook_enabled: bool = setting(
        _D.enabled, "TRAINLEDGER_WEBHOOK_DELIVERY",
        "off: the workers deliver nothing (deliveries wait)", section=DELIVERY,
    )  # fmt: skip
    webhook_max_attempts: AtLeast1 = setting(
        _D.max_attempts, "TRAINLEDGER_WEBHOOK_MAX_ATTEMPTS",
        "attempts before a delivery becomes a dead letter", section=DELIVERY,
    )  # fmt: skip
    webhook_base_delay_s: NotNegative = setting(
        _D.base_delay_s, "TRAINLEDGER_WEBHOOK_BASE_DELAY_S",
        "retry n waits a uniform draw in [0, min(max delay, base × 2^(n−1))]",
        section=DELIVERY,
    )  # fmt: skip
    webhook_max_delay_s: NotNegative = setting(
        _D.max_delay_s, "TRAINLEDGER_WEBHOOK_MAX_DELAY_S", "the cap of that wait",
        section=DELIVERY,
    )  # fmt: skip
    webhook_retry_after_cap_s: NotNegative = setting(
        _D.retry_after_cap_s, "TRAINLEDGER_WEBHOOK_RETRY_AFTER_CAP_S",
        "a receiver's `Retry-After` is honoured up to this", section=DELIVERY,
    )  # fmt: skip
    webhook_timeout_s: Positive = setting(
        _D.timeout_s, "TRAINLEDGER_WEBHOOK_TIMEOUT_S",
        "one whole attempt: lookup, connect, send, the first 2 KiB of the answer (email: "
        "lookup, connect, TLS, login, message)",
        section=DELIVERY,
    )  # fmt: skip
    webhook_lease_s: Positive = setting(
        _D.lease_s, "TRAINLEDGER_WEBHOOK_LEASE_S",
        "a sender holds a delivery this long; more than the timeout", section=DELIVERY,
    )  # fmt: skip
    webhook_claim_idle_s: NotNegative = setting(
        _D.claim_idle_s, "TRAINLEDGER_WEBHOOK_CLAIM_IDLE_S",
        "an alert read but not acknowledged this long is taken over by another worker",
        section=DELIVERY,
    )  # fmt: skip
    webhook_poll_s: Positive = setting(
        _D.poll_s, "TRAINLEDGER_WEBHOOK_POLL_S", "pause between rounds of the deliverer",
        section=DELIVERY,
    )  # fmt: skip
    webhook_concurrency: AtLeast1 = setting(
        _D.concurrency, "TRAINLEDGER_WEBHOOK_CONCURRENCY", "deliveries in flight per worker",
        section=DELIVERY,
    )  # fmt: skip
    webhook_batch: AtLeast1 = setting(
        _D.batch, "TRAINLEDGER_WEBHOOK_BATCH", "alerts read per project and round",
        section=DELIVERY,
    )  # fmt: skip
    # The command line's: the service it talks to, the token, the spool.
    client_url: str = setting(
        DEFAULT_URL, "TRAINLEDGER_URL",
        "the service the client commands talk to (`--url`)",
        section=CLIENT, **url("http", "https"),
    )  # fmt: skip
    token: str | None = setting(
        None, "TRAINLEDGER_TOKEN", "the bearer token they send (`--token`)",
        shown="`admin-token` in the data dir", section=CLIENT, secret=True,
    )  # fmt: skip
    token_file: Path | None = setting(
        None, "TRAINLEDGER_TOKEN_FILE",
        "client commands: a file holding the bearer token, when `--token` and "
        "`TRAINLEDGER_TOKEN` are not given",
        section=CLIENT,
        allowed="a file path",
    )  # fmt: skip
    spool: Path | None = setting(
        None, "TRAINLEDGER_SPOOL",
        "the spool directory of `events post --spool`, `spool put|flush`, `agent` and "
        "`slurm-hook` (`--spool`)",
        section=CLIENT,
        allowed="a directory path",
    )  # fmt: skip
    # Not read from the environment ------------------------------------------------------
    # Seconds a resolved bearer token is cached per worker (revocation delay).
    token_cache_seconds: float = 2.0
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings from `environ` (default: the process's environment); `ConfigError`
        names every bad value."""
        return settings_from(environ)

    @property
    def metrics_spend(self) -> SpendConfig:
        """The spend gauges of /metrics (service/spend_metrics, docs/reference/metrics.md)."""
        return SpendConfig(
            self.metrics_spend_dimensions,
            self.metrics_spend_top,
            float(self.metrics_spend_ttl_seconds),
            self.metrics_spend_deadline_ms / 1000,
            self.metrics_spend_projects,
        )

    @property
    def webhook_delivery(self) -> DeliveryConfig:
        """How the webhook deliverer paces itself (ValueError: values that conflict)."""
        return DeliveryConfig(
            **{name: getattr(self, "webhook_" + name) for name in DELIVERY_FIELDS}
        )


DELIVERY_FIELDS = tuple(DeliveryConfig.__dataclass_fields__)
VARIABLES: tuple[Variable, ...] = declared(Settings)


def variable_of(setting: str) -> str:
    """The variable of the `Settings` field `setting` (for messages that name it)."""
    return next(v.name for v in VARIABLES if v.setting == setting)


def read_variables(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every set variable's value, by variable name; `ConfigError` lists every bad one."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for var in VARIABLES:
        raw = environ.get(var.name, "").strip()
        if not raw:
            continue
        try:
            values[var.name] = var.convert(raw)
        except (ValueError, UnicodeError):
            problems.append(refusal(var, raw, var.kind.allowed, secret=var.secret))
    if not problems:
        problems += _delivery_conflicts(environ, values)
    if problems:
        raise ConfigError(problems, values)
    return values


def _delivery_conflicts(environ: Mapping[str, str], values: Mapping[str, Any]) -> list[str]:
    """The webhook delivery values allowed one by one but not together (the lease must
    outlast the timeout), its field names said as the variables."""
    try:
        _settings(values).webhook_delivery  # noqa: B018 - built to be checked
    except ValueError as exc:
        text = str(exc)
        delivery = [v for v in VARIABLES if v.setting.removeprefix("webhook_") in DELIVERY_FIELDS]
        for var in delivery:  # DeliveryConfig says its field names
            text = re.sub(rf"\b{var.setting.removeprefix('webhook_')}\b", var.name, text)
        given = {v.name: environ[v.name] for v in delivery if v.name in values}
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        return [f"{text} (set: {shown or 'the defaults'})"]
    return []


def _settings(values: Mapping[str, Any]) -> Settings:
    return Settings(**{var.setting: values[var.name] for var in VARIABLES if var.name in values})


def settings_from(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from `environ` (default: this process's environment)."""
    return _settings(read_variables(process_environment() if environ is None else environ))


def delivery_settings(config: DeliveryConfig) -> dict[str, Any]:
    """The `Settings` fields of `config`: `Settings(**delivery_settings(c)).webhook_delivery
    == c`."""
    return {"webhook_" + name: getattr(config, name) for name in DELIVERY_FIELDS}


def as_variables(**values: Any) -> dict[str, str]:
    """The environment variables that give these `Settings` field values (to start a
    process with them)."""
    names = {v.setting: v.name for v in VARIABLES}
    out = {}
    for setting_name, value in values.items():
        if isinstance(value, bool):
            text = "on" if value else "off"
        elif isinstance(value, tuple):
            text = ",".join(value)
        else:
            text = str(value)
        out[names[setting_name]] = text
    return out


def spend_settings(config: SpendConfig) -> dict[str, Any]:
    """The `Settings` fields of `config` (whole seconds of TTL, whole milliseconds of
    deadline): `Settings(**spend_settings(c)).metrics_spend == c` for such a `c`."""
    return {
        "metrics_spend_dimensions": config.dimensions,
        "metrics_spend_top": config.top,
        "metrics_spend_ttl_seconds": int(config.ttl_seconds),
        "metrics_spend_deadline_ms": round(config.deadline_seconds * 1000),
        "metrics_spend_projects": config.projects,
    }
