"""Deterministic event ids: one natural key, one id; they pass the service's id pattern."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.client import event_id, namespace
from trainledger.events.model import EVENT_ID_PATTERN


@given(st.lists(st.text() | st.integers(), min_size=1, max_size=5))
def test_same_key_same_id_and_a_valid_one(key: list[object]) -> None:
    assert event_id(*key) == event_id(*key)
    assert re.fullmatch(EVENT_ID_PATTERN, event_id(*key))


def test_parts_are_kept_apart_and_namespaces_differ() -> None:
    assert event_id("a", "b:c") != event_id("a:b", "c")
    assert event_id("ab", "c") != event_id("a", "bc")
    assert event_id("job", 42) == event_id("job", "42")
    assert event_id("job", 42, namespace=namespace("team-a")) != event_id("job", 42)
    with pytest.raises(ValueError):
        event_id()
