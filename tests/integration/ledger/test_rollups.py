"""Roll-ups answer exactly what the finest totals answer, and the planner reads few of them."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from trainledger.costs import grouping
from trainledger.costs.grouping import group_sums
from trainledger.costs.plan import plan_reads
from trainledger.costs.query import CostQuery, in_range
from trainledger.costs.report import cost_report
from trainledger.ledger.folding import settle
from trainledger.ledger.rollups import ROLLUP_VERSION, ROLLUPS, covering
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event, sync_client
from tests.integration.rebuild.test_rebuild import random_events, snapshot

DIMS = ("stage", "experiment", "category", "sku", "owner", "fixed")


def tagged_events(rng: random.Random, n: int) -> list[dict[str, object]]:
    events = random_events(rng, n)
    for e in events:
        if rng.random() < 0.4:
            e["tags"] = {"team": rng.choice(["data", "core"]), "rework": rng.choice(["1", "no"])}
    return events


async def both_ways(store: Stores, query: CostQuery) -> tuple[dict[object, list[int]], str]:
    """The query's sums from the roll-ups the planner picks and from the finest totals."""
    await settle(store, query.project)
    daily, accepted, covered = await store.ledger.totals_state(query.project, ROLLUP_VERSION)
    assert covered == accepted > 0
    days = in_range(daily, query)
    fast = await group_sums(store, query, days, True)
    fine = await group_sums(store, query, days, False)
    if "sku" not in query.group_by:  # quantities are summed per SKU only
        for row in (*fast.values(), *fine.values()):
            row[1] = 0
    assert fast == fine, query
    return fast, plan_reads(query, days, True).source  # type: ignore[return-value]


async def test_rollups_answer_exactly_what_the_finest_totals_answer(
    api: Api, store: Stores
) -> None:
    await put_card(api)
    events = tagged_events(random.Random(11), 800)
    for i in range(0, len(events), 50):
        await post(api, events[i : i + 50])
    today = datetime.now(UTC).date()
    month_start = today.replace(day=1)
    ranges = [
        (None, None),
        (today - timedelta(days=6), None),
        (month_start, None),  # a whole month, and nothing after it
        (today - timedelta(days=40), month_start),  # partial days plus whole months
        (today - timedelta(days=20), today - timedelta(days=3)),
    ]
    groupings = [
        (),
        *((d,) for d in (*DIMS, "day", "tag.team")),
        *itertools.combinations(("stage", "experiment", "sku", "owner", "category"), 2),
        ("category", "stage", "fixed", "tag.rework"),
        ("day", "sku"),
    ]
    sources = set()
    for (lo, hi), group_by, granularity in itertools.product(
        ranges, groupings, (None, "day", "week", "month")
    ):
        query = CostQuery("llm", lo, hi, group_by, granularity)  # type: ignore[arg-type]
        sums, source = await both_ways(store, query)
        sources.add(source)
        if lo is None and hi is None and granularity is None and group_by == ():
            assert sum(v[2] for v in sums.values()) == 800
    filtered = [
        CostQuery("llm", None, None, ("sku",), None, {"stage": "eval"}),
        CostQuery("llm", None, None, ("stage",), None, {"fixed": "fixed"}),
        CostQuery("llm", None, None, ("experiment",), "month", {"owner": "bob"}),
        CostQuery("llm", None, None, ("sku",), None, {"experiment": "mix-a", "owner": "alice"}),
        CostQuery("llm", None, None, ("stage",), None, {}, {"team": "data"}),
        CostQuery("llm", None, None, ("sku",), None, {}, {"team": "data"}),  # finest only
    ]
    for query in filtered:
        sums, source = await both_ways(store, query)
        assert sums, query  # the filters keep something, so the comparison means something
        sources.add(source)
    # Every roll-up was used, and the finest totals where none covers the query.
    assert sources == {r.name for r in ROLLUPS} | {"tot"}


