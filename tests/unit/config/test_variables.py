"""The configuration's one list of variables (`trainledger.config.VARIABLES`): each bad value
refused with its name, its value (never a secret's) and what is allowed; every variable the
code reads is in the list, and every one is documented. Driven by the list itself, so a new
variable is covered without editing these tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest
from msgspec import Meta
from trainledger.config import (
    VARIABLES,
    ConfigError,
    Settings,
    Variable,
    default_data_dir,
    read_variables,
)
from trainledger.config.declare import declared, setting
from trainledger.config.docs import with_tables
from trainledger.config.handoff import hand_down, handed_down

REPO = Path(__file__).resolve().parents[3]
CONFIG_DOC = REPO / "docs" / "reference" / "configuration.md"
# Set by `trainledger serve` for its own workers (the settings, whole), and the test suite's
# own switches.
NOT_SETTINGS = re.compile(r"TRAINLEDGER_(SERVE_SETTINGS|TEST_\w+)")


@pytest.mark.parametrize("variable", VARIABLES, ids=[v.name for v in VARIABLES])
def test_a_refused_value_names_the_variable_the_value_and_what_is_allowed(
    variable: Variable,
) -> None:
    if variable.kind.refused is None:
        pytest.skip(f"{variable.name} takes any value ({variable.kind.allowed})")
    with pytest.raises(ConfigError) as caught:
        read_variables({variable.name: variable.kind.refused})
    (problem,) = caught.value.problems
    assert caught.value.code == 2
    assert problem.startswith(variable.name + "=") and variable.kind.allowed in problem
    assert (repr(variable.kind.refused) in problem) != variable.secret, problem


def test_every_bad_value_is_named_at_once() -> None:
    refusable = [v for v in VARIABLES if v.kind.refused is not None]
    with pytest.raises(ConfigError) as caught:
        read_variables({v.name: str(v.kind.refused) for v in refusable})
    assert len(caught.value.problems) == len(refusable)


def test_unset_and_empty_give_the_defaults() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({v.name: "" for v in VARIABLES}) == Settings()


def test_allowed_values_are_read() -> None:
    settings = Settings.from_env(
        {
            "TRAINLEDGER_LOG_LEVEL": "WARNING",
            "TRAINLEDGER_MAX_BATCH_EVENTS": "7",
            "TRAINLEDGER_FOLD_IN_WORKERS": "0",
            "TRAINLEDGER_REDIS_URL": "redis+cluster://10.0.0.1:7000",
            "TRAINLEDGER_DATA_DIR": "/srv/ledger",
        }
    )
    assert settings.log_level == "warning" and settings.max_batch_events == 7
    assert not settings.fold_in_workers and settings.data_dir == Path("/srv/ledger")
    assert settings.redis_url == "redis+cluster://10.0.0.1:7000"


def test_a_url_password_is_not_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        read_variables({"TRAINLEDGER_REDIS_URL": "http://user:hunter2@redis:6379/0"})
    assert "hunter2" not in str(caught.value) and "TRAINLEDGER_REDIS_URL" in str(caught.value)


def test_settings_that_conflict_are_refused() -> None:
    with pytest.raises(
        ConfigError,
        match="TRAINLEDGER_WEBHOOK_LEASE_S must be longer than TRAINLEDGER_WEBHOOK_TIMEOUT_S",
    ):
        read_variables({"TRAINLEDGER_WEBHOOK_LEASE_S": "5", "TRAINLEDGER_WEBHOOK_TIMEOUT_S": "10"})


def test_the_default_data_dir_is_the_users_whatever_the_cwd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.chdir(tmp_path)
    if default_data_dir() == tmp_path / "share" / "trainledger":  # Linux and the BSDs
        assert Settings().data_dir == tmp_path / "share" / "trainledger"
    assert default_data_dir().is_absolute()


def test_every_variable_the_code_reads_is_in_the_list() -> None:
    listed = {v.name for v in VARIABLES}
    spelled = set()
    for path in (REPO / "service").rglob("*.py"):
        spelled |= set(re.findall(r"TRAINLEDGER_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    unlisted = {n for n in spelled if not NOT_SETTINGS.fullmatch(n)} - listed
    assert not unlisted, f"read by the code but not in trainledger.config.VARIABLES: {unlisted}"


def test_every_variable_is_documented() -> None:
    doc = CONFIG_DOC.read_text()
    missing = [v.name for v in VARIABLES if f"`{v.name}`" not in doc]
    assert not missing, f"not in {CONFIG_DOC.relative_to(REPO)}: {missing}"


def test_the_docs_tables_are_made_from_the_declarations() -> None:
    doc = CONFIG_DOC.read_text()
    assert with_tables(doc) == doc, "stale: run `python3 dev.py config-docs`"
    for variable in VARIABLES:  # each row says what the error line says is allowed
        (row,) = [line for line in doc.splitlines() if line.startswith(f"| `{variable.name}` |")]
        assert f"| {variable.kind.allowed} |" in row


def test_a_new_declaration_is_read_checked_and_documented() -> None:
    """The 'Adding a setting' trace of docs/development.md: one field, nothing else."""

    @dataclass(frozen=True)
    class WithThreshold:
        alert_threshold_percent: Annotated[int, Meta(ge=1, le=100)] = setting(
            80, "TRAINLEDGER_ALERT_THRESHOLD_PERCENT", "the share of a budget that alerts"
        )

    (variable,) = declared(WithThreshold)
    assert variable.kind.allowed == "a whole number from 1 to 100"
    assert variable.convert("42") == 42
    with pytest.raises(ValueError):
        variable.convert(str(variable.kind.refused))
    assert variable.shown_default == "`80`" and variable.env.section == "server"


def test_serve_hands_its_workers_the_settings_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env(
        {
            "TRAINLEDGER_DATA_DIR": "/srv/ledger",
            "TRAINLEDGER_WEBHOOK_ALLOWLIST": "127.0.0.1,10.0.0.0/8",
            "TRAINLEDGER_METRICS_SPEND_DIMENSIONS": "owner",
            "TRAINLEDGER_LOG_FORMAT": "text",
            "TRAINLEDGER_SECRET_KEY_FILE": "/run/secrets/key",
        }
    )
    monkeypatch.setenv("TRAINLEDGER_MAX_BATCH_EVENTS", "3")  # not what the workers read
    monkeypatch.setenv("TRAINLEDGER_SERVE_SETTINGS", "")  # put back as it was afterwards
    assert handed_down() is None
    hand_down(settings, serve_pid=4242)
    handoff = handed_down()
    assert handoff is not None and handoff.serve_pid == 4242
    assert handoff.settings == settings and handoff.settings.max_batch_events == 50_000
