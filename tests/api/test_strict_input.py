"""Strict input on the ingest path, over HTTP: quantities in one ASCII grammar (a JSON number,
or a string holding one), times in RFC 3339 with "Z" or "+HH:MM", labels free of control,
line-separator and bidirectional characters. Every refusal is a 4xx problem naming the field,
whatever the content type and whichever decode path (the compiled fast path for arrays, the
exact one for the rest), and nothing is counted."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from trainledger.events.model import time_text_problem

from costcore.money import decimal_text_problem, parse_price, parse_quantity
from tests.conftest import TEST_CARD, Api, event
from tests.integration.storage.test_wire import REFUSED_QUANTITIES

WHEN = datetime.now(UTC) - timedelta(hours=1)
Z = WHEN.strftime("%Y-%m-%dT%H:%M:%SZ")

REFUSED_TIMES = (
    WHEN.strftime("%Y-%m-%dT%H:%M:%S+0000"),
    WHEN.strftime("%Y-%m-%dT%H:%M:%S-0000"),
    WHEN.strftime("%Y-%m-%dT%H:%M:%S+00"),
    WHEN.strftime("%Y-%m-%d %H:%M:%SZ"),
    WHEN.strftime("%Y-%m-%dT%H:%M:%S"),
    WHEN.strftime("%Y-%m-%dT%H:%M:%S.1234567891Z"),
    WHEN.strftime("%Y-%m-%dT%H:%M:%SZ\n"),
    WHEN.strftime(" %Y-%m-%dT%H:%M:%SZ"),
    Z.replace("0", "\uff10"),
    Z.replace("1", "\u0661"),
)

# One of each class of character no label may hold.
FORBIDDEN_CHARS = {
    "NUL": "\x00",
    "LF": "\n",
    "US": "\x1f",
    "DEL": "\x7f",
    "PAD (C1)": "\x80",
    "NEL": "\x85",
    "APC (C1)": "\x9f",
    "LINE SEPARATOR": "\u2028",
    "PARAGRAPH SEPARATOR": "\u2029",
    "LRE": "\u202a",
    "RLO": "\u202e",
    "LRM": "\u200e",
    "RLM": "\u200f",
    "ALM": "\u061c",
    "LRI": "\u2066",
    "PDI": "\u2069",
    # Invisible and blank characters (issue 33.7): they reached chat and email unchanged.
    "SOFT HYPHEN": "\xad",
    "ZERO WIDTH SPACE": "\u200b",
    "WORD JOINER": "\u2060",
    "BYTE ORDER MARK": "\ufeff",
    "HANGUL FILLER": "\u3164",
    "TAG LATIN SMALL A": "\U000e0061",
    "CANCEL TAG": "\U000e007f",
    "STACKED COMBINING MARKS": "\u0301" * 8,  # (100 once reached chat; 4 are refused)
}

JSON_T = "application/json"
MSGPACK = "application/msgpack"
NDJSON = "application/x-ndjson"
CE = "application/cloudevents+json"
CE_BATCH = "application/cloudevents-batch+json"


def bodies(ev: dict[str, Any]) -> list[tuple[str, bytes, str]]:
    """The event alone in every content type: (content type, body, the field prefix)."""
    data = {k: v for k, v in ev.items() if k not in ("id", "time", "project")}
    ce = {
        "specversion": "1.0",
        "id": ev["id"],
        "source": "test",
        "type": "usage",
        "subject": ev["project"],
        "time": ev["time"],
        "data": data,
    }
    return [
        (JSON_T, json.dumps([ev]).encode(), "$[0]"),  # the fast path first
        (JSON_T, json.dumps(ev).encode(), "$"),  # the exact path
        (MSGPACK, msgspec.msgpack.encode([ev]), "$[0]"),
        (MSGPACK, msgspec.msgpack.encode(ev), "$"),
        (NDJSON, json.dumps(ev).encode() + b"\n", "$[0]"),
        (CE, json.dumps(ce).encode(), "$"),
        (CE_BATCH, json.dumps([ce]).encode(), "$[0]"),
    ]


async def _setup(api: Api) -> None:
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text


async def _refused(api: Api, ev: dict[str, Any], field: str) -> None:
    """Every body of the event is answered 422 with a problem naming `field`."""
    async with api.client() as c:
        for media, data, prefix in bodies(ev):
            r = await c.post("/v1/events", content=data, headers={"content-type": media})
            assert r.status_code == 422, (media, ev, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            problem = r.json()
            fields = [e["field"] for e in problem["errors"]]
            assert fields == [f"{prefix}.{field}"], (media, ev, problem)
            assert problem["accepted"] == 0


async def _nothing_counted(api: Api, project: str = "llm") -> None:
    async with api.client() as c:
        r = await c.get(f"/v1/projects/{project}")
        if r.status_code == 404:
            return
        assert r.status_code == 200, r.text
        assert r.json()["accepted_events"] == 0
        r = await c.get("/v1/costs", params={"project": project})
        assert r.status_code in (200, 404), r.text
        if r.status_code == 200:
            assert r.json()["total_events"] == 0


async def test_quantities_outside_the_grammar_are_refused_naming_the_field(api: Api) -> None:
    await _setup(api)
    for i, text in enumerate(REFUSED_QUANTITIES):
        await _refused(api, event(f"q{i}", text), "quantity")
    await _numbers_outside_json_are_malformed_bodies(api)
    await _nothing_counted(api)
    await _json_numbers_are_accepted_as_numbers_and_as_strings(api)


async def _numbers_outside_json_are_malformed_bodies(api: Api) -> None:
    async with api.client() as c:
        for number in ("+1", ".5", "5.", "01", "1_000", "0x10", "Infinity", "NaN"):
            text = json.dumps(event("n1")).replace('"quantity": "1"', f'"quantity": {number}')
            for data in (text, f"[{text}]"):
                r = await c.post(
                    "/v1/events", content=data, headers={"content-type": "application/json"}
                )
                assert r.status_code == 400, (number, r.text)
                assert r.headers["content-type"].startswith("application/problem+json")


async def _json_numbers_are_accepted_as_numbers_and_as_strings(api: Api) -> None:
    async with api.client() as c:
        for i, (sent, micro) in enumerate(
            [(3, 3), ("0", 0), ("1.5", 1.5), ("2.5E-1", 0.25), (1.25, 1.25), ("1e1", 10)]
        ):
            ev = {**event(f"ok{i}"), "quantity": sent}
            r = await c.post("/v1/events", json=[ev])
            assert r.status_code == 200, (sent, r.text)
            assert r.json()["accepted"] == 1, (sent, micro)


async def test_times_outside_rfc_3339_with_z_or_an_offset_are_refused(api: Api) -> None:
    await _setup(api)
    for i, text in enumerate(REFUSED_TIMES):
        await _refused(api, event(f"t{i}", time=text), "time")
    await _nothing_counted(api)


async def test_labels_with_forbidden_characters_are_refused(api: Api) -> None:
    await _setup(api)
    for ch in FORBIDDEN_CHARS.values():
        await _labels_refused(api, ch)
    await _nothing_counted(api)


async def _labels_refused(api: Api, ch: str) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({**event("l1"), "id": f"l{ch}1"}, "id"),
        (event("l2", project=f"llm{ch}"), "project"),
        (event("l3", sku=f"gpu.h100.hour{ch}"), "sku"),
        (event("l4", stage=f"pretrain{ch}"), "stage"),
        (event("l5", experiment=f"exp{ch}1"), "experiment"),
        (event("l6", owner=f"{ch}alice"), "owner"),
        (event("l7", tags={"team": f"a{ch}b"}), "tags.team"),
        (event("l8", tags={f"te{ch}am": "a"}), "tags"),
    ]
    for ev, field in cases:
        await _refused(api, ev, field)


def test_prices_and_quantities_read_one_ascii_grammar() -> None:
    """`parse_quantity`/`parse_price` (rate cards, budgets, plans) read the same ASCII decimal
    text and nothing else; event quantities are also held to JSON's no-leading-zero rule."""
    for text in REFUSED_QUANTITIES:
        if text == "01":
            continue  # an ASCII decimal: only the event grammar (a JSON number) refuses it
        for parse in (parse_quantity, parse_price):
            with pytest.raises(ValueError):
                parse(text)
    assert decimal_text_problem("01", json_number=True) is not None
    assert parse_quantity("01") == 1_000_000  # a rate card's "007" stays readable
    assert parse_quantity("2.5E-1") == 250_000
    assert parse_price("0.000000001") == 1


