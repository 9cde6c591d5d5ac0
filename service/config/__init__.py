"""Every setting, declared once (`settings.py`), read from the environment in one place
(`environment.py`) with `msgspec.convert`, and checked there: `Settings.from_env` raises
`ConfigError` naming every bad value (the variable, the value, what is allowed), which the
command line answers with exit status 2. docs/reference/configuration.md's tables are made
from the same declarations (`docs.py`; `python3 dev.py config-docs`)."""

from __future__ import annotations

from .declare import ConfigError, Kind, Variable, refusal
from .settings import (
    APP_NAME,
    DEFAULT_URL,
    LOG_LEVELS,
    VARIABLES,
    Settings,
    as_variables,
    default_data_dir,
    delivery_settings,
    read_variables,
    spend_settings,
)

__all__ = [
    "APP_NAME",
    "DEFAULT_URL",
    "LOG_LEVELS",
    "VARIABLES",
    "ConfigError",
    "Kind",
    "Settings",
    "Variable",
    "as_variables",
    "default_data_dir",
    "delivery_settings",
    "read_variables",
    "refusal",
    "spend_settings",
]
