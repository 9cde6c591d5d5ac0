"""The process environment: the one module that reads it (a shape test keeps it so).

`settings_from` reads every declared variable into one `Settings` (`ConfigError` names every
bad value at once). `trainledger serve` builds its `Settings` once and hands it to its workers
whole (`hand_down`, `handed_down`): msgspec-encoded in the one variable
`TRAINLEDGER_SERVE_SETTINGS`, which is not a setting; no variable is rewritten for them.
The rest reads variables that are not trainledger settings (Slurm's job id) or passes the
environment on to a child process.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Collection, Mapping
from typing import Any

import msgspec

from .declare import ConfigError, Variable, declared, decode_hook, encode_hook, refusal
from .settings import DELIVERY_FIELDS, Settings

VARIABLES: tuple[Variable, ...] = declared(Settings)
HANDOFF_VARIABLE = "TRAINLEDGER_SERVE_SETTINGS"


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
        names = {v.setting.removeprefix("webhook_"): v.name for v in VARIABLES}
        for name in DELIVERY_FIELDS:
            text = re.sub(rf"\b{name}\b", names[name], text)
        given = {
            v.name: environ[v.name]
            for v in VARIABLES
            if v.setting.removeprefix("webhook_") in DELIVERY_FIELDS and v.name in values
        }
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        return [f"{text} (set: {shown or 'the defaults'})"]
    return []


def _settings(values: Mapping[str, Any]) -> Settings:
    return Settings(**{var.setting: values[var.name] for var in VARIABLES if var.name in values})


def settings_from(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from `environ` (default: this process's environment)."""
    return _settings(read_variables(os.environ if environ is None else environ))


# `trainledger serve` and its workers ------------------------------------------------------


class Handoff(msgspec.Struct, frozen=True):
    """What `serve` gives each worker: its settings, whole, and its process id (a worker
    exits when `serve` is gone)."""

    settings: Settings
    serve_pid: int


def hand_down(settings: Settings, serve_pid: int) -> None:
    """Make `settings` the settings of the worker processes started from now on."""
    encoded = msgspec.json.encode(Handoff(settings, serve_pid), enc_hook=encode_hook)
    os.environ[HANDOFF_VARIABLE] = encoded.decode()


def handed_down() -> Handoff | None:
    """What `serve` handed this worker, if it is one of `serve`'s."""
    raw = os.environ.get(HANDOFF_VARIABLE)
    if not raw:
        return None
    return msgspec.json.decode(raw, type=Handoff, dec_hook=decode_hook)


@functools.cache
def process_settings() -> Settings:
    """This process's settings, for what cannot be given them (uvicorn makes the protocol
    object of each connection): `serve`'s if it handed them down, else the environment's."""
    handoff = handed_down()
    return handoff.settings if handoff is not None else settings_from()


def share_prometheus_metrics(directory: str) -> None:
    """prometheus_client's multiprocess mode for the workers (its own variable, read by it)."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory


# Not settings ----------------------------------------------------------------------------


def outside_variable(name: str) -> str | None:
    """A variable another program sets for us (Slurm's job id): not a trainledger setting."""
    return os.environ.get(name) or None


def child_environment(without: Collection[str] = (), **extra: str) -> dict[str, str]:
    """The environment for a child process: this one's, less `without`, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in without}
    env.update(extra)
    return env
