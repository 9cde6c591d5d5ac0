"""Every validation error is a 4xx: inputs that once reached an uncaught exception (a webhook
URL with a malformed IDNA label; a plan for a project name the budgets it creates refuse) are
refused by their schema or checks, and the checks agree with each other."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.auth.model import TokenIn
from trainledger.budgets.model import BudgetIn
from trainledger.events.model import PROJECT_PATTERN
from trainledger.plans.model import PlanIn
from trainledger.webhooks.targets.checks import Target, UnsafeTarget, check_target

from tests.api.test_plans_http import plan_body
from tests.conftest import TEST_CARD, Api

BAD_IDNA = (
    "https://xn--a/",
    "https://xn--/",
    "https://xn--zz-/",
    "https://xn--a.xn--b/",
    "https://ok.xn--a/",
    "https://xn--ls8h.la/",  # an IDNA 2003 name, not IDNA 2008
)


@pytest.mark.parametrize("url", BAD_IDNA)
def test_malformed_idna_labels_are_unsafe_targets(url: str) -> None:
    with pytest.raises(UnsafeTarget):
        check_target(url)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["https://", "http://"]),
    st.lists(
        st.one_of(
            st.sampled_from(["xn--", "xn--a", "a", "-", "ß", "ａ", "\u202e", "%41", ".", "[::1]"]),
            st.text(min_size=1, max_size=6),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["/", "/hook", ":443/", ":0/", ":99999/", ""]),
)
def test_check_target_answers_a_target_or_an_unsafe_target(
    scheme: str, parts: list[str], tail: str
) -> None:
    url = scheme + ".".join(parts) + tail
    with contextlib.suppress(UnsafeTarget):
        assert isinstance(check_target(url), Target)


async def test_a_webhook_with_a_malformed_idna_label_is_a_4xx(api: Api) -> None:
    async with api.client() as c:
        for url in BAD_IDNA:
            r = await c.post("/v1/webhooks", json={"url": url, "format": "standard"})
            assert 400 <= r.status_code < 500, (url, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "url" in r.text


PROJECTS_REFUSED = ("LLM.7B", "Llm", "llm\n", "llm.7b", "-llm", "llm\u202e", "a" * 65, "")


async def test_a_plan_for_a_project_the_budgets_refuse_is_a_4xx(api: Api) -> None:
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text
        for project in PROJECTS_REFUSED:
            for path in ("/v1/plans", "/v1/plans/estimate"):
                r = await c.post(path, json=plan_body(project=project))
                assert r.status_code == 400, (path, project, r.status_code, r.text)
                assert "project" in r.text
        r = await c.post("/v1/plans", json=plan_body(project="llm-7b"))
        assert r.status_code == 201, r.text


def _accepts(kind: type[Any], body: dict[str, Any]) -> bool:
    try:
        msgspec.convert(body, kind)
    except msgspec.ValidationError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.from_regex(PROJECT_PATTERN[:-6] + "$", fullmatch=True), st.text(max_size=70)))
def test_one_project_name_rule_for_every_schema(project: str) -> None:
    """Plans, budgets and tokens admit exactly the same project names (the events' rule)."""
    plan = _accepts(PlanIn, {**plan_body(), "project": project})
    budget = _accepts(BudgetIn, {"project": project, "name": "b", "amount": "10"})
    token = _accepts(TokenIn, {"role": "read", "projects": [project]})
    assert plan == budget == token


async def test_offsets_beyond_int64_are_a_4xx(api: Api) -> None:
    """A paged read with an offset past 64 bits reached Redis (LRANGE/XRANGE arithmetic) and
    answered 500 (found by tests/api/test_schemathesis.py)."""
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text
        for path in (
            "/v1/events/rejected",
            "/v1/costs",
            "/v1/webhooks/deliveries",
            "/v1/evaluations",
        ):
            for offset in (2**70, 2**63, 2**31):
                r = await c.get(path, params={"project": "llm", "offset": offset})
                assert r.status_code == 400, (path, offset, r.status_code, r.text)
                assert "offset" in r.text
