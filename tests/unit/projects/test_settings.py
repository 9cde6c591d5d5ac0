"""A project's settings (`trainledger.projects.model`): the meta hash read into one typed
value, and the rules on it, without Redis."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from trainledger.projects.model import (
    DEFAULT_ATTRIBUTION_TAGS,
    DEFAULT_RATE_CARD,
    ProjectSettings,
    ProjectView,
    encode_attribution_tags,
    parse_attribution_tags,
    settings_fields,
)

TAG = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,10}", fullmatch=True)


def test_an_empty_hash_is_a_project_on_the_defaults() -> None:
    s = ProjectSettings.of({})
    assert s.rate_card == DEFAULT_RATE_CARD == "default"
    assert s.chosen_rate_card is None and s.currency is None
    assert s.attribution_tags == DEFAULT_ATTRIBUTION_TAGS == frozenset({"rework", "team"})
    assert (s.accepted, s.duplicates, s.budgets_rev) == (0, 0, "0")
    assert s.as_priced == (None, None, None)


def test_the_hash_is_read_field_by_field() -> None:
    meta = {
        "rate_card": "gpu",
        "currency": "EUR",
        "attribution_tags": "team,cost_center",
        "accepted": "12",
        "duplicates": "3",
        "budgets_rev": "7",
        "waste_policy": "{}",
        "pend_events": "2",  # the folder's own fields are not settings
    }
    s = ProjectSettings.of(meta)
    assert s.rate_card == "gpu"
    assert s.currency == "EUR"
    assert s.attribution_tags == frozenset({"team", "cost_center"})
    assert (s.accepted, s.duplicates, s.budgets_rev, s.waste_policy) == (12, 3, "7", "{}")
    # The ingest script compares the fields as stored, not as understood.
    assert s.as_priced == ("gpu", "EUR", "team,cost_center")


def test_an_empty_tags_field_names_no_tag() -> None:
    assert parse_attribution_tags("") == frozenset()
    assert parse_attribution_tags(None) == DEFAULT_ATTRIBUTION_TAGS


@given(st.lists(TAG, max_size=8))
def test_tags_written_are_read_back(tags: list[str]) -> None:
    assert parse_attribution_tags(encode_attribution_tags(tags)) == frozenset(tags)


def test_the_first_priced_batch_fixes_rate_card_and_currency_once() -> None:
    s = ProjectSettings.of({})
    s.first_priced("gpu", None)  # a card without a currency: the ledger's is ""
    assert (s.chosen_rate_card, s.currency) == ("gpu", "")
    s.first_priced("other", "USD")  # set ones stay (HSETNX)
    assert (s.chosen_rate_card, s.currency) == ("gpu", "")


def test_a_ledger_keeps_its_currency() -> None:
    assert not ProjectSettings.of({}).conflicts_with("USD")
    assert not ProjectSettings.of({"currency": ""}).conflicts_with("USD")
    assert not ProjectSettings.of({"currency": "USD"}).conflicts_with("USD")
    assert ProjectSettings.of({"currency": "USD"}).conflicts_with("EUR")
    assert ProjectSettings.of({"currency": "USD"}).conflicts_with(None)


def test_money_is_shown_in_the_ledgers_currency_else_the_cards() -> None:
    assert ProjectSettings.of({"currency": "USD"}).ledger_currency("EUR") == "USD"
    assert ProjectSettings.of({"currency": ""}).ledger_currency("EUR") == "EUR"
    assert ProjectSettings.of({}).ledger_currency(None) == ""


def test_a_change_writes_only_what_it_names() -> None:
    assert settings_fields(None, None, None) == {}
    assert settings_fields(None, None, ["team", "rework", "team"]) == {
        "attribution_tags": "rework,team"
    }
    assert settings_fields("gpu", "USD", None) == {"rate_card": "gpu", "currency": "USD"}
    assert settings_fields("gpu", None, []) == {"attribution_tags": "", "rate_card": "gpu"}


def test_the_view_shows_the_settings() -> None:
    view = ProjectView.of("llm", ProjectSettings.of({"accepted": "4", "currency": "USD"}))
    assert view == ProjectView("llm", "default", "USD", 4, 0, ["rework", "team"])
