"""The FOCUS export aggregated per charge period (`granularity=hour|day`, issue 26.3): a
hand-worked scenario, sums equal to the per-event export's exactly, the window, the
official validator, and the parameter over HTTP."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.cli.demo import EXAMPLE_CARD
from trainledger.export.aggregate import Granularity
from trainledger.export.stream import prepare_export
from trainledger.ratecards.catalog import RateCards
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event
from tests.integration.export.test_focus import (
    SCENARIO,
    _example_events,
    assert_valid_focus,
    at,
    focus_validator,
    ingest,
    parse,
)
from tests.integration.export.test_ranged_export import _batches, _windows

__all__ = ["focus_validator"]  # the fixture, imported for the validator test

DIMS = {"stage": "pretrain", "owner": "alice", "tags": {"team": "core"}}
# Two hours, two SKUs (three with the tiered storage), one event of another stage.
HOURS: list[dict[str, object]] = [
    event("a1", "2", time="2025-03-10T10:05:00Z", **DIMS),
    event("a2", "0.5", time="2025-03-10T10:59:59.999999Z", **DIMS),
    event("a3", "10", "network.cross_region.gb", time="2025-03-10T10:30:00Z"),
    event("a4", "1", time="2025-03-10T10:45:00Z", **dict(DIMS, stage="eval")),
    event("b1", "3", time="2025-03-10T11:00:00Z", **DIMS),
    event("b2", "5.5", "network.cross_region.gb", time="2025-03-10T11:10:00Z"),
    # 150 GB-day from 0: 100 at 0.002, 50 at 0.0015; then 20 more at 0.0015.
    event("b3", "150", "storage.hot.gb_day", time="2025-03-10T11:20:00Z"),
    event("b4", "20", "storage.hot.gb_day", time="2025-03-10T11:40:00Z"),
]

KEYS = (
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "SkuPriceId",
    "x_Stage",
    "ConsumedQuantity",
    "PricingQuantity",
    "ListCost",
    "BilledCost",
    "EffectiveCost",
)
# Worked by hand: a1 + a2 merge (2.5 GPU hours at 2.50), a4 is another stage; b3's tier-2
# part and b4 merge (70 GB-day at 0.0015).
HOURLY = [
    ("2025-03-10T10:00:00Z", "2025-03-10T11:00:00Z", "default/gpu.h100.hour", "pretrain",
     "2.5", "2.5", "6.25", "6.25", "6.25"),
    ("2025-03-10T10:00:00Z", "2025-03-10T11:00:00Z", "default/network.cross_region.gb", "other",
     "10", "10", "0.20", "0.20", "0.20"),
    ("2025-03-10T10:00:00Z", "2025-03-10T11:00:00Z", "default/gpu.h100.hour", "eval",
     "1", "1", "2.50", "2.50", "2.50"),
    ("2025-03-10T11:00:00Z", "2025-03-10T12:00:00Z", "default/gpu.h100.hour", "pretrain",
     "3", "3", "7.50", "7.50", "7.50"),
    ("2025-03-10T11:00:00Z", "2025-03-10T12:00:00Z", "default/network.cross_region.gb", "other",
     "5.5", "5.5", "0.11", "0.11", "0.11"),
    ("2025-03-10T11:00:00Z", "2025-03-10T12:00:00Z", "default/storage.hot.gb_day/tier-1",
     "other", "100", "100", "0.20", "0.20", "0.20"),
    ("2025-03-10T11:00:00Z", "2025-03-10T12:00:00Z", "default/storage.hot.gb_day/tier-2",
     "other", "70", "70", "0.105", "0.105", "0.105"),
]  # fmt: skip
SUMMED = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "ConsumedQuantity")


async def export_text(
    store: Stores,
    granularity: Granularity,
    project: str = "llm",
    start: datetime | None = None,
    end: datetime | None = None,
) -> str:
    export = await prepare_export(store, RateCards(store), project)
    chunks = export.csv_chunks(start, end, granularity=granularity)
    return b"".join([chunk async for chunk in chunks]).decode()


def totals(rows: Sequence[dict[str, str]]) -> dict[tuple[str, str], Decimal]:
    """(SkuPriceId, column) -> the exact sum of the column."""
    out: dict[tuple[str, str], Decimal] = {}
    for r in rows:
        for column in SUMMED:
            key = (r["SkuPriceId"], column)
            out[key] = out.get(key, Decimal(0)) + Decimal(r[column])
    return out


async def test_hourly_rows_are_the_hand_worked_sums(store: Stores) -> None:
    await ingest(store, HOURS)
    per_event = parse(await export_text(store, "event"))
    assert len(per_event) == 9  # b3 is two tier rows
    hourly = parse(await export_text(store, "hour"))
    assert [tuple(r[k] for k in KEYS) for r in hourly] == HOURLY
    assert totals(hourly) == totals(per_event)
    gpu = hourly[0]
    assert (gpu["x_EventId"], gpu["x_EventTime"]) == ("", "")
    assert (gpu["x_Owner"], json.loads(gpu["Tags"]), gpu["x_Tags"]) == (
        "alice",
        {"team": "core"},
        '{"team":"core"}',
    )
    assert gpu["ChargeDescription"] == "2.5 hour of gpu.h100.hour at 2.50 USD per hour"
    assert (gpu["BillingPeriodStart"], gpu["BillingPeriodEnd"]) == (
        "2025-03-01T00:00:00Z",
        "2025-04-01T00:00:00Z",
    )
    # Every cell but the sums and the event's own is its events' cell.
    a1 = next(r for r in per_event if r["x_EventId"] == "a1")
    varying = set(SUMMED) | {
        "PricingQuantity",
        "PricingCurrencyEffectiveCost",
        "ChargeDescription",
        "x_EventId",
        "x_EventTime",
    }
    assert {k: v for k, v in gpu.items() if k not in varying} == {
        k: v for k, v in a1.items() if k not in varying
    }

    daily = parse(await export_text(store, "day"))
    assert [(r["SkuPriceId"], r["x_Stage"], r["BilledCost"]) for r in daily] == [
        ("default/gpu.h100.hour", "pretrain", "13.75"),
        ("default/network.cross_region.gb", "other", "0.31"),
        ("default/gpu.h100.hour", "eval", "2.50"),
        ("default/storage.hot.gb_day/tier-1", "other", "0.20"),
        ("default/storage.hot.gb_day/tier-2", "other", "0.105"),
    ]
    assert {(r["ChargePeriodStart"], r["ChargePeriodEnd"]) for r in daily} == {
        ("2025-03-10T00:00:00Z", "2025-03-11T00:00:00Z")
    }
    assert totals(daily) == totals(per_event)


async def test_aggregates_keep_the_window_and_tier_prices(store: Stores) -> None:
    await ingest(store, SCENARIO + HOURS)
    per_event = parse(await export_text(store, "event"))
    for granularity in ("hour", "day"):
        rows = parse(await export_text(store, granularity))
        assert totals(rows) == totals(per_event), granularity
    # A window starting inside an hour: that hour's row holds the events from `from` on,
    # its charge period is still the whole hour.
    start, end = at("2025-03-10T10:30:00Z"), at("2025-03-10T11:30:00Z")
    windowed = parse(await export_text(store, "event", start=start, end=end))
    rows = parse(await export_text(store, "hour", start=start, end=end))
    assert totals(rows) == totals(windowed)
    # Tiers count in the log's order: SCENARIO's March storage (m2 80, m3 1000.5 GB-day) was
    # applied before b3, so its 150 GB-day are all in tier 3, as the per-event export has it.
    assert [(r["ChargePeriodStart"], r["SkuPriceId"], r["BilledCost"]) for r in rows] == [
        ("2025-03-10T10:00:00Z", "default/gpu.h100.hour", "1.25"),
        ("2025-03-10T10:00:00Z", "default/network.cross_region.gb", "0.20"),
        ("2025-03-10T10:00:00Z", "default/gpu.h100.hour", "2.50"),
        ("2025-03-10T11:00:00Z", "default/storage.hot.gb_day/tier-1", "0.16"),
        ("2025-03-10T11:00:00Z", "default/gpu.h100.hour", "7.50"),
        ("2025-03-10T11:00:00Z", "default/network.cross_region.gb", "0.11"),
        ("2025-03-10T11:00:00Z", "default/storage.hot.gb_day/tier-3", "0.15"),
    ]
    assert parse(await export_text(store, "day", start=at("2030-01-01T00:00:00Z"))) == []


@pytest.mark.slow
async def test_aggregated_export_passes_the_focus_validator(
    store: Stores, focus_validator: Path, tmp_path: Path
) -> None:
    await ingest(store, SCENARIO + HOURS)
    await store.projects.set_project_fields("ex", {"rate_card": "example"})
    example = json.loads(EXAMPLE_CARD.read_text())
    await ingest(store, _example_events(), example, "example")
    files = [
        await export_text(store, "hour", "llm"),
        await export_text(store, "day", "ex"),
        await export_text(store, "day", "llm"),
    ]
    data = tmp_path / "focus-aggregated.csv"
    data.write_text(files[0] + "".join(text.split("\r\n", 1)[1] for text in files[1:]))
    await assert_valid_focus(focus_validator, data, tmp_path / "report.xml")


def _moved(text: str, hour: datetime) -> str:
    """`text` with 2025-03-10T10, T11 and T12 moved to `hour` and the two hours after it."""
    for k in range(3):
        new = (hour + timedelta(hours=k)).strftime("%Y-%m-%dT%H")
        text = text.replace(f"2025-03-10T{10 + k}", new)
    return text


async def test_http_granularity(api: Api) -> None:
    # The service accepts only recent events: the scenario three hours ago.
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    await put_card(api)
    report = await post(api, [dict(e, time=_moved(str(e["time"]), hour)) for e in HOURS])
    assert report["accepted"] == len(HOURS)
    hourly = [tuple(_moved(cell, hour) for cell in row) for row in HOURLY]
    async with api.client() as c:
        r = await c.get("/v1/export/focus", params={"project": "llm", "granularity": "hour"})
        assert r.status_code == 200, r.text
        assert [tuple(row[k] for k in KEYS) for row in parse(r.text)] == hourly
        r = await c.get("/v1/export/focus", params={"project": "llm", "granularity": "event"})
        assert r.status_code == 200, r.text
        assert len(parse(r.text)) == 9
        for bad in ("week", "HOUR", ""):
            r = await c.get("/v1/export/focus", params={"project": "llm", "granularity": bad})
            assert r.status_code == 400, (bad, r.text)
            assert r.headers["content-type"].startswith("application/problem+json"), r.text
            assert [e["field"] for e in r.json()["errors"]] == ["granularity"], r.text


# --- against the per-event export, randomized ------------------------------------------------

# The cells a merge sums or drops; every other cell of a group is its events' own.
MERGED = set(SUMMED) | {
    "PricingQuantity",
    "PricingCurrencyEffectiveCost",
    "ChargeDescription",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "x_EventId",
    "x_EventTime",
}
SUMS = ("BilledCost", "ListCost", "ConsumedQuantity")


def _period(event_time: str, granularity: str) -> str:
    return event_time[:13] + ":00:00Z" if granularity == "hour" else event_time[:10] + "T00:00:00Z"


Key = tuple[object, ...]
Sums = tuple[Decimal, ...]


def _kept(r: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in r.items() if k not in MERGED)


def _merged_by_hand(rows: list[dict[str, str]], granularity: str) -> dict[Key, Sums]:
    """The per-event rows grouped as the aggregated export should group them."""
    out: dict[Key, list[Decimal]] = {}
    for r in rows:
        key = (_period(r["x_EventTime"], granularity), *_kept(r))
        sums = out.setdefault(key, [Decimal(0)] * len(SUMS))
        for i, column in enumerate(SUMS):
            sums[i] += Decimal(r[column])
    return {k: tuple(v) for k, v in out.items()}


def _as_exported(rows: list[dict[str, str]]) -> dict[Key, Sums]:
    out: dict[Key, Sums] = {}
    for r in rows:
        key = (r["ChargePeriodStart"], *_kept(r))
        assert key not in out, f"two rows of one group: {key}"  # merged fully
        assert (r["x_EventId"], r["x_EventTime"]) == ("", "")
        assert r["PricingQuantity"] == r["ConsumedQuantity"]
        assert r["EffectiveCost"] == r["BilledCost"] == r["PricingCurrencyEffectiveCost"]
        assert Decimal(r["ListCost"]) == Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"])
        out[key] = tuple(Decimal(r[column]) for column in SUMS)
    return out


async def _check_windows(store: Stores, windows: Sequence[tuple[datetime | None, ...]]) -> None:
    for start, end in windows:
        per_event = parse(await export_text(store, "event", start=start, end=end))
        for granularity in ("hour", "day"):
            rows = parse(await export_text(store, granularity, start=start, end=end))
            starts = [r["ChargePeriodStart"] for r in rows]
            assert starts == sorted(starts), "periods in time order"
            assert _as_exported(rows) == _merged_by_hand(per_event, granularity), (
                granularity,
                start,
                end,
            )


async def test_aggregates_equal_the_per_event_rows_merged(store: Stores) -> None:
    rng = random.Random(263)
    for batch in _batches(rng, 20):
        await ingest(store, batch)
    windows = _windows(rng)
    await _check_windows(store, windows)
    # A log from before the index: every period of the range is read (the whole log each).
    await store.ledger.client.hdel(Keys.meta("llm"), "logix")
    await _check_windows(store, windows[3:5])
