"""The spend gauges' settings from the environment: a bad value names its variable."""

from __future__ import annotations

import pytest
from trainledger.config import Settings
from trainledger.spend_metrics.settings import SpendConfig


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DIMENSIONS", "TOP", "TTL_SECONDS", "DEADLINE_MS"):
        monkeypatch.delenv(f"TRAINLEDGER_METRICS_SPEND_{name}", raising=False)
    assert Settings.from_env().metrics_spend == SpendConfig()


def test_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_DIMENSIONS", "experiment,category")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_TOP", "50")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_TTL_SECONDS", "0")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_DEADLINE_MS", "500")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_PROJECTS", "40")
    assert Settings.from_env().metrics_spend == SpendConfig(
        ("category", "experiment"), 50, 0, 0.5, 40
    )


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("DIMENSIONS", "stage", "'stage' is not allowed: a comma-separated list of category"),
        ("TOP", "1", "'1' is not allowed: a whole number from 2 to 1000"),
        ("TOP", "many", "'many' is not allowed: a whole number from 2 to 1000"),
        ("TTL_SECONDS", "-1", "'-1' is not allowed: a whole number, at least 0"),
        ("DEADLINE_MS", "0", "'0' is not allowed: a whole number, at least 1"),
        ("PROJECTS", "0", "'0' is not allowed: a whole number from 1 to 10000"),
        ("PROJECTS", "10001", "'10001' is not allowed: a whole number from 1 to 10000"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(f"TRAINLEDGER_METRICS_SPEND_{name}", value)
    with pytest.raises(SystemExit, match=f"^TRAINLEDGER_METRICS_SPEND_{name}={says}") as raised:
        Settings.from_env()
    assert raised.value.code == 2
