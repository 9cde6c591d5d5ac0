"""Rate cards over real HTTP: versions, validation, effective dating, project binding."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx

from tests.conftest import TEST_CARD, Api, event


def client(api: Api, token: str | None = None) -> httpx.AsyncClient:
    """Like `api.client`, without loading a CA bundle per client (plain HTTP; ~0.1 s each)."""
    headers = {"Authorization": f"Bearer {token or api.admin_token}"}
    return httpx.AsyncClient(base_url=api.base_url, headers=headers, timeout=60, verify=False)


def card(
    gpu_price: str = "2.50", effective_from: datetime | str | None = None, **top: Any
) -> dict[str, Any]:
    """TEST_CARD with another GPU price, start or top-level fields."""
    body: dict[str, Any] = copy.deepcopy(TEST_CARD)
    body["skus"][0]["unit_price"] = gpu_price
    if effective_from is not None:
        body["effective_from"] = (
            effective_from.isoformat() if isinstance(effective_from, datetime) else effective_from
        )
    body.update(top)
    return body


def iso(when: datetime) -> str:
    return when.isoformat()


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_versions_current_and_history(api: Api) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    starts = [
        datetime(2020, 1, 1, tzinfo=UTC),
        now - timedelta(days=1),
        now + timedelta(days=30),  # announced, not yet in effect
    ]
    prices = ["2.00", "3.00", "4.00"]
    async with client(api) as c:
        assert (await c.get("/v1/rate-cards/gpu")).status_code == 404
        for number, (start, price) in enumerate(zip(starts, prices, strict=True), start=1):
            r = await c.put("/v1/rate-cards/gpu", json=card(price, start, description=f"v{number}"))
            assert r.status_code == 201, r.text
            created = r.json()
            assert created["version"] == number
            assert created["name"] == "gpu"
            assert parse_time(created["effective_from"]) == start

        r = await c.get("/v1/rate-cards/gpu")
        assert r.status_code == 200, r.text
        view = r.json()
        assert view["name"] == "gpu"
        assert view["current"]["version"] == 2
        assert view["current"]["skus"][0]["unit_price"] == "3.00"
        assert view["current"]["description"] == "v2"
        history = view["history"]
        assert [v["version"] for v in history] == [1, 2, 3]
        assert [parse_time(v["effective_from"]) for v in history] == starts
        assert [v["skus"][0]["unit_price"] for v in history] == prices
        assert all(v["currency"] == "USD" and len(v["skus"]) == 4 for v in history)

        # A fourth version back-dated before v2 is numbered 4 but v2 stays current (later start).
        r = await c.put("/v1/rate-cards/gpu", json=card("9.99", now - timedelta(days=10)))
        assert r.json()["version"] == 4
        view = (await c.get("/v1/rate-cards/gpu")).json()
        assert view["current"]["version"] == 2
        assert len(view["history"]) == 4

        assert (await c.get("/v1/rate-cards")).json()["names"] == ["gpu"]


def _mutate(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(body: dict[str, Any]) -> None:
        target: Any = body
        for step in path[:-1]:
            target = target[step]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return apply


_DELETE = object()

# (what is wrong, change to TEST_CARD, status, JSON path of the field at fault)
INVALID_CARDS: list[tuple[str, Callable[[dict[str, Any]], None], int, str]] = [
    ("duplicate SKU code", _mutate(["skus", 3, "code"], "gpu.h100.hour"), 422, "$.skus[3].code"),
    (
        "tiers not increasing",
        _mutate(["skus", 2, "tiers", 1, "up_to"], "100"),
        422,
        "$.skus[2].tiers[1].up_to",
    ),
    (
        "last tier bounded",
        _mutate(["skus", 2, "tiers", 2, "up_to"], "5000"),
        422,
        "$.skus[2].tiers[2].up_to",
    ),
    (
        "unbounded tier before the last",
        _mutate(["skus", 2, "tiers", 0, "up_to"], _DELETE),
        422,
        "$.skus[2].tiers[0].up_to",
    ),
    (
        "price with more than 9 decimals",
        _mutate(["skus", 0, "unit_price"], "0.0000000001"),
        422,
        "$.skus[0].unit_price",
    ),
    ("negative price", _mutate(["skus", 0, "unit_price"], "-2.50"), 400, "$.skus[0].unit_price"),
    ("ill-formed price", _mutate(["skus", 1, "unit_price"], "1e3"), 400, "$.skus[1].unit_price"),
    ("price as a number", _mutate(["skus", 1, "unit_price"], 1.8), 400, "$.skus[1].unit_price"),
    (
        "ill-formed tier price",
        _mutate(["skus", 2, "tiers", 1, "unit_price"], "cheap"),
        400,
        "$.skus[2].tiers[1].unit_price",
    ),
    ("lower-case currency", _mutate(["currency"], "usd"), 400, "$.currency"),
    (
        "time without offset",
        _mutate(["effective_from"], "2026-01-01T00:00:00"),
        400,
        "$.effective_from",
    ),
    ("no SKUs", _mutate(["skus"], []), 400, "$.skus"),
]


async def test_invalid_cards_name_the_field(api: Api) -> None:
    async with client(api) as c:
        for what, change, status, path in INVALID_CARDS:
            body = copy.deepcopy(TEST_CARD)
            change(body)
            r = await c.put("/v1/rate-cards/bad", json=body)
            assert r.status_code == status, (what, r.text)
            assert r.headers["content-type"].startswith("application/problem+json"), what
            problem = r.json()
            assert problem["status"] == status
            field = problem["errors"][0]["field"]
            # Our own checks spell "$.skus[0]…"; Litestar's schema errors drop the "$.".
            assert "$." + field.removeprefix("$.") == path, (what, problem)
            assert problem["errors"][0]["reason"], what
            assert field.removeprefix("$.") in problem["detail"], (what, problem)
        # Nothing of any of them was stored.
        assert (await c.get("/v1/rate-cards/bad")).status_code == 404
        assert (await c.get("/v1/rate-cards")).json()["names"] == []
        # The unchanged card is accepted: every failure above came from its one change.
        assert (await c.put("/v1/rate-cards/bad", json=TEST_CARD)).status_code == 201


async def test_late_events_get_the_price_in_effect_at_their_own_time(api: Api) -> None:
    now = datetime.now(UTC)
    v2_start = (now - timedelta(days=2)).replace(microsecond=0)
    expected_by_day: dict[str, Decimal] = {}
    async with client(api) as c:
        r = await c.put("/v1/rate-cards/default", json=card("2.00", "2026-01-01T00:00:00Z"))
        assert r.status_code == 201, r.text
        r = await c.put("/v1/rate-cards/default", json=card("3.00", v2_start))
        assert r.status_code == 201, r.text

        # Posted in this order: the on-time event first, then events that arrive late.
        cases = [
            ("on-time", now - timedelta(hours=1), "5", Decimal("3.00")),
            ("late", now - timedelta(days=5), "7", Decimal("2.00")),
            ("just-before-v2", v2_start - timedelta(seconds=1), "1.5", Decimal("2.00")),
            ("at-v2-start", v2_start, "0.25", Decimal("3.00")),
        ]
        for event_id, when, quantity, price in cases:
            r = await c.post("/v1/events", json=event(event_id, quantity, time=iso(when)))
            assert r.status_code == 200, r.text
            report = r.json()
            assert report["accepted"] == 1, (event_id, report)
            cost = Decimal(quantity) * price
            assert Decimal(report["cost_by_project"]["llm"]) == cost, event_id
            day = when.date().isoformat()
            expected_by_day[day] = expected_by_day.get(day, Decimal(0)) + cost

        r = await c.get("/v1/costs", params={"project": "llm", "group_by": "day"})
        assert r.status_code == 200, r.text
        report = r.json()
        got = {row["key"]["day"]: Decimal(row["cost"]) for row in report["rows"]}
        assert got == expected_by_day
        # 5×3.00 + 7×2.00 + 1.5×2.00 + 0.25×3.00
        assert Decimal(report["total_cost"]) == Decimal("32.75")
        assert report["total_events"] == 4


async def test_event_before_the_first_version_is_rejected(api: Api) -> None:
    now = datetime.now(UTC)
    start = now - timedelta(days=3)
    async with client(api) as c:
        r = await c.put("/v1/rate-cards/default", json=card("2.00", start))
        assert r.status_code == 201, r.text

        too_early = event("early", "4", time=iso(now - timedelta(days=10)))  # inside the window
        r = await c.post("/v1/events", json=too_early)
        assert r.status_code == 422, r.text
        body = r.json()
        assert body["accepted"] == 0
        rejected = body["rejected"]
        assert len(rejected) == 1
        assert rejected[0]["id"] == "early"
        assert rejected[0]["field"].endswith(".time")
        assert "rate card" in rejected[0]["reason"] and "default" in rejected[0]["reason"]

        # Kept as a dead letter with the same reason; the totals did not move.
        r = await c.get("/v1/events/rejected", params={"project": "llm"})
        page = r.json()
        assert page["total"] == 1
        assert page["items"][0]["id"] == "early"
        assert "rate card" in page["items"][0]["reason"]
        r = await c.get("/v1/costs", params={"project": "llm"})
        assert r.json()["total_events"] == 0

        # An event after the start is priced with that version.
        r = await c.post(
            "/v1/events", json=event("after", "4", time=iso(start + timedelta(hours=1)))
        )
        assert r.json()["accepted"] == 1, r.text
        assert Decimal(r.json()["cost_by_project"]["llm"]) == Decimal("8.00")


async def test_project_bound_to_a_named_card(api: Api) -> None:
    async with client(api) as c:
        assert (await c.put("/v1/rate-cards/default", json=card("2.50"))).status_code == 201
        assert (await c.put("/v1/rate-cards/premium", json=card("4.00"))).status_code == 201
        r = await c.put("/v1/rate-cards/euro", json=card("2.00", currency="EUR"))
        assert r.status_code == 201, r.text

        # An unknown card cannot be bound.
        r = await c.put("/v1/projects/bound", json={"rate_card": "nope"})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "rate_card"

        r = await c.put("/v1/projects/bound", json={"rate_card": "premium"})
        assert r.status_code == 200, r.text
        assert r.json()["rate_card"] == "premium"
        assert r.json()["currency"] == "USD"

        batch = [event("b1", "3", project="bound"), event("p1", "3", project="plain")]
        r = await c.post("/v1/events", json=batch)
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["accepted"] == 2
        assert Decimal(report["cost_by_project"]["bound"]) == Decimal("12.00")  # 3 × 4.00
        assert Decimal(report["cost_by_project"]["plain"]) == Decimal("7.50")  # 3 × 2.50 (default)

        # The project keeps its ledger in USD: a EUR card cannot take over.
        r = await c.put("/v1/projects/bound", json={"rate_card": "euro"})
        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "EUR" in r.json()["detail"] and "USD" in r.json()["detail"]
        project = (await c.get("/v1/projects/bound")).json()
        assert project["rate_card"] == "premium"
        assert project["currency"] == "USD"
        assert project["accepted_events"] == 1

        # Still priced with premium afterwards.
        r = await c.post("/v1/events", json=event("b2", "1", project="bound"))
        assert Decimal(r.json()["cost_by_project"]["bound"]) == Decimal("4.00")
        r = await c.get("/v1/costs", params={"project": "bound"})
        assert Decimal(r.json()["total_cost"]) == Decimal("16.00")
        assert r.json()["currency"] == "USD"

        # A project without data may take the EUR card, and is then priced in EUR.
        r = await c.put("/v1/projects/fresh", json={"rate_card": "euro"})
        assert r.status_code == 200, r.text
        r = await c.post("/v1/events", json=event("f1", "3", project="fresh"))
        assert Decimal(r.json()["cost_by_project"]["fresh"]) == Decimal("6.00")
        r = await c.get("/v1/costs", params={"project": "fresh"})
        assert r.json()["currency"] == "EUR"
