"""The process environment: the one module that reads it (a shape test keeps it so).

`Settings.from_env` (settings.py) reads the declared variables from `process_environment()`;
`handoff.py` passes `serve`'s settings to its workers through `set_variable`/`variable`. The
rest is what is not a trainledger setting: a variable another program sets (Slurm's job id),
prometheus_client's own, the environment of a child process.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping


def process_environment() -> Mapping[str, str]:
    return os.environ


def variable(name: str) -> str | None:
    return os.environ.get(name) or None


def set_variable(name: str, value: str) -> None:
    """For the processes started from now on (`serve`'s workers)."""
    os.environ[name] = value


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
