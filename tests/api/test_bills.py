"""Bills (issue 29, first part) over real HTTP: FOCUS 1.0 and 1.2 imports (CSV and gzip CSV),
duplicates, corrections, malformed files, the mapping and the drift report pinned by hand.

The fixtures (tests/data/focus/) bill project `llm` (tag project=llm) for 2026-11-01..06 and
project `other` for 11-05 (unattributed: `other` has no mapping). The ledger holds:
11-01 10 GPU h ($25), 11-02 10 h ($25), 11-03 4 h ($10), 11-04 2 h ($5) and 100 GB of
cross-region transfer ($2), 11-06 1 h ($2.50) (TEST_CARD: $2.50 an hour, $0.02 a GB).
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import TEST_CARD, Api, event, sync_client

DATA = Path(__file__).resolve().parents[1] / "data" / "focus"
FOCUS_12 = (DATA / "focus-1.2.csv").read_bytes()
FOCUS_10 = (DATA / "focus-1.0.csv").read_bytes()
MAPPING = {
    "match": [{"tag_key": "project", "tag_value": "llm"}],
    "skus": [
        {"sku": "gpu.h100.hour", "sku_id": "H100"},
        {"sku": "network.cross_region.gb", "service_name": "Network", "consumed_unit": "GB"},
    ],
}
RANGE = {"project": "llm", "from": "2026-11-01", "to": "2026-11-08"}


async def _seed_ledger(c: httpx.AsyncClient) -> None:
    r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
    assert r.status_code == 201, r.text
    batch = [
        event("d1", 10, time="2026-11-01T05:00:00Z"),
        event("d2", 10, time="2026-11-02T05:00:00Z"),
        event("d3", 4, time="2026-11-03T05:00:00Z"),
        event("d4", 2, time="2026-11-04T05:00:00Z"),
        event("d4n", 100, sku="network.cross_region.gb", time="2026-11-04T06:00:00Z"),
        event("d6", 1, time="2026-11-06T05:00:00Z"),
    ]
    r = await c.post("/v1/events", json=batch)
    assert r.status_code == 200 and r.json()["accepted"] == 6, r.text


async def _import(c: httpx.AsyncClient, body: bytes, media: str = "text/csv") -> httpx.Response:
    return await c.post("/v1/bills/imports", content=body, headers={"content-type": media})


def _cells(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(cell["day"], cell["sku"]): cell for cell in report["cells"]}


def _bill_keys(api: Api) -> list[bytes]:
    client = sync_client(api.redis_url)
    try:
        return sorted(k for k in client.keys("*{bills}*"))
    finally:
        client.close()


async def test_drift_report_pinned_by_hand(api: Api) -> None:
    async with api.client() as c:
        await _seed_ledger(c)
        r = await c.put("/v1/bills/mappings/llm", json=MAPPING)
        assert r.status_code == 200, r.text
        r = await _import(c, FOCUS_12)
        assert r.status_code == 201, r.text
        first = r.json()
        assert first["status"] == "imported" and first["focus_version"] == "1.2"
        assert (first["rows"], first["corrections"], first["currency"]) == (8, 0, "USD")
        assert first["newest_charge_period_end"] == "2026-11-07T00:00:00Z"

        r = await c.get("/v1/bills/drift", params=RANGE)
        assert r.status_code == 200, r.text
        before = _cells(r.json())
        # 12 hours billed for the 10 metered: the bill is over the ledger.
        assert before[("2026-11-02", "gpu.h100.hour")]["status"] == "over"

        # The FOCUS 1.0 file corrects 11-02: -2 hours, -$5.
        r = await _import(c, FOCUS_10)
        assert r.status_code == 201, r.text
        assert (r.json()["focus_version"], r.json()["corrections"]) == ("1.0", 1)

        r = await c.get("/v1/bills/drift", params=RANGE)
        assert r.status_code == 200, r.text
        report = r.json()
    assert report["pending_from"] == "2026-11-05"
    assert report["tolerance"] == {"absolute": "0.01", "relative": "0.005"}
    assert report["imports"] == 2 and report["bill_currency"] == "USD"
    cells = _cells(report)
    assert sorted(cells) == [
        ("2026-11-01", "gpu.h100.hour"),
        ("2026-11-02", "gpu.h100.hour"),
        ("2026-11-03", "gpu.h100.hour"),
        ("2026-11-03", "network.cross_region.gb"),
        ("2026-11-04", "gpu.h100.hour"),
        ("2026-11-04", "network.cross_region.gb"),
        ("2026-11-06", "gpu.h100.hour"),
    ]

    def row(day: str, sku: str) -> tuple[Any, ...]:
        cell = cells[(day, sku)]
        return tuple(
            cell[k]
            for k in (
                "status",
                "ledger_quantity",
                "ledger_cost",
                "bill_quantity",
                "billed_cost",
                "effective_cost",
                "bill_unit_price",
                "card_unit_price",
                "bill_rows",
                "correction_rows",
            )
        )

    gpu, net = "gpu.h100.hour", "network.cross_region.gb"
    # $25.004 against $25: 0.004 apart, within 0.01.
    assert row("2026-11-01", gpu) == (
        "reconciled", "10", "25.00", "10", "25.00", "25.004", "2.5004", "2.5", 1, 0
    )  # fmt: skip
    # 12 h $30 less the correction's 2 h $5: the ledger's 10 h $25.
    assert row("2026-11-02", gpu) == (
        "reconciled", "10", "25.00", "10", "25.00", "25.00", "2.5", "2.5", 2, 1
    )  # fmt: skip
    assert row("2026-11-03", gpu) == (
        "under", "4", "10.00", "4", "8.00", "8.00", "2", "2.5", 1, 0
    )  # fmt: skip
    assert row("2026-11-03", net) == (
        "billed_not_metered", None, None, "50", "1.00", "1.00", "0.02", "0.02", 1, 0
    )  # fmt: skip
    # Two rows (two resources) summed: 3 h $7.50 against the ledger's 2 h $5.
    assert row("2026-11-04", gpu) == (
        "over", "2", "5.00", "3", "7.50", "7.50", "2.5", "2.5", 2, 0
    )  # fmt: skip
    assert row("2026-11-04", net) == (
        "metered_not_billed", "100", "2.00", None, None, None, None, "0.02", 0, 0
    )  # fmt: skip
    # Within 48 h of the newest ChargePeriodEnd (11-07 00:00): the provider may still add.
    assert row("2026-11-06", gpu) == (
        "pending", "1", "2.50", "1", "2.50", "2.50", "2.5", "2.5", 1, 0
    )  # fmt: skip
    # 25 + 25 + 10 + 5 + 2 + 2.50 metered; 25 + (30 - 5) + 8 + 1 + 7.50 + 2.50 billed.
    assert (report["ledger_cost"], report["billed_cost"], report["effective_cost"]) == (
        "69.50",
        "69.00",
        "69.004",
    )
    # The row tagged project=other matches no mapping: kept, shown as unattributed.
    assert report["unattributed"] == [
        {
            "day": "2026-11-05",
            "service_name": "GPU Compute",
            "sku_id": "H100",
            "billed_cost": "7.00",
            "effective_cost": "7.00",
            "rows": 1,
        }
    ]


async def test_the_same_bill_twice_changes_nothing(api: Api) -> None:
    """Again as sent, and again gzip-compressed (the same content): 200 `duplicate`, the
    earlier import's id, and the report and the stored keys as they were."""
    async with api.client() as c:
        await _seed_ledger(c)
        await c.put("/v1/bills/mappings/llm", json=MAPPING)
        first = await _import(c, FOCUS_12)
        assert first.status_code == 201, first.text
        report = (await c.get("/v1/bills/drift", params=RANGE)).json()
        keys = _bill_keys(api)
        for body, media in ((FOCUS_12, "text/csv"), (gzip.compress(FOCUS_12), "application/gzip")):
            again = await _import(c, body, media)
            assert again.status_code == 200, again.text
            assert again.json()["status"] == "duplicate"
            assert again.json()["id"] == first.json()["id"]
        assert (await c.get("/v1/bills/drift", params=RANGE)).json() == report
    assert _bill_keys(api) == keys