def test_time_grammar() -> None:
    for text in REFUSED_TIMES:
        assert time_text_problem(text) is not None, text
    for text in (Z, "2024-02-29T23:59:59.123456789-09:30", "2024-01-01t00:00:00z"):
        assert time_text_problem(text) is None, text


def _refuses(kind: type[Any], body: dict[str, Any]) -> bool:
    try:
        msgspec.convert(body, kind)
    except msgspec.ValidationError:
        return True
    return False


def test_every_label_schema_refuses_the_forbidden_characters() -> None:
    """Free-text labels outside events: budget names, webhook descriptions, token names,
    experiment-progress metrics, analysis bucket labels; and names that must match a
    pattern refuse a trailing newline (msgspec's `re.search` with a bare `$` did not)."""
    from trainledger.analysis.data_strategy import UpsampleBucket
    from trainledger.auth.model import TokenIn
    from trainledger.budgets.model import BudgetIn
    from trainledger.waste.service import ExperimentProgressIn
    from trainledger.webhooks.registry import WebhookIn

    cases: list[tuple[type[Any], dict[str, Any], str]] = [
        (BudgetIn, {"project": "llm", "name": "b", "amount": "10"}, "name"),
        (WebhookIn, {"url": "https://example.com/h", "description": "d"}, "description"),
        (TokenIn, {"role": "read", "name": "n"}, "name"),
        (ExperimentProgressIn, {"experiment": "e", "metric": "loss", "value": "1"}, "metric"),
        (UpsampleBucket, {"share": "0.5", "repeats": "1", "label": "top"}, "label"),
    ]
    for kind, body, field in cases:
        assert not _refuses(kind, body), kind
        for ch in FORBIDDEN_CHARS.values():
            assert _refuses(kind, {**body, field: body[field] + ch}), (kind, repr(ch))
    patterned: list[tuple[type[Any], dict[str, Any], str]] = [
        (BudgetIn, {"project": "llm", "name": "b", "amount": "10"}, "project"),
        (BudgetIn, {"project": "llm", "name": "b", "amount": "10"}, "amount"),
        (ExperimentProgressIn, {"experiment": "e", "metric": "loss", "value": "1"}, "experiment"),
        (ExperimentProgressIn, {"experiment": "e", "metric": "loss", "value": "1"}, "value"),
        (UpsampleBucket, {"share": "0.5", "repeats": "1"}, "share"),
        (UpsampleBucket, {"share": "0.5", "repeats": "1"}, "repeats"),
    ]
    for kind, body, field in patterned:
        assert _refuses(kind, {**body, field: body[field] + "\n"}), (kind, field)


