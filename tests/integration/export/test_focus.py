"""FOCUS 1.2 export: a hand-worked mapping, tier splits, windows, streaming, scope, and the
FinOps Foundation's own validator.

The domain tests export straight from a store the Ingestor filled (both Redis backends);
the HTTP tests go through `GET /v1/export/focus`. `test_export_passes_the_focus_validator`
installs `focus-validator` (which needs Python 3.12) into a cached virtual environment and
runs it offline on an export; it is skipped only when no Python 3.12 can be found.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import fcntl
import glob
import io
import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from trainledger.auth.model import Principal
from trainledger.cli.demo import EXAMPLE_CARD
from trainledger.events.decoding import JSON, decode_events
from trainledger.export.focus import (
    APPLICABILITY_CRITERIA,
    FOCUS_COLUMNS,
    FOCUS_VERSION,
    HEADER,
    billing_period,
    charge_period,
    focus_unit,
    format_exact_cost,
)
from trainledger.export.pricing import ExportError, segments
from trainledger.export.stream import prepare_export
from trainledger.ingest.report import IngestReport
from trainledger.ingest.service import Ingestor
from trainledger.ratecards.catalog import RateCards
from trainledger.ratecards.model import PricedSku, RateCardIn
from trainledger.stores import Stores

from costcore.money import parse_price
from tests.api.test_ingest import post, put_card
from tests.conftest import TEST_CARD, Api, event

ADMIN = Principal("test", "admin", None)
# Events in the hand-built scenario are dated 2025: accept them as if within the window.
LONG_WINDOW_DAYS = 36_500


async def ingest(
    store: Stores,
    events: Sequence[dict[str, object]],
    card: dict[str, object] | None = TEST_CARD,
    card_name: str = "default",
) -> IngestReport:
    cards = RateCards(store)
    if card is not None:
        await cards.put(card_name, msgspec.convert(card, RateCardIn))
    ingestor = Ingestor(store, cards, dedup_window_days=LONG_WINDOW_DAYS)
    items, _ = decode_events(msgspec.json.encode(list(events)), JSON)
    report = await ingestor.ingest(items, ADMIN)
    assert not report.rejected, report.rejected
    return report


async def export_text(
    store: Stores,
    project: str = "llm",
    start: datetime | None = None,
    end: datetime | None = None,
) -> str:
    export = await prepare_export(store, RateCards(store), project)
    return b"".join([chunk async for chunk in export.csv_chunks(start, end)]).decode()


def parse(text: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text))
    assert tuple(reader.fieldnames or ()) == HEADER
    return list(reader)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- the hand-built scenario ----------------------------------------------------------------

# TEST_CARD prices: GPU 2.50/hour, reserved GPU 1.80/hour (fixed), network 0.02/GB, and hot
# storage graduated per calendar month: 0.002 up to 100 GB-day, 0.0015 up to 1000, then 0.001.
SCENARIO: list[dict[str, object]] = [
    # February: 99.999999 GB-day fill tier 1 but for one micro-unit.
    event("f1", "99.999999", "storage.hot.gb_day", time="2025-02-01T08:00:00Z"),
    # 0.000002 GB-day: one micro-unit in tier 1 (0.000000002) and one in tier 2
    # (0.0000000015). The ledger rounds the exact sum 0.0000000035 once, half to even: 4 nano.
    event("f2", "0.000002", "storage.hot.gb_day", time="2025-02-02T09:30:00Z"),
    event(
        "m1",
        "64",
        time="2025-03-10T10:15:00Z",
        stage="pretrain",
        experiment="mix-a",
        owner="alice",
        tags={"team": "core", "run": "r-17"},
    ),
    # March starts a new month of storage: 80 GB-day in tier 1.
    event("m2", "80", "storage.hot.gb_day", time="2025-03-10T11:00:00Z"),
    # 1000.5 GB-day from 80: 20 in tier 1, 900 in tier 2, 80.5 in tier 3.
    event("m3", "1000.5", "storage.hot.gb_day", time="2025-03-11T00:30:00Z"),
    event("m4", "0.000001", "gpu.h100.reserved.hour", time="2025-03-12T00:30:00Z"),
    # The last microsecond of March: its charge hour ends exactly at April's start.
    event("m5", "12.345678", "network.cross_region.gb", time="2025-03-31T23:59:59.999999Z"),
    # April: a new month for the tiers; a zero quantity is a row of zero cost in tier 1.
    event("a1", "0", "storage.hot.gb_day", time="2025-04-01T00:00:00Z"),
]

# (x_EventId, SkuPriceId, PricingQuantity, ListUnitPrice, ListCost, BilledCost,
#  ChargePeriodStart, ChargePeriodEnd, BillingPeriodStart, BillingPeriodEnd), worked by hand.
EXPECTED = [
    ("f1", "default/storage.hot.gb_day/tier-1", "99.999999", "0.002", "0.199999998", "0.199999998",
     "2025-02-01T08:00:00Z", "2025-02-01T09:00:00Z",
     "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z"),
    ("f2", "default/storage.hot.gb_day/tier-1", "0.000001", "0.002", "0.000000002", "0.000000002",
     "2025-02-02T09:00:00Z", "2025-02-02T10:00:00Z",
     "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z"),
    ("f2", "default/storage.hot.gb_day/tier-2", "0.000001", "0.0015", "0.0000000015", "0.000000002",
     "2025-02-02T09:00:00Z", "2025-02-02T10:00:00Z",
     "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z"),
    ("m1", "default/gpu.h100.hour", "64", "2.50", "160.00", "160.00",
     "2025-03-10T10:00:00Z", "2025-03-10T11:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("m2", "default/storage.hot.gb_day/tier-1", "80", "0.002", "0.16", "0.16",
     "2025-03-10T11:00:00Z", "2025-03-10T12:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("m3", "default/storage.hot.gb_day/tier-1", "20", "0.002", "0.04", "0.04",
     "2025-03-11T00:00:00Z", "2025-03-11T01:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("m3", "default/storage.hot.gb_day/tier-2", "900", "0.0015", "1.35", "1.35",
     "2025-03-11T00:00:00Z", "2025-03-11T01:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("m3", "default/storage.hot.gb_day/tier-3", "80.5", "0.001", "0.0805", "0.0805",
     "2025-03-11T00:00:00Z", "2025-03-11T01:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("m4", "default/gpu.h100.reserved.hour", "0.000001", "1.80", "0.0000018", "0.0000018",
     "2025-03-12T00:00:00Z", "2025-03-12T01:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("m5", "default/network.cross_region.gb", "12.345678", "0.02", "0.24691356", "0.24691356",
     "2025-03-31T23:00:00Z", "2025-04-01T00:00:00Z",
     "2025-03-01T00:00:00Z", "2025-04-01T00:00:00Z"),
    ("a1", "default/storage.hot.gb_day/tier-1", "0", "0.002", "0.00", "0.00",
     "2025-04-01T00:00:00Z", "2025-04-01T01:00:00Z",
     "2025-04-01T00:00:00Z", "2025-05-01T00:00:00Z"),
]  # fmt: skip
EXPECTED_KEYS = (
    "x_EventId",
    "SkuPriceId",
    "PricingQuantity",
    "ListUnitPrice",
    "ListCost",
    "BilledCost",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BillingPeriodStart",
    "BillingPeriodEnd",
)

# The whole row of event m1, column by column: the mapping written out once.
M1_ROW = {
    "BilledCost": "160.00",
    "BillingAccountId": "llm",
    "BillingAccountName": "llm",
    "BillingCurrency": "USD",
    "BillingPeriodEnd": "2025-04-01T00:00:00Z",
    "BillingPeriodStart": "2025-03-01T00:00:00Z",
    "ChargeCategory": "Usage",
    "ChargeClass": "",
    "ChargeDescription": "64 hour of gpu.h100.hour at 2.50 USD per hour",
    "ChargeFrequency": "Usage-Based",
    "ChargePeriodEnd": "2025-03-10T11:00:00Z",
    "ChargePeriodStart": "2025-03-10T10:00:00Z",
    "CommitmentDiscountStatus": "",
    "ConsumedQuantity": "64",
    "ConsumedUnit": "Hours",
    "ContractedCost": "160.00",
    "ContractedUnitPrice": "2.50",
    "EffectiveCost": "160.00",
    "InvoiceId": "",
    "InvoiceIssuerName": "trainledger",
    "ListCost": "160.00",
    "ListUnitPrice": "2.50",
    "PricingCategory": "Standard",
    "PricingCurrency": "USD",
    "PricingCurrencyContractedUnitPrice": "2.50",
    "PricingCurrencyEffectiveCost": "160.00",
    "PricingCurrencyListUnitPrice": "2.50",
    "PricingQuantity": "64",
    "PricingUnit": "Hours",
    "ProviderName": "trainledger",
    "PublisherName": "trainledger",
    "ServiceCategory": "Compute",
    "ServiceName": "trainledger compute",
    "ServiceSubcategory": "Other (Compute)",
    "SkuId": "gpu.h100.hour",
    "SkuMeter": "hour",
    "SkuPriceDetails": "",
    "SkuPriceId": "default/gpu.h100.hour",
    "Tags": '{"run":"r-17","team":"core"}',
    "x_Project": "llm",
    "x_Stage": "pretrain",
    "x_Experiment": "mix-a",
    "x_Owner": "alice",
    "x_EventId": "m1",
    "x_EventTime": "2025-03-10T10:15:00.000000Z",
    "x_CostCategory": "compute",
    "x_Fixed": "false",
    "x_RateCard": "default",
    "x_RateCardVersion": "1",
    "x_Tags": '{"run":"r-17","team":"core"}',
}


def keyed(rows: list[dict[str, str]]) -> list[tuple[str, ...]]:
    return [tuple(r[k] for k in EXPECTED_KEYS) for r in rows]


async def test_hand_worked_scenario(store: Stores) -> None:
    report = await ingest(store, SCENARIO)
    rows = parse(await export_text(store))
    assert keyed(rows) == EXPECTED
    assert rows[3] == M1_ROW

    # Every FOCUS column comes first, then the x_ columns.
    assert HEADER[: len(FOCUS_COLUMNS)] == FOCUS_COLUMNS
    assert all(c.startswith("x_") for c in HEADER[len(FOCUS_COLUMNS) :])

    # A tier-split event's rows add up to exactly the ledger's cost of the event, and the
    # whole export to exactly what ingestion accepted.
    by_event: dict[str, Decimal] = {}
    for r in rows:
        by_event[r["x_EventId"]] = by_event.get(r["x_EventId"], Decimal(0)) + Decimal(
            r["BilledCost"]
        )
    assert by_event["f2"] == Decimal("0.000000004")
    assert by_event["m3"] == Decimal("1.4705")
    assert sum(by_event.values()) == Decimal(report.cost_by_project["llm"])

    # List and contracted costs are the exact products of unit price and quantity.
    for r in rows:
        product = Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"])
        assert Decimal(r["ListCost"]) == product == Decimal(r["ContractedCost"])
        assert r["EffectiveCost"] == r["BilledCost"] == r["PricingCurrencyEffectiveCost"]

    m3 = [r for r in rows if r["x_EventId"] == "m3"]
    assert [json.loads(r["SkuPriceDetails"]) for r in m3] == [
        {"x_Tier": "1", "x_TierFrom": "0", "x_TierUpTo": "100"},
        {"x_Tier": "2", "x_TierFrom": "100", "x_TierUpTo": "1000"},
        {"x_Tier": "3", "x_TierFrom": "1000"},
    ]
    assert m3[2]["ChargeDescription"] == (
        "80.5 GB-day of storage.hot.gb_day at 0.001 USD per GB-day "
        "(tier 3: from 1000 GB-day a month)"
    )
    assert {r["PricingUnit"] for r in m3} == {"GB-Days"}
    m4 = rows[8]
    assert (m4["ChargeFrequency"], m4["x_Fixed"], m4["ServiceCategory"]) == (
        "Recurring",
        "true",
        "Compute",
    )
    m5 = rows[9]
    assert (m5["ServiceCategory"], m5["ServiceSubcategory"], m5["PricingUnit"]) == (
        "Networking",
        "Other (Networking)",
        "GB",
    )
    assert m5["x_EventTime"] == "2025-03-31T23:59:59.999999Z"
    # Events without tags, experiment or owner leave those cells empty: FOCUS null.
    assert (m5["Tags"], m5["x_Tags"], m5["x_Experiment"], m5["x_Owner"]) == ("", "", "", "")


async def test_window_selects_by_event_time_and_keeps_tier_prices(store: Stores) -> None:
    await ingest(store, SCENARIO)
    # [from, to): the event exactly at `from` is in, the one exactly at `to` is out.
    rows = parse(
        await export_text(
            store, start=at("2025-03-10T11:00:00Z"), end=at("2025-03-31T23:59:59.999999Z")
        )
    )
    assert [r["x_EventId"] for r in rows] == ["m2", "m3", "m3", "m3", "m4"]
    # m2 is outside this window but still counts toward March's tiers: m3 splits as before.
    rows = parse(await export_text(store, start=at("2025-03-11T00:00:00Z")))
    assert keyed(rows) == EXPECTED[5:]
    rows = parse(await export_text(store, end=at("2025-02-02T09:30:00Z")))
    assert keyed(rows) == EXPECTED[:1]
    # A window with no events: the header alone.
    assert parse(await export_text(store, start=at("2030-01-01T00:00:00Z"))) == []


async def test_each_event_is_priced_by_its_own_rate_card_version(store: Stores) -> None:
    await ingest(store, [event("v-a", "1", time="2025-03-01T00:00:00Z")])
    june = {**TEST_CARD, "effective_from": "2025-06-01T00:00:00Z"}
    june["skus"] = [
        {"code": "gpu.h100.hour", "category": "compute", "unit": "hour", "unit_price": "3.00"}
    ]
    # Version 2 from June; an event of July takes it, a late event of May still takes v1.
    await ingest(
        store,
        [
            event("v-b", "1", time="2025-07-01T00:00:00Z"),
            event("v-c", "2", time="2025-05-01T00:00:00Z"),
        ],
        june,
    )
    rows = parse(await export_text(store))
    assert [
        (r["x_EventId"], r["x_RateCardVersion"], r["ListUnitPrice"], r["BilledCost"]) for r in rows
    ] == [("v-a", "1", "2.50", "2.50"), ("v-b", "2", "3.00", "3.00"), ("v-c", "1", "2.50", "5.00")]


async def test_empty_project_and_missing_rate_card(store: Stores) -> None:
    assert parse(await export_text(store, project="nothing-here")) == []
    await ingest(store, SCENARIO[:1])
    await store.projects.set_project_fields("llm", {"rate_card": "gone"})
    with pytest.raises(ExportError, match="gone"):
        await prepare_export(store, RateCards(store), "llm")


async def test_large_export_streams_page_by_page(store: Stores) -> None:
    cards = RateCards(store)
    await cards.put("default", msgspec.convert(TEST_CARD, RateCardIn))
    ingestor = Ingestor(store, cards)
    start = datetime.now(UTC) - timedelta(days=2)
    batches, per_batch = 250, 4  # 250 log entries: two pages of the log (200 a page)
    total_cost = Decimal(0)
    skus = ["gpu.h100.hour", "storage.hot.gb_day", "network.cross_region.gb"]
    for b in range(batches):
        events = [
            event(
                f"ev-{b}-{i}",
                f"{(b * per_batch + i) % 97 + 1}.25",
                skus[(b + i) % len(skus)],
                time=(start + timedelta(seconds=60 * b + i)).isoformat(),
                experiment=f"exp-{b % 7}",
            )
            for i in range(per_batch)
        ]
        items, _ = decode_events(msgspec.json.encode(events), JSON)
        report = await ingestor.ingest(items, ADMIN)
        assert report.accepted == per_batch
        total_cost += Decimal(report.cost_by_project["llm"])

    pages_read = 0
    real_log_entries = store.ledger.log_entries

    async def counting_log_entries(project: str, after: str = "-", count: int = 500) -> Any:
        nonlocal pages_read
        pages_read += 1
        return await real_log_entries(project, after, count)

    store.ledger.log_entries = counting_log_entries  # type: ignore[method-assign]
    export = await prepare_export(store, cards, "llm")
    chunk_bytes = 8192
    chunks: list[bytes] = []
    pages_at_chunk: list[int] = []
    async for chunk in export.csv_chunks(chunk_bytes=chunk_bytes):
        chunks.append(chunk)
        pages_at_chunk.append(pages_read)

    # Many chunks, each about the chunk size (it is flushed at the first row past it), and the
    # first ones were sent before the second page of the log was even read.
    assert len(chunks) > 20
    longest_row = max(len(line) for line in b"".join(chunks).split(b"\r\n")) + 2
    assert all(len(c) < chunk_bytes + longest_row for c in chunks)
    assert pages_at_chunk[0] == 1
    assert pages_at_chunk[-1] == 2
    rows = parse(b"".join(chunks).decode())
    assert len({r["x_EventId"] for r in rows}) == batches * per_batch
    assert sum(Decimal(r["BilledCost"]) for r in rows) == total_cost


# --- pure mapping ---------------------------------------------------------------------------


def test_segments_split_and_share_exactly() -> None:
    tiered = PricedSku(
        "s", "storage", "GB", False, 0, ((100_000_000, 2_000_000), (None, 1_000_000)), None
    )
    # 150 from 0: 100 at 0.002 and 50 at 0.001 = 0.25 (exact, so the shares are exact).
    parts = segments(tiered, 150_000_000, 250_000_000, 0)
    assert [(p.tier, p.quantity_micro, p.unit_price_nano, p.billed_nano) for p in parts] == [
        (0, 100_000_000, 2_000_000, 200_000_000),
        (1, 50_000_000, 1_000_000, 50_000_000),
    ]
    # Wholly inside the last tier; and a zero quantity sits in the tier the counter is in.
    assert [(p.tier, p.billed_nano) for p in segments(tiered, 5, 0, 200_000_000)] == [(1, 0)]
    assert [p.tier for p in segments(tiered, 0, 0, 100_000_000)] == [1]
    assert [p.tier for p in segments(tiered, 0, 0, 99_999_999)] == [0]
    # Three parts sharing 7 nano in proportion 1:1:1, rounded cumulatively: 2, 3, 2.
    three = PricedSku(
        "t", "storage", "GB", False, 0, ((1, 1_000_000), (2, 1_000_000), (None, 1_000_000)), None
    )
    assert [p.billed_nano for p in segments(three, 3, 7, 0)] == [2, 3, 2]
    flat = PricedSku("f", "compute", "hour", False, 2_500_000_000, (), None)
    assert segments(flat, 3, 8, 123) == [segments(flat, 3, 8, 0)[0]]
    assert segments(flat, 3, 8, 0)[0].tier is None


def test_units_periods_and_amounts() -> None:
    assert [focus_unit(u) for u in ("hour", "GB-day", "gb_day", "gpu_hour", "GB/hour")] == [
        "Hours",
        "GB-Days",
        "gb-Days",
        "gpu-Hours",
        "GB/Hour",
    ]
    assert [focus_unit(u) for u in ("GB", "mtok", "GB-Days", "5 hours", "token")] == [
        "GB",
        "mtok",
        "GB-Days",
        "5 Hours",
        "token",
    ]
    dec31 = 1_767_225_599_999_999  # 2025-12-31T23:59:59.999999Z
    assert billing_period(dec31) == ("2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z")
    assert charge_period(dec31) == ("2025-12-31T23:00:00Z", "2026-01-01T00:00:00Z")
    assert format_exact_cost(1) == "0.000000000000001"
    assert format_exact_cost(2_500 * 10**12) == "2.50"
    assert format_exact_cost(0) == "0.00"


# --- HTTP: GET /v1/export/focus ---------------------------------------------------------------


def _z(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_http_export_streams_csv(api: Api) -> None:
    await put_card(api)
    now = datetime.now(UTC).replace(microsecond=0)
    t1, t2 = now - timedelta(hours=3), now - timedelta(hours=1)
    report = await post(
        api,
        [
            event("h1", "2", time=t1.isoformat()),
            event("h2", "150", "storage.hot.gb_day", time=t2.isoformat(), stage="eval"),
        ],
    )
    assert report["accepted"] == 2
    async with (
        api.client() as c,
        c.stream("GET", "/v1/export/focus", params={"project": "llm"}) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/csv; charset=utf-8"
        disposition = r.headers["content-disposition"]
        assert disposition.startswith('attachment; filename="focus-llm-')
        assert disposition.endswith('.csv"')
        assert "content-length" not in r.headers  # streamed, not buffered
        body = b"".join([chunk async for chunk in r.aiter_bytes()])
    rows = parse(body.decode())
    # 2 GPU hours at 2.50; 150 GB-day from 0: 100 at 0.002 and 50 at 0.0015.
    assert [(r["x_EventId"], r["SkuPriceId"], r["BilledCost"]) for r in rows] == [
        ("h1", "default/gpu.h100.hour", "5.00"),
        ("h2", "default/storage.hot.gb_day/tier-1", "0.20"),
        ("h2", "default/storage.hot.gb_day/tier-2", "0.075"),
    ]
    assert rows[1]["x_Stage"] == "eval"

    async with api.client() as c:
        r = await c.get(
            "/v1/export/focus",
            params={"project": "llm", "from": _z(t1 + timedelta(minutes=1)), "to": _z(now)},
        )
        assert r.status_code == 200, r.text
        assert [row["x_EventId"] for row in parse(r.text)] == ["h2", "h2"]
        r = await c.get("/v1/export/focus", params={"project": "llm", "from": _z(t2), "to": _z(t1)})
        assert r.status_code == 400
        assert r.json()["errors"][0]["field"] == "to"
        r = await c.get("/v1/export/focus", params={"project": "llm", "from": "yesterday"})
        assert r.status_code == 400


async def test_http_export_is_scoped_to_the_token(api: Api) -> None:
    await put_card(api)
    assert (await post(api, [event("s1")]))["accepted"] == 1
    outsider = await api.token("read", ["other"])
    reader = await api.token("read", ["llm"])
    ingester = await api.token("ingest", ["llm"])
    async with api.client(outsider) as c:
        r = await c.get("/v1/export/focus", params={"project": "llm"})
        assert r.status_code == 403
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["field"] == "project"
    async with api.client(ingester) as c:
        assert (await c.get("/v1/export/focus", params={"project": "llm"})).status_code == 403
    async with api.client(reader) as c:
        r = await c.get("/v1/export/focus", params={"project": "llm"})
        assert r.status_code == 200
        assert [row["x_EventId"] for row in parse(r.text)] == ["s1"]
        assert (await c.get("/v1/export/focus")).status_code == 400  # project is required


# --- the FinOps Foundation's validator ---------------------------------------------------------

# focus-validator 2.2.1 is the first release whose bundled rules cover FOCUS 1.2 with the
# fixes this export relies on. It pins numpy<2 but not pyarrow, whose 26.x needs NumPy 2:
# hence the pyarrow cap.
VALIDATOR_REQUIREMENTS = ("focus-validator>=2.2.1,<3", "pyarrow<26")


def _python312() -> str | None:
    """A working Python 3.12: on PATH, or any pyenv 3.12.x (a pyenv shim on PATH may exist
    without a 3.12 selected, so every candidate is run once)."""
    candidates = [shutil.which("python3.12")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(str(pyenv / "versions" / "3.12*" / "bin" / "python3.12")))
    for candidate in candidates:
        if candidate is None:
            continue
        check = "import sys; sys.exit(sys.version_info[:2] != (3, 12))"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            probe = subprocess.run([candidate, "-c", check], capture_output=True, timeout=30)
            if probe.returncode == 0:
                return candidate
    return None


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trainledger"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One test session at a time builds the shared environment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def focus_validator() -> Path:
    """The `python` of a Python 3.12 environment with focus-validator, made once and cached
    under ~/.cache/trainledger (or $XDG_CACHE_HOME/trainledger)."""
    python312 = _python312()
    if python312 is None:
        pytest.skip("focus-validator 2.x needs Python 3.12: none on PATH or in ~/.pyenv/versions")
    venv = _cache_dir() / "focus-validator-venv"
    python = venv / "bin" / "python"
    stamp = venv / ".trainledger-requirements"
    wanted = "\n".join((python312, *VALIDATOR_REQUIREMENTS))
    with _locked(_cache_dir() / "focus-validator-venv.lock"):
        if not (stamp.exists() and stamp.read_text() == wanted and python.exists()):
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python312, "-m", "venv", str(venv)], check=True, timeout=300)
            install = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *VALIDATOR_REQUIREMENTS],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert install.returncode == 0, f"installing focus-validator failed:\n{install.stderr}"
            stamp.write_text(wanted)
    return python


def _or_alternatives(model: dict[str, Any]) -> dict[str, set[str]]:
    """rule id -> the OR composites that list it as one alternative."""
    parents: dict[str, set[str]] = {}

    def walk(rule_id: str, requirement: dict[str, Any]) -> None:
        if requirement.get("CheckFunction") == "OR":
            for item in requirement.get("Items", []):
                if item.get("CheckFunction") == "CheckModelRule":
                    parents.setdefault(item["ModelRuleId"], set()).add(rule_id)
        for item in requirement.get("Items", []):
            walk(rule_id, item)

    for rule_id, rule in model["ModelRules"].items():
        walk(rule_id, rule["ValidationCriteria"].get("Requirement") or {})
    return parents


def run_validator(python: Path, data: Path, report: Path) -> tuple[set[str], set[str], Path]:
    """Run focus-validator offline; returns (failed or errored rule ids, passed, model file)."""
    site = Path(
        subprocess.run(
            [str(python), "-c", "import focus_validator, pathlib; "
             "print(pathlib.Path(focus_validator.__file__).parent.parent)"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    # Offline: --block-download makes it use the rules bundled in the package (it would
    # otherwise look them up on GitHub), and any other attempt to reach the network meets a
    # dead proxy. It reads its bundled currency list by a path relative to the working
    # directory ("focus_validator/rules/currency_codes.csv"), so it runs from site-packages.
    dead_proxy = "http://127.0.0.1:9"
    env = {**os.environ, "HTTP_PROXY": dead_proxy, "HTTPS_PROXY": dead_proxy, "NO_PROXY": ""}
    env.update(http_proxy=dead_proxy, https_proxy=dead_proxy, no_proxy="")
    proc = subprocess.run(
        [
            str(python.parent / "focus-validator"),
            "--data-file", str(data),
            "--validate-version", FOCUS_VERSION,
            "--block-download",
            "--applicability-criteria", ",".join(APPLICABILITY_CRITERIA),
            "--output-type", "unittest",
            "--output-destination", str(report),
        ],
        cwd=site, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0 and report.exists(), proc.stderr[-5000:]
    failed: set[str] = set()
    passed: set[str] = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        rule_id = case.attrib["name"].split(" :: ")[0]
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(rule_id)
        elif case.find("skipped") is None:
            passed.add(rule_id)
    models = sorted((site / "focus_validator" / "rules").glob(f"model-{FOCUS_VERSION}*.json"))
    assert models, "focus-validator ships no FOCUS 1.2 rules"
    return failed, passed, models[-1]


# The example rate card's SKUs, each used once, with the graduated egress price crossing two
# of its boundaries (100 GB, then 10,000 GB a month).
def _example_events() -> list[dict[str, object]]:
    card = json.loads(EXAMPLE_CARD.read_text())
    quantities = {"network.egress.gb": ["150", "12000"]}
    out: list[dict[str, object]] = []
    for k, sku in enumerate(card["skus"]):
        for j, quantity in enumerate(quantities.get(sku["code"], ["3.5"])):
            out.append(
                event(
                    f"x{k}-{j}",
                    quantity,
                    sku["code"],
                    project="ex",
                    time=f"2026-03-{k + 1:02d}T{j:02d}:34:56.789Z",
                    stage="pretrain",
                    experiment="e-1",
                    owner="bob",
                    tags={"cluster": "a", "note": 'quote " and, comma'},
                )
            )
    return out


@pytest.mark.slow
async def test_export_passes_the_focus_validator(
    store: Stores, focus_validator: Path, tmp_path: Path
) -> None:
    await ingest(store, SCENARIO)
    await store.projects.set_project_fields("ex", {"rate_card": "example"})
    example = json.loads(EXAMPLE_CARD.read_text())
    await ingest(store, _example_events(), example, "example")
    # Both projects in one file (one header): two billing accounts, two rate cards.
    llm = await export_text(store, "llm")
    ex = await export_text(store, "ex")
    data = tmp_path / "focus.csv"
    data.write_text(llm + ex.split("\r\n", 1)[1])
    assert len(parse(data.read_text())) == len(EXPECTED) + len(example["skus"]) + 3

    await assert_valid_focus(focus_validator, data, tmp_path / "report.xml")


async def assert_valid_focus(focus_validator: Path, data: Path, report: Path) -> None:
    """`data` passes the official validator: no real failure, and the checks that matter ran."""
    failed, passed, model_file = await asyncio.to_thread(
        run_validator, focus_validator, data, report
    )
    model = json.loads(model_file.read_text())
    # The validator also lists, as failed, the alternative not taken by an either/or rule
    # whose other alternative held: InvoiceId "MUST be null when ... / MUST NOT be null
    # when ..." always has one such. A failure counts only if no OR rule it belongs to passed.
    alternatives = _or_alternatives(model)
    real = {rule for rule in failed if not alternatives.get(rule, set()) & passed}
    assert not real, f"focus-validator failures: {sorted(real)}"
    # And the checks that matter were run, not skipped: every column the claimed criteria
    # make mandatory is present, and the values hold.
    claimed = set(APPLICABILITY_CRITERIA)
    presence = {
        rule_id
        for rule_id, rule in model["ModelRules"].items()
        if rule["Function"] == "Presence"
        and rule["ValidationCriteria"]["Keyword"] == "MUST"
        and set(rule["ApplicabilityCriteria"]) <= claimed
    }
    assert len(presence) > 25
    assert presence <= passed, sorted(presence - passed)
    assert passed >= VALUE_RULES, sorted(VALUE_RULES - passed)


# Value checks the validator runs on every row (they must pass, not be skipped).
VALUE_RULES = {
    "BillingCurrency-C-006-M",  # national currency
    "ChargeCategory-C-003-M",  # allowed values
    "ChargeFrequency-C-003-M",
    "ChargePeriodStart-C-002-M",  # date/time format
    "ConsumedUnit-C-003-O",  # UnitFormat
    "ListCost-C-009-C",  # ListCost = ListUnitPrice x PricingQuantity
    "ListUnitPrice-C-010-C",
    "PricingUnit-C-003-O",
    "ServiceCategory-C-003-M",
    "ServiceSubcategory-C-004-M",  # the subcategory belongs to its category
    "SkuPriceDetails-C-001-M",  # key-value JSON
    "Tags-C-001-M",
}


def test_largest_list_cost_is_written_exactly() -> None:
    # The product of the largest quantity and price ingestion accepts is still written
    # exactly (no float, no exponent).
    big = (2**63 - 1) * parse_price("9223372036.854775807")
    text = format_exact_cost(big)
    assert "e" not in text.lower()
    assert Decimal(text) == Decimal(f"{big}E-15")


# --- CSV injection -------------------------------------------------------------------------

FORMULAS = ("=1+2", "+1", "-1", "@SUM", "=A1+A2", "-2+3")


async def test_formula_leading_text_cells_are_neutralised(store: Stores) -> None:
    """Text a caller chose (experiment, owner, a rate card's unit) that a spreadsheet would run
    as a formula is written with a leading "'"; numeric columns and FOCUS's own values are
    not touched."""
    card = {
        **TEST_CARD,
        "skus": [
            {"code": "gpu.h100.hour", "category": "compute", "unit": "=1+2", "unit_price": "2.5"}
        ],
    }
    events = [
        event(f"x{i}", "2", time="2025-03-10T10:15:00Z", experiment=text, owner=text)
        for i, text in enumerate(FORMULAS)
    ]
    await ingest(store, events, card)
    rows = parse(await export_text(store))
    assert len(rows) == len(FORMULAS)
    by_id = {row["x_EventId"]: row for row in rows}
    for i, text in enumerate(FORMULAS):
        row = by_id[f"x{i}"]
        assert row["x_Experiment"] == "'" + text
        assert row["x_Owner"] == "'" + text
        assert row["SkuMeter"] == "'=1+2"
        # Numbers and the spec's values as before.
        assert row["BilledCost"] == "5.00"
        assert row["ConsumedQuantity"] == row["PricingQuantity"] == "2"
        assert row["ListUnitPrice"] == "2.50"
        assert row["ChargeCategory"] == "Usage"
        assert row["ChargeFrequency"] == "Usage-Based"
        assert row["ChargePeriodStart"] == "2025-03-10T10:00:00Z"
        assert row["x_RateCardVersion"] == "1"
    for cell in (cell for row in rows for cell in row.values()):
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        assert not cell.startswith("-") or cell[1:2].isdigit(), cell


def test_neutralise_covers_owasp_leading_characters() -> None:
    from trainledger.export.csvsafe import neutralise

    for text in ("=1+2", "+1", "-1", "@x", "\tx", "\rx", "\nx"):
        assert neutralise(text) == "'" + text
    for text in ("1+2", "a=b", "", None, '{"team": "=1"}', "Usage"):
        assert neutralise(text) == text