async def test_a_gzip_bill_reads_as_its_csv(api: Api) -> None:
    async with api.client() as c:
        await c.put("/v1/bills/mappings/llm", json=MAPPING)
        r = await _import(c, gzip.compress(FOCUS_12), "application/gzip")
        assert r.status_code == 201, r.text
        assert (r.json()["rows"], r.json()["focus_version"]) == (8, "1.2")
        cells = _cells((await c.get("/v1/bills/drift", params=RANGE)).json())
    assert cells[("2026-11-01", "gpu.h100.hour")]["status"] == "billed_not_metered"
    assert cells[("2026-11-01", "gpu.h100.hour")]["effective_cost"] == "25.004"


def _broken(line: int, column: str, value: str) -> bytes:
    """FOCUS_12 with `column` of data row `line` (1 = first) set to `value`."""
    rows = list(csv.reader(io.StringIO(FOCUS_12.decode())))
    rows[line][rows[0].index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


async def test_a_malformed_bill_is_refused_whole(api: Api) -> None:
    """A missing required column, a bad number, a bad date: 422 naming row and column, and
    nothing kept (no rows key, nothing staging), however far the file was read."""
    header, *rows = FOCUS_12.decode().splitlines()
    no_effective = "\n".join(
        ",".join(c for i, c in enumerate(line.split(",")) if i != 10) for line in [header, rows[3]]
    )
    assert "EffectiveCost" not in no_effective.splitlines()[0]
    cases = [
        (no_effective.encode(), 0, "EffectiveCost"),
        (_broken(4, "BilledCost", "1.0.0"), 4, "BilledCost"),
        (_broken(6, "ChargePeriodStart", "2026-13-40"), 6, "ChargePeriodStart"),
        (_broken(4, "ConsumedQuantity", "NaN"), 4, "ConsumedQuantity"),
        (b"not,a,focus,file\n", 0, "BilledCost"),
    ]
    async with api.client() as c:
        for body, row, column in cases:
            r = await _import(c, body)
            assert r.status_code == 422, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            problem = r.json()
            assert (problem["row"], problem["column"]) == (row, column), problem
            assert problem["type"] == "https://trainledger.dev/problems/invalid-request"
            assert problem["errors"][0]["field"] == column
        r = await _import(c, gzip.compress(FOCUS_12)[:-20], "application/gzip")
        assert r.status_code == 422, r.text
        assert _bill_keys(api) == []
        # The good file afterwards imports whole.
        assert (await _import(c, FOCUS_12)).status_code == 201


async def test_only_an_admin_for_every_project_imports(api: Api) -> None:
    scoped = await api.token("admin", ["llm"])
    reader = await api.token("read")
    async with api.client(scoped) as c:
        r = await _import(c, FOCUS_12)
        assert r.status_code == 403, r.text
    async with api.client(reader) as c:
        assert (await _import(c, FOCUS_12)).status_code == 403
    assert _bill_keys(api) == []


async def test_a_scoped_reader_sees_no_unattributed_spend(api: Api) -> None:
    async with api.client() as c:
        await c.put("/v1/bills/mappings/llm", json=MAPPING)
        assert (await _import(c, FOCUS_12)).status_code == 201
    token = await api.token("read", ["llm"])
    async with api.client(token) as c:
        r = await c.get("/v1/bills/drift", params=RANGE)
        assert r.status_code == 200, r.text
        assert r.json()["unattributed"] is None
        assert len(r.json()["cells"]) == 6
        assert (await c.get("/v1/bills/drift", params={"project": "other"})).status_code == 403


async def test_a_mapping_change_reattributes_imported_rows(api: Api) -> None:
    """`other` mapped after the import: its 11-05 row leaves the unattributed spend."""
    async with api.client() as c:
        await c.put("/v1/bills/mappings/llm", json=MAPPING)
        assert (await _import(c, FOCUS_12)).status_code == 201
        other = {"match": [{"sub_account_id": "acct-other"}], "skus": []}
        r = await c.put("/v1/bills/mappings/other", json=other)
        assert r.status_code == 200, r.text
        assert (await c.get("/v1/bills/mappings/other")).json()["match"] == other["match"]
        r = await c.get("/v1/bills/drift", params={"project": "other"})
        report = r.json()
    assert report["unattributed"] == []
    assert [(x["day"], x["sku"], x["status"], x["billed_cost"]) for x in report["cells"]] == [
        ("2026-11-05", "(unmapped)", "pending", "7.00")
    ]


async def test_a_mapping_that_matches_nothing_is_422(api: Api) -> None:
    async with api.client() as c:
        r = await c.put("/v1/bills/mappings/llm", json={"match": [{}]})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "$.match[0]"
        assert (await c.get("/v1/bills/mappings/llm")).status_code == 404
