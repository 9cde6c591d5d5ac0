"""An import's rows are staged before the commit, and none of them stays when the file fails
part way (after sums were sent), or when an import was abandoned (swept by the next one)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from trainledger.auth.model import Principal
from trainledger.bills.focus import BillError
from trainledger.bills.service import FLUSH_ROWS, STALE_STAGING_MS, bill_imports, import_bill
from trainledger.stores import Stores

from tests.conftest import sync_client

ADMIN = Principal(role="admin", projects=None, token_id="tests")
HEADER = (
    "BillingCurrency,BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,"
    "ChargeCategory,BilledCost,EffectiveCost,ConsumedQuantity,SkuId,Tags\n"
)


def _row(i: int, cost: str = "1.5") -> str:
    day = 1 + i % 28
    return (
        f"USD,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,2026-11-{day:02d}T00:00:00Z,"
        f'2026-11-{day:02d}T01:00:00Z,Usage,{cost},{cost},1,SKU-{i % 7},"{{""n"": ""{i}""}}"\n'
    )


def _bill_keys(url: str) -> list[bytes]:
    client = sync_client(url)
    try:
        return sorted(client.keys("*{bills}*"))
    finally:
        client.close()


async def test_a_file_failing_after_rows_were_staged_leaves_nothing(
    store: Stores, clean_redis: str
) -> None:
    bad = FLUSH_ROWS + 2000
    lines = [HEADER, *(_row(i, "x" if i == bad - 1 else "1.5") for i in range(bad + 100))]
    staged_seen: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(lines), 500):
            # What was staged so far, looked at between chunks: rows keys once sums were sent.
            staged_seen.append(sum(b":rows:" in k for k in _bill_keys(clean_redis)))
            yield "".join(lines[start : start + 500]).encode()

    with pytest.raises(BillError) as caught:
        await import_bill(store, ADMIN, chunks())
    assert (caught.value.row, caught.value.column) == (bad, "BilledCost")
    assert max(staged_seen) == 28  # one rows hash per day had been written
    assert _bill_keys(clean_redis) == []
    assert await bill_imports(store) == []


async def test_an_abandoned_import_is_swept_by_the_next(store: Stores, clean_redis: str) -> None:
    await store.bills.begin("abandoned", 1)
    await store.bills.add_rows("abandoned", {"20261101": {"b|x": 5}}, 1)
    # Another one still writing (its last sums a moment ago): not swept.
    now_ms = int(time.time() * 1000)
    await store.bills.begin("writing", now_ms)
    await store.bills.add_rows("writing", {"20261101": {"b|x": 5}}, now_ms)
    assert len(_bill_keys(clean_redis)) == 5  # staging; days and rows of each

    async def one_file() -> AsyncIterator[bytes]:
        yield (HEADER + _row(0)).encode()

    record = await import_bill(store, ADMIN, one_file())
    assert record.rows == 1
    keys = _bill_keys(clean_redis)
    assert not [k for k in keys if b"abandoned" in k]
    assert len([k for k in keys if b"writing" in k]) == 2
    # A sweep just under an hour after its last sums still leaves it; one just after takes it.
    sweep_at = now_ms + STALE_STAGING_MS
    assert await store.bills.stale_imports(sweep_at - 1 - STALE_STAGING_MS) == []
    assert await store.bills.stale_imports(sweep_at - STALE_STAGING_MS) == ["writing"]
    assert [i.id for i in await bill_imports(store)] == [record.id]
