"""The spend gauges' settings from the environment: a bad value names its variable."""

from __future__ import annotations

import pytest
from trainledger.config import Settings
from trainledger.spend_metrics.model import SpendConfig


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DIMENSIONS", "TOP", "TTL_SECONDS", "DEADLINE_MS"):
        monkeypatch.delenv(f"TRAINLEDGER_METRICS_SPEND_{name}", raising=False)
    assert Settings.from_env().metrics_spend == SpendConfig()


def test_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_DIMENSIONS", "experiment,category")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_TOP", "50")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_TTL_SECONDS", "0")
    monkeypatch.setenv("TRAINLEDGER_METRICS_SPEND_DEADLINE_MS", "500")
    assert Settings.from_env().metrics_spend == SpendConfig(("category", "experiment"), 50, 0, 0.5)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("DIMENSIONS", "stage", "unknown dimension 'stage'"),
        ("TOP", "1", "must be 2 to 1000, got 1"),
        ("TOP", "many", "must be an integer"),
        ("TTL_SECONDS", "-1", "must be 0 or more, got -1"),
        ("DEADLINE_MS", "0", "must be 1 or more, got 0"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(f"TRAINLEDGER_METRICS_SPEND_{name}", value)
    with pytest.raises(SystemExit, match=f"^TRAINLEDGER_METRICS_SPEND_{name}.*{says}"):
        Settings.from_env()