async def test_queries_fall_back_until_a_rebuild_completes_the_rollups(
    api: Api, store: Stores
) -> None:
    await put_card(api)
    await post(api, [event(f"e{i}", "2", stage="eval", experiment="x") for i in range(5)])
    query = CostQuery("llm", None, None, ("stage",))
    await settle(store, "llm")
    daily, accepted, covered = await store.ledger.totals_state("llm", ROLLUP_VERSION)
    assert (accepted, covered) == (5, 5)
    assert plan_reads(query, sorted(daily), covered == accepted).source == "sku"
    # As if the data had been written before roll-ups existed: their keys are missing.
    client = sync_client(api.redis_url)
    before = snapshot(api.redis_url)
    for key in before:
        if b":ru:" in key:
            client.delete(key)
    client.close()
    async with api.client() as c:
        r = await c.get("/v1/costs", params={"project": "llm", "group_by": "stage"})
        assert r.json()["total_cost"] == "25.00"  # from the finest totals: 5 × 2 h × 2.50
        assert (await store.ledger.totals_state("llm", ROLLUP_VERSION))[2] == 0
        assert (await c.post("/v1/projects/llm/rebuild")).status_code == 200
    assert snapshot(api.redis_url) == before  # the rebuild wrote them all again, exactly
    daily, accepted, covered = await store.ledger.totals_state("llm", ROLLUP_VERSION)
    assert accepted == covered == 5


def test_planner_reads_whole_months_from_month_rollups_and_the_rest_by_day() -> None:
    days = [f"202610{d:02d}" for d in range(1, 32)] + [f"202611{d:02d}" for d in range(1, 31)]
    days += ["20261201", "20261202"]
    everything = plan_reads(CostQuery("p", None, None, ("stage",)), days, True)
    assert (everything.source, everything.days, everything.months) == (
        "sku",
        [],
        ["202610", "202611", "202612"],
    )
    ranged = plan_reads(
        CostQuery("p", date(2026, 10, 20), date(2026, 12, 1), ("experiment",)),
        [d for d in days if "20261020" <= d < "20261201"],
        True,
    )
    assert ranged.source == "exp" and ranged.months == ["202611"]
    assert ranged.days == [f"202610{d}" for d in range(20, 32)]
    # Day grouping and day or week periods read days; the finest totals when incomplete.
    for query in (
        CostQuery("p", None, None, ("day",)),
        CostQuery("p", None, None, ("stage",), "week"),
    ):
        assert plan_reads(query, days, True).months == []
    assert plan_reads(CostQuery("p", None, None, ("stage",)), days, False).source == "tot"
    # xsku is kept per day only; tags and filters pick the roll-up that holds them.
    assert plan_reads(CostQuery("p", None, None, ("experiment", "sku")), days, True).months == []
    assert covering({"stage", "tags"}, False) is not None
    assert covering({"experiment", "tags"}, False) is None
    assert covering({"stage", "experiment"}, True) is None  # quantity needs a SKU roll-up
    assert Keys.rollup("p", "sku", "202611").startswith("tl:{p:p}:")


async def test_quantities_read_for_the_page_only_equal_the_full_sums(
    api: Api, store: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Big sources (`xsku`, the finest totals) leave `q|` fields on the server and read the
    quantities of the page's rows afterwards: the reports equal those summing everything."""
    await put_card(api)
    events = tagged_events(random.Random(5), 600)
    for i in range(0, len(events), 60):
        await post(api, events[i : i + 60])
    today = datetime.now(UTC).date()
    queries: list[dict[str, Any]] = [
        {"group_by": ["experiment", "sku"]},
        {"group_by": ["experiment", "sku"], "from_day": today - timedelta(days=6)},
        {"group_by": ["owner", "sku"], "granularity": "week", "limit": 3, "offset": 2},
        {"group_by": ["sku", "tag.team"]},  # the finest totals
        {"group_by": ["day", "sku", "stage"], "sort": "-events", "limit": 5},
        {"group_by": ["sku", "experiment"], "filters": {"fixed": "elastic"}, "sort": "key"},
        {"group_by": ["stage", "experiment"]},  # no quantities at all
        {"group_by": ["experiment", "sku"], "top": 4},  # '(other)': everything is read
    ]
    units = {"gpu.h100.hour": "hour"}

    async def report(q: dict[str, Any]) -> Any:
        return await cost_report(
            store, "llm", q.get("from_day"), None, q["group_by"], units,
            q.get("offset", 0), q.get("limit", 100), granularity=q.get("granularity"),
            filters=q.get("filters"), sort=q.get("sort", "-cost"), top=q.get("top"),
        )  # fmt: skip

    for complete in (True, False):
        if not complete:  # as before roll-ups existed: every query reads the finest totals
            client = sync_client(api.redis_url)
            client.delete(Keys.rollup_count("llm"))
            client.close()
        for q in queries:
            lean = await report(q)
            with monkeypatch.context() as m:
                m.setattr(grouping, "BIG_SOURCES", frozenset())
                full = await report(q)
            assert lean == full, q
            assert lean.rows, q
            if "sku" in q["group_by"]:
                assert any(r.quantity not in (None, "0") for r in lean.rows), q