def test_rate_cards_and_plans_refuse_the_forbidden_characters_in_their_texts() -> None:
    from trainledger.plans.estimate import estimate_plan
    from trainledger.plans.model import PlanError, PlanIn
    from trainledger.ratecards.model import RateCardError, RateCardIn, validate_rate_card

    from tests.api.test_plans_http import plan_body

    sku = TEST_CARD["skus"][0]  # type: ignore[index]
    skus = validate_rate_card(msgspec.convert(TEST_CARD, RateCardIn))
    for ch in FORBIDDEN_CHARS.values():
        for field in ("unit", "description", "source"):
            card = {**TEST_CARD, "skus": [{**sku, field: f"x{ch}"}]}
            with pytest.raises(RateCardError) as refused:
                validate_rate_card(msgspec.convert(card, RateCardIn))
            assert refused.value.field == f"$.skus[0].{field}"
        with pytest.raises(RateCardError):
            validate_rate_card(msgspec.convert({**TEST_CARD, "description": ch}, RateCardIn))
        body = plan_body()
        with pytest.raises(PlanError) as plan_refused:
            estimate_plan(msgspec.convert({**body, "description": f"d{ch}"}, PlanIn), skus)
        assert plan_refused.value.field == "$.description"
        stages = [{**body["stages"][0], "label": f"l{ch}"}]
        with pytest.raises(PlanError) as plan_refused:
            estimate_plan(msgspec.convert({**body, "stages": stages}, PlanIn), skus)
        assert plan_refused.value.field == "$.stages[0].label"


async def test_a_rate_card_unit_with_a_bidi_character_is_a_4xx_naming_it(api: Api) -> None:
    sku = TEST_CARD["skus"][0]  # type: ignore[index]
    async with api.client() as c:
        card = {**TEST_CARD, "skus": [{**sku, "unit": "hour\u202e"}]}
        r = await c.put("/v1/rate-cards/default", json=card)
        assert 400 <= r.status_code < 500, r.text
        assert "$.skus[0].unit" in r.text
        r = await c.post("/v1/budgets", json={"project": "llm", "name": "b\u2028", "amount": "1"})
        assert r.status_code == 400, r.text
        assert "name" in r.text


async def test_cloudevents_numbers_are_read_exactly_not_as_floats(api: Api) -> None:
    """A CloudEvent's `data` is read untyped: its quantity, a JSON number, was a float there,
    and 1.00000000000000000001 (20 decimals) became 1 and was accepted."""
    await _setup(api)
    ce = {
        "specversion": "1.0",
        "id": "ce-exact",
        "source": "test",
        "type": "usage",
        "subject": "llm",
        "time": Z,
        "data": {"sku": "gpu.h100.hour", "quantity": 0},
    }
    text = json.dumps(ce).replace('"quantity": 0', '"quantity": 1.00000000000000000001')
    async with api.client() as c:
        for media, data, prefix in ((CE, text, "$"), (CE_BATCH, f"[{text}]", "$[0]")):
            r = await c.post("/v1/events", content=data, headers={"content-type": media})
            assert r.status_code == 422, r.text
            assert [e["field"] for e in r.json()["errors"]] == [f"{prefix}.quantity"]
        ok = text.replace("1.00000000000000000001", "1.250000000000000000000")
        r = await c.post("/v1/events", content=ok, headers={"content-type": CE})
        assert r.status_code == 200 and r.json()["cost_by_project"] == {"llm": "3.125"}, r.text
    await _nothing_counted(api, "other")
