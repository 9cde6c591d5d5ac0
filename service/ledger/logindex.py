"""The fields a fold adds to the log's two indexes for each entry it sums (read by
service/ledger/ranges.py; the keys: ``logix:<yyyymmdd>`` and ``tierix:<yyyymm>``,
service/storage/keys.py): which hours an entry holds events of, and its quantity per month,
rate version and SKU (what a graduated price's counters add up)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from .eventlog import CodedLog

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

__all__ = ["day_name", "entry_hours", "entry_tier_quantities"]


@functools.lru_cache(maxsize=4096)
def day_name(days_since_epoch: int) -> str:
    """yyyymmdd of a day counted from 1970-01-01."""
    return (_EPOCH + timedelta(days=days_since_epoch)).strftime("%Y%m%d")


_HOUR_US = 3_600_000_000


def entry_hours(entry_id: str, epoch_us: Sequence[int]) -> dict[tuple[str, str], int]:
    """The log index's fields of one entry: (yyyymmdd, ``HH|<entry id>``) -> its events in
    that hour (service/ledger/ranges.py reads them)."""
    if not epoch_us:
        return {}
    first, last = min(epoch_us) // _HOUR_US, max(epoch_us) // _HOUR_US
    if first == last:  # the common case: a batch of one hour, no per-event work
        counts = {first: len(epoch_us)}
    else:
        counts = {}
        for us in epoch_us:
            hour = us // _HOUR_US
            counts[hour] = counts.get(hour, 0) + 1
    return {(day_name(h // 24), f"{h % 24:02d}|{entry_id}"): n for h, n in counts.items()}


_DAY_US = 86_400_000_000


def entry_tier_quantities(entry_id: str, entry: CodedLog) -> dict[tuple[str, str], int]:
    """The tier index's fields of one entry: (yyyymm, ``<entry id>|<version>|<sku>``) -> the
    quantity of its events of that month with that rate (service/ledger/ranges.py)."""
    if not entry.epoch_us:
        return {}
    months: list[str] | None = None
    first = day_name(min(entry.epoch_us) // _DAY_US)[:6]
    if first != day_name(max(entry.epoch_us) // _DAY_US)[:6]:  # rare: a batch across months
        months = [day_name(us // _DAY_US)[:6] for us in entry.epoch_us]
    sums: dict[tuple[str, int], int] = {}
    if months is None:
        by_code = [0] * len(entry.rates)
        # zip without strict: the columns are one length by construction, and this loop is
        # the fold's only per-event Python (~0.1 µs an event).
        for code, quantity in zip(entry.rate_codes, entry.quantity_micro):  # noqa: B905
            by_code[code] += quantity
        sums = {(first, code): q for code, q in enumerate(by_code)}
    else:
        for month, code, quantity in zip(
            months, entry.rate_codes, entry.quantity_micro, strict=True
        ):
            sums[(month, code)] = sums.get((month, code), 0) + quantity
    out: dict[tuple[str, str], int] = {}
    for (month, code), quantity in sums.items():
        # Past int64 only a flat price's quantity can be (ingest keeps graduated counters in
        # int64), and no export replays a flat price: such a field is left out.
        if 0 < quantity < 2**63:
            version, sku, _, _ = entry.rates[code]
            field = (month, f"{entry_id}|{version}|{sku}")
            out[field] = out.get(field, 0) + quantity
    return out
