"""Waste findings (`service/waste/`: `report.find_waste` and one module per kind of waste).

Every scenario is built from `LoggedEvent` rows by hand, and its expected findings and
money are worked out in the comments from the inputs and the conventions documented in the
module, never copied from the function's output.

Unless a test says otherwise: now = 2026-03-10 12:00 UTC, the window is 2026-03-01 ..
2026-03-10, so the last full day (the "rate day" of per-day figures) is 2026-03-09 and
`as_of` = now.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from trainledger.ledger.eventlog import LoggedEvent
from trainledger.ratecards.model import PricedSku
from trainledger.waste.model import Finding, ProgressPoint, WastePolicy, WasteReport
from trainledger.waste.report import find_waste
from trainledger.waste.reserved import usage_sku_of
from trainledger.waste.scan import allocate

from costcore.money import parse_quantity

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
W_FROM = date(2026, 3, 1)
W_TO = date(2026, 3, 10)


def _nano(amount: str) -> int:
    value = Decimal(amount) * 10**9
    assert value == value.to_integral_value(), amount
    return int(value)


def _sku(code: str, category: str, unit: str, price: str, fixed: bool = False) -> PricedSku:
    return PricedSku(code, category, unit, fixed, _nano(price), (), None)


SKUS: dict[str, PricedSku] = {
    s.code: s
    for s in (
        _sku("gpu.h100.hour", "compute", "gpu_hour", "2.00"),
        _sku("gpu.h100.reserved.hour", "compute", "gpu_hour", "2.00", fixed=True),
        _sku("gpu.h100.reserved.used.hour", "compute", "gpu_hour", "0"),
        _sku("sched.job.hour", "compute", "gpu_hour", "0"),
        _sku("ops.engineer.hour", "ops", "hour", "150", fixed=True),
        _sku("storage.hot.gb_day", "storage", "gb_day", "0.001"),
        _sku("storage.checkpoint.gb_day", "storage", "gb_day", "0.005"),
        _sku("network.cross_region.gb", "network", "gb", "0.02"),
        _sku("logs.ingest.gb", "logging", "gb", "0.50"),
        _sku("logs.retention.gb_day", "logging", "gb_day", "0.001"),
    )
}


def _us(when: datetime) -> int:
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def ev(
    event_id: str,
    when: str,
    sku: str,
    quantity: str,
    cost: str | None = None,
    *,
    experiment: str = "",
    tags: dict[str, str] | None = None,
) -> LoggedEvent:
    """A log row; `when` is "YYYY-MM-DD" (midnight) or "YYYY-MM-DDTHH:MM" in UTC.

    The cost is quantity x the SKU's unit price unless given.
    """
    t = datetime.fromisoformat(when).replace(tzinfo=UTC)
    priced = SKUS[sku]
    q = parse_quantity(quantity)
    c = _nano(cost) if cost is not None else q * priced.unit_price_nano // 10**6
    return LoggedEvent(
        event_id, _us(t), "pretrain", experiment, "alice", sku, q, tags, c, 1, priced.category
    )


def run(
    events: list[LoggedEvent],
    policy: WastePolicy | None = None,
    progress: dict[str, list[ProgressPoint]] | None = None,
    *,
    now: datetime = NOW,
    window_from: date | None = W_FROM,
    window_to: date | None = W_TO,
) -> WasteReport:
    report = find_waste("llm", events, SKUS, policy, progress, now, window_from, window_to, "USD")
    # The report is plain data the HTTP layer can encode.
    msgspec.json.decode(msgspec.json.encode(report), type=WasteReport)
    return report


def only(report: WasteReport, kind: str) -> list[Finding]:
    return [f for f in report.findings if f.kind == kind]


def days(finding: Finding) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(d) for d in finding.evidence.days]


def point(when: str, metric: str, value: str, higher: bool = False) -> ProgressPoint:
    t = datetime.fromisoformat(when).replace(tzinfo=UTC)
    return ProgressPoint(time=t, metric=metric, value=Decimal(value), higher_is_better=higher)


# --------------------------------------------------------------------------------------
# Reserved capacity
# --------------------------------------------------------------------------------------


def reserved_events() -> list[LoggedEvent]:
    paid = "gpu.h100.reserved.hour"
    used = "gpu.h100.reserved.used.hour"
    return [
        # 8 GPU-hours paid per day at 2.00 = 16.00 a day.
        ev("p06", "2026-03-06", paid, "8"),
        ev("p07", "2026-03-07", paid, "8"),
        ev("p08", "2026-03-08", paid, "8"),
        ev("p09", "2026-03-09", paid, "8"),
        ev("p10", "2026-03-10", paid, "8"),  # today: not over, left out
        # 03-06: used 2 + 3 = 5. The first event is on the usage SKU *and* tagged: counted once.
        ev("u06a", "2026-03-06T03:00", used, "2", tags={"reservation": paid}),
        ev("u06b", "2026-03-06T09:00", used, "3"),
        ev("u07", "2026-03-07T09:00", used, "5"),  # 03-07: used 5
        ev("u08", "2026-03-08T09:00", used, "8"),  # 03-08: used 8
        # 03-09: used 6, posted by the scheduler on another SKU with the reservation tag.
        ev("s09a", "2026-03-09T01:00", "sched.job.hour", "3", tags={"reservation": paid}),
        ev("s09b", "2026-03-09T13:00", "sched.job.hour", "3", tags={"reservation": paid}),
        # A fixed SKU whose use is never posted (salaried hours): never reported idle.
        ev("ops09", "2026-03-09", "ops.engineer.hour", "8"),
    ]


def test_reserved_idle_capacity_worked_example() -> None:
    # Idle per day = paid - used: 03-06 8-5 = 3, 03-07 8-5 = 3, 03-08 8-8 = 0, 03-09 8-6 = 2.
    # Idle cost = 16.00 x idle / 8: 6.00 + 6.00 + 0 + 4.00 = 16.00 so far.
    # Per day if left alone = idle cost of the last full day (03-09) = 4.00.
    report = run(reserved_events())
    [f] = report.findings
    assert f.kind == "reserved_idle"
    assert f.cost_so_far == "16.00"
    assert f.cost_per_day_if_left == "4.00"
    assert f.currency == "USD"
    assert report.total_waste == "16.00"
    assert report.total_per_day_if_left == "4.00"
    assert f.evidence.keys["sku"] == "gpu.h100.reserved.hour"
    assert f.evidence.keys["usage_skus"] == "gpu.h100.reserved.used.hour"
    assert days(f) == [
        {"day": "2026-03-06", "quantity": "3", "cost": "6.00", "paid": "8", "used": "5"},
        {"day": "2026-03-07", "quantity": "3", "cost": "6.00", "paid": "8", "used": "5"},
        {"day": "2026-03-08", "quantity": "0", "cost": "0.00", "paid": "8", "used": "8"},
        {"day": "2026-03-09", "quantity": "2", "cost": "4.00", "paid": "8", "used": "6"},
    ]
    # Evidence ids: the paid events of the days with idle cost.
    assert f.evidence.event_ids == ["p06", "p07", "p09"]
    assert (f.window.start, f.window.end) == (date(2026, 3, 6), date(2026, 3, 9))
    # 8 of 32 paid hours idle = 25 %.
    assert "8 of 32 gpu_hour (25%)" in f.title
    assert "reservation=gpu.h100.reserved.hour" in f.action


def test_reserved_usage_skus_from_policy_and_historical_window() -> None:
    # Use posted on the on-demand-looking SKU "sched.job.hour" (declared in the policy)
    # instead of the conventional usage SKU: the conventional one no longer counts.
    paid = "gpu.h100.reserved.hour"
    events = [
        ev("p07", "2026-03-07", paid, "8"),
        ev("p08", "2026-03-08", paid, "8"),
        ev("u07", "2026-03-07T09:00", "gpu.h100.reserved.used.hour", "8"),  # not declared
        ev("s08", "2026-03-08T09:00", "sched.job.hour", "8"),
    ]
    policy = WastePolicy(usage_skus={paid: ["sched.job.hour"]})
    # 03-07: used 0 -> idle 8 -> 16.00; 03-08: used 8 -> idle 0. Window ends 03-08 (in the
    # past), so the rate day is 03-08 and the per-day figure is 0.
    report = run(events, policy, window_to=date(2026, 3, 8))
    [f] = report.findings
    assert (f.cost_so_far, f.cost_per_day_if_left) == ("16.00", "0.00")
    assert f.evidence.keys["usage_skus"] == "sched.job.hour"
    assert report.as_of == datetime(2026, 3, 9, tzinfo=UTC)


def test_reserved_rounds_half_even_and_ignores_zero_paid() -> None:
    paid = "gpu.h100.reserved.hour"
    events = [
        # 03-07: 2 h paid for 0.000000005, 1 used -> idle cost 5 x 1 / 2 = 2.5 nano -> 2 (even).
        ev("p07", "2026-03-07", paid, "2", "0.000000005"),
        ev("u07", "2026-03-07T01:00", "gpu.h100.reserved.used.hour", "1"),
        # 03-08: 3 h paid for 1.000000001, 2 used -> 1.000000001 / 3 = 0.333333333667 -> ...334.
        ev("p08", "2026-03-08", paid, "3", "1.000000001"),
        ev("u08", "2026-03-08T01:00", "gpu.h100.reserved.used.hour", "2"),
        # 03-09: zero paid with use -> no idle, no division by zero.
        ev("p09", "2026-03-09", paid, "0", "0"),
        ev("u09", "2026-03-09T01:00", "gpu.h100.reserved.used.hour", "4"),
        # 03-05: more used than paid -> idle 0, not negative.
        ev("p05", "2026-03-05", paid, "4"),
        ev("u05", "2026-03-05T01:00", "gpu.h100.reserved.used.hour", "6"),
    ]
    [f] = run(events).findings
    # 0.000000002 + 0.333333334 = 0.333333336
    assert f.cost_so_far == "0.333333336"
    assert f.cost_per_day_if_left == "0.00"  # 03-09 has nothing idle
    by_day = {d["day"]: d for d in days(f)}
    assert by_day["2026-03-07"]["cost"] == "0.000000002"
    assert by_day["2026-03-08"]["cost"] == "0.333333334"
    assert by_day["2026-03-09"]["quantity"] == "0"
    assert by_day["2026-03-05"]["quantity"] == "0"


def test_reserved_without_any_usage_source_is_not_reported() -> None:
    # A rate card without the conventional usage SKU, no declared usage SKUs and no tags:
    # its use cannot be known, so it is not reported (it would look 100 % idle).
    skus = {k: v for k, v in SKUS.items() if k != "gpu.h100.reserved.used.hour"}
    events = [ev("p08", "2026-03-08", "gpu.h100.reserved.hour", "8")]
    report = find_waste("llm", events, skus, None, None, NOW, W_FROM, W_TO, "USD")
    assert report.findings == []
    # The same reservation, with the usage SKU in the card and no use posted: all idle.
    [f] = run(events).findings
    assert f.cost_so_far == "16.00"
    assert usage_sku_of("gpu.h100.reserved.hour") == "gpu.h100.reserved.used.hour"
    assert usage_sku_of("tpu.reserved.chip_hour") == "tpu.reserved.used.chip_hour"


# --------------------------------------------------------------------------------------
# Storage past retention
# --------------------------------------------------------------------------------------


def storage_events() -> list[LoggedEvent]:
    hot = "storage.hot.gb_day"  # 0.001 per GB-day
    raw_old = {"data_class": "raw", "created": "2025-03-01", "dataset": "cc-2024"}
    raw_edge = {"data_class": "raw", "created": "2025-03-08", "dataset": "cc-2025"}
    return [
        # raw, created 2025-03-01: on 03-08 aged 372 days (365 to 2026-03-01, + 7) > 365.
        ev("a08", "2026-03-08", hot, "1000", tags=raw_old),  # 1.00
        ev("a09", "2026-03-09", hot, "1000", tags=raw_old),  # 1.00
        ev("a10", "2026-03-10", hot, "1000", tags=raw_old),  # 1.00 (today's storage counts)
        ev("a02", "2026-02-20", hot, "1000", tags=raw_old),  # before the window: not counted
        # raw, created 2025-03-08: 365 days old on 03-08 (kept), 366 on 03-09 (waste).
        ev("b08", "2026-03-08", hot, "200", tags=raw_edge),
        ev("b09", "2026-03-09", hot, "200", tags=raw_edge),  # 0.20
        # intermediate, created 2026-02-01: 36 days old on 03-09 > 30.
        ev(
            "c09",
            "2026-03-09",
            hot,
            "500",
            tags={"data_class": "intermediate", "created": "2026-02-01"},
        ),  # 0.50
        # intermediate, created 2026-02-20: 17 days old, kept.
        ev(
            "c09b",
            "2026-03-09",
            hot,
            "500",
            tags={"data_class": "intermediate", "created": "2026-02-20"},
        ),
        # checkpoint, created 2026-02-20: 17 days old on 03-09 > 14.
        ev(
            "d09",
            "2026-03-09",
            "storage.checkpoint.gb_day",
            "60",
            tags={"data_class": "checkpoint", "created": "2026-02-20"},
        ),  # 60 x 0.005 = 0.30
        # class other: never flagged.
        ev("e09", "2026-03-09", hot, "900", tags={"data_class": "other", "created": "2020-01-01"}),
        # missing data_class -> other; unknown class -> other: never flagged.
        ev("f09", "2026-03-09", hot, "900", tags={"created": "2020-01-01"}),
        ev("g09", "2026-03-09", hot, "900", tags={"data_class": "Raw", "created": "2020-01-01"}),
        # raw without `created`, or with a malformed one, cannot be aged: not checked.
        ev("h09", "2026-03-09", hot, "900", tags={"data_class": "raw"}),
        ev("i09", "2026-03-09", hot, "900", tags={"data_class": "raw", "created": "2020/01/01"}),
        ev("j09", "2026-03-09", hot, "900"),  # no tags at all
    ]


def test_storage_past_retention_by_class_and_dataset() -> None:
    report = run(storage_events())
    found = only(report, "storage_past_retention")
    assert [f.evidence.keys.get("dataset") for f in found] == ["cc-2024", None, None, "cc-2025"]
    a, c, d, b = found
    # cc-2024: 1.00 x 3 days = 3.00 so far; per day = 03-09's 1.00.
    assert (a.cost_so_far, a.cost_per_day_if_left) == ("3.00", "1.00")
    assert a.evidence.event_ids == ["a08", "a09", "a10"]
    assert a.evidence.keys == {
        "sku": "storage.hot.gb_day",
        "data_class": "raw",
        "retention_days": "365",
        "dataset": "cc-2024",
        "oldest_created": "2025-03-01",
    }
    assert [(x["day"], x["quantity"], x["cost"]) for x in days(a)] == [
        ("2026-03-08", "1000", "1.00"),
        ("2026-03-09", "1000", "1.00"),
        ("2026-03-10", "1000", "1.00"),
    ]
    # Action: delete data written before rate day - 365 = 2025-03-09.
    assert "before 2025-03-09" in a.action
    assert (c.cost_so_far, c.evidence.keys["data_class"]) == ("0.50", "intermediate")
    assert (d.cost_so_far, d.evidence.keys["data_class"]) == ("0.30", "checkpoint")
    # cc-2025: only the 366-day-old event.
    assert (b.cost_so_far, b.evidence.event_ids) == ("0.20", ["b09"])
    # 3.00 + 0.50 + 0.30 + 0.20; per day 1.00 + 0.50 + 0.30 + 0.20
    assert report.total_waste == "4.00"
    assert report.total_per_day_if_left == "2.00"
    assert len(report.findings) == 4


def test_storage_retention_policy_override() -> None:
    # raw kept 400 days: cc-2024 (372 days) and cc-2025 are fine; intermediate off (None);
    # checkpoint 20 days: the 17-day-old one is fine; `other` 1000 days: e09 created
    # 2020-01-01 is 2259 days old on 2026-03-09 (6 x 365 + 2 leap days + 67) -> 0.90.
    policy = msgspec.convert(
        {"retention_days": {"raw": 400, "intermediate": None, "checkpoint": 20, "other": 1000}},
        WastePolicy,
    )
    report = run(storage_events(), policy)
    # f09 (missing class) and g09 (unknown class) are class `other` too: 3 x 0.90.
    [f] = report.findings
    assert f.evidence.keys["data_class"] == "other"
    assert f.evidence.event_ids == ["e09", "f09", "g09"]
    assert f.cost_so_far == "2.70"


# --------------------------------------------------------------------------------------
# Checkpoint growth
# --------------------------------------------------------------------------------------


def checkpoint_events() -> list[LoggedEvent]:
    ck = "storage.checkpoint.gb_day"  # 0.005 per GB-day
    tags = {"data_class": "checkpoint", "created": "2026-03-05"}
    return [
        ev("k07", "2026-03-07", ck, "350", tags=tags),  # 350 <= 360: within tolerance
        ev("k08a", "2026-03-08", ck, "250", tags=tags),  # 03-08: 400 GB-days, 2.00
        ev("k08b", "2026-03-08", ck, "150", tags=tags),
        ev("k09", "2026-03-09", ck, "600", tags=tags),  # 03-09: 600 GB-days, 3.00
        # An old checkpoint past its 14-day retention (36 days): 100 x 0.005 = 0.50, reported
        # as retention and left out of the growth check.
        ev(
            "k09old",
            "2026-03-09",
            ck,
            "100",
            tags={"data_class": "checkpoint", "created": "2026-02-01"},
        ),
        # Not a checkpoint (no data_class): not in the growth check.
        ev("n09", "2026-03-09", ck, "1000"),
    ]


def test_checkpoint_growth_beyond_policy() -> None:
    # size 100 GB x keep_last 3 = 300 GB-days a day expected; +20 % tolerance -> 360.
    # 03-08: 400 > 360 -> excess 100 -> 2.00 x 100 / 400 = 0.50.
    # 03-09: 600 > 360 -> excess 300 -> 3.00 x 300 / 600 = 1.50.
    # (With the old checkpoint counted it would be 700 -> 3.50 x 400 / 700 = 2.00.)
    policy = msgspec.convert({"checkpoint": {"size_gb": "100"}}, WastePolicy)
    report = run(checkpoint_events(), policy)
    [growth] = only(report, "checkpoint_growth")
    assert (growth.cost_so_far, growth.cost_per_day_if_left) == ("2.00", "1.50")
    assert days(growth) == [
        {
            "day": "2026-03-08",
            "quantity": "100",
            "cost": "0.50",
            "expected": "300",
            "actual": "400",
        },
        {
            "day": "2026-03-09",
            "quantity": "300",
            "cost": "1.50",
            "expected": "300",
            "actual": "600",
        },
    ]
    assert growth.evidence.event_ids == ["k08a", "k08b", "k09"]
    [old] = only(report, "storage_past_retention")
    assert old.cost_so_far == "0.50"
    assert report.total_waste == "2.50"
    assert "last 3" in growth.action


def test_checkpoint_growth_tolerance_override_and_off_by_default() -> None:
    # tolerance 50 % -> limit 450: 03-08 (400) is fine, 03-09 (600) still wastes 1.50.
    policy = msgspec.convert(
        {"checkpoint": {"size_gb": "100", "keep_last": 3, "tolerance_pct": 50}}, WastePolicy
    )
    [growth] = only(run(checkpoint_events(), policy), "checkpoint_growth")
    assert growth.cost_so_far == "1.50"
    # keep_last 2 -> 200 expected, limit 300 at 50 %: 03-07 350 -> 350 x 0.005 = 1.75 x
    # 150/350 = 0.75; 03-08 400 -> 2.00 x 200/400 = 1.00; 03-09 600 -> 3.00 x 400/600 = 2.00.
    policy = msgspec.convert(
        {"checkpoint": {"size_gb": "100", "keep_last": 2, "tolerance_pct": 50}}, WastePolicy
    )
    [growth] = only(run(checkpoint_events(), policy), "checkpoint_growth")
    assert growth.cost_so_far == "3.75"
    # Default policy: no checkpoint size, no growth check.
    assert only(run(checkpoint_events()), "checkpoint_growth") == []


# --------------------------------------------------------------------------------------
# Cross-region re-pulls
# --------------------------------------------------------------------------------------


def test_cross_region_repulls() -> None:
    x = "network.cross_region.gb"  # 0.02 per GB
    west = {"dataset": "fineweb-v1", "dest_region": "us-west-2"}
    eu = {"dataset": "fineweb-v1", "dest_region": "eu-west-1"}
    code = {"dataset": "code-v2"}
    events = [
        ev("x0", "2026-02-25", x, "1000", tags=west),  # first pull, before the window
        ev("x0b", "2026-02-27", x, "1000", tags=west),  # a repeat before the window: history
        ev("x1", "2026-03-02", x, "1000", tags=west),  # repeat: 20.00
        ev("x2", "2026-03-05", x, "1000", tags=west),  # repeat: 20.00
        ev("y0", "2026-03-03", x, "1000", tags=eu),  # first to eu-west-1
        ev("y1", "2026-03-04", x, "500", tags=eu),  # repeat: 10.00
        ev("z0", "2026-03-06", x, "200", tags=code),  # first, no dest_region
        ev("z1", "2026-03-07", x, "200", tags=code),  # repeat: 4.00
        ev("q0", "2026-03-04", x, "700", tags={"dest_region": "us-west-2"}),  # no dataset
        ev("q1", "2026-03-05", x, "700", tags={"dest_region": "us-west-2"}),  # no dataset
        ev("late", "2026-03-11", x, "1000", tags=west),  # after the window: ignored
    ]
    report = run(events)
    west_f, eu_f, code_f = report.findings
    assert [f.kind for f in report.findings] == ["cross_region_repull"] * 3
    # Per day: repeats over the last 7 days of the window up to today (03-04 .. 03-10) / 7.
    # us-west-2: 40.00 so far; 03-05's 20.00 / 7 = 2.857142857142... -> 2.857142857.
    assert (west_f.cost_so_far, west_f.cost_per_day_if_left) == ("40.00", "2.857142857")
    assert west_f.evidence.event_ids == ["x1", "x2"]
    assert west_f.evidence.keys == {
        "dataset": "fineweb-v1",
        "dest_region": "us-west-2",
        "first_event_id": "x0",
        "first_day": "2026-02-25",
    }
    # eu-west-1: 10.00; 10.00 / 7 = 1.428571428571... -> 1.428571429.
    assert (eu_f.cost_so_far, eu_f.cost_per_day_if_left) == ("10.00", "1.428571429")
    # code-v2: 4.00; 4.00 / 7 = 0.571428571428... -> 0.571428571.
    assert (code_f.cost_so_far, code_f.cost_per_day_if_left) == ("4.00", "0.571428571")
    assert code_f.evidence.keys["dest_region"] == ""
    assert report.total_waste == "54.00"
    # 2.857142857 + 1.428571429 + 0.571428571
    assert report.total_per_day_if_left == "4.857142857"


def test_cross_region_evidence_ids_capped_at_20() -> None:
    x = "network.cross_region.gb"
    tags = {"dataset": "d", "dest_region": "r"}
    # 1 first pull + 25 repeats of 10 GB (0.20 each) on 03-09 -> 5.00; ids capped at 20.
    events = [ev(f"t{k:02d}", f"2026-03-09T{k % 24:02d}:00", x, "10", tags=tags) for k in range(26)]
    [f] = run(events).findings
    assert f.cost_so_far == "5.00"
    assert f.evidence.event_count == 25
    assert len(f.evidence.event_ids) == 20
    # Time order: t00 (00:00) first; t24 (00:00 too, id sorts after t00) is a repeat.
    assert f.evidence.keys["first_event_id"] == "t00"
    assert f.evidence.event_ids[:2] == ["t24", "t01"]


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------


def log_events() -> list[LoggedEvent]:
    ing = "logs.ingest.gb"  # 0.50 per GB
    ret = "logs.retention.gb_day"  # 0.001 per GB-day
    return [
        ev("l07", "2026-03-07", ing, "12"),  # 6.00
        ev("l08", "2026-03-08", ing, "8"),  # 4.00
        ev("l09a", "2026-03-09T01:00", ing, "10"),  # 5.00
        ev("l09b", "2026-03-09T02:00", ing, "6"),  # 3.00
        # created 2026-01-15: 53 days old on 03-09 (16 + 28 + 9) > 30 -> 2000 x 0.001 = 2.00
        ev("r09", "2026-03-09", ret, "2000", tags={"created": "2026-01-15"}),
        ev("r09b", "2026-03-09", ret, "2000", tags={"created": "2026-02-20"}),  # 17 days
        ev("r09c", "2026-03-09", ret, "2000"),  # no `created`: not checked
    ]


def test_logs_over_cap_and_past_retention() -> None:
    policy = msgspec.convert({"logs": {"max_ingest_gb_per_day": "10"}}, WastePolicy)
    report = run(log_events(), policy)
    [ingest] = only(report, "log_ingest_over_cap")
    # 03-07: 12 GB > 10 -> 6.00 x 2 / 12 = 1.00; 03-08: 8 GB, fine;
    # 03-09: 16 GB -> 8.00 x 6 / 16 = 3.00. So far 4.00, per day 3.00 (03-09).
    assert (ingest.cost_so_far, ingest.cost_per_day_if_left) == ("4.00", "3.00")
    assert [(d["day"], d["quantity"], d["cost"], d["actual"]) for d in days(ingest)] == [
        ("2026-03-07", "2", "1.00", "12"),
        ("2026-03-09", "6", "3.00", "16"),
    ]
    assert ingest.evidence.event_ids == ["l07", "l09a", "l09b"]
    [kept] = only(report, "log_past_retention")
    assert (kept.cost_so_far, kept.cost_per_day_if_left) == ("2.00", "2.00")
    assert kept.evidence.event_ids == ["r09"]
    # Delete logs written before rate day 03-09 - 30 days = 2026-02-07.
    assert "before 2026-02-07" in kept.action
    assert report.total_waste == "6.00"
    assert [f.kind for f in report.findings] == ["log_ingest_over_cap", "log_past_retention"]


def test_logs_defaults_no_cap_and_retention_override() -> None:
    # Default: no ingest cap; retention 30 days -> only r09.
    report = run(log_events())
    assert [f.kind for f in report.findings] == ["log_past_retention"]
    # retention 10 days: r09b (17 days) is waste too -> 4.00; retention off -> nothing.
    policy = msgspec.convert({"logs": {"retention_days": 10}}, WastePolicy)
    [kept] = run(log_events(), policy).findings
    assert kept.cost_so_far == "4.00"
    policy = msgspec.convert({"logs": {"retention_days": None}}, WastePolicy)
    assert run(log_events(), policy).findings == []


# --------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------


def experiment_events() -> list[LoggedEvent]:
    gpu = "gpu.h100.hour"  # 2.00 per GPU-hour
    rows = []
    # mix-a: 10 GPU-hours (20.00) at 06:00 every day 03-01 .. 03-10.
    rows += [
        ev(f"a{d:02d}", f"2026-03-{d:02d}T06:00", gpu, "10", experiment="mix-a")
        for d in range(1, 11)
    ]
    # A reserved (fixed) bill labelled mix-a: committed spend, never experiment waste.
    rows.append(ev("a-res", "2026-03-08", "gpu.h100.reserved.hour", "8", experiment="mix-a"))
    rows.append(ev("a-res-use", "2026-03-08T01:00", "gpu.h100.reserved.used.hour", "8"))
    # mix-b: 5 GPU-hours (10.00) at 06:00 every day 03-05 .. 03-10.
    rows += [
        ev(f"b{d:02d}", f"2026-03-{d:02d}T06:00", gpu, "5", experiment="mix-b")
        for d in range(5, 11)
    ]
    # mix-c: healthy (see its progress), 1 GPU-hour a day.
    rows += [
        ev(f"c{d:02d}", f"2026-03-{d:02d}T06:00", gpu, "1", experiment="mix-c")
        for d in range(1, 11)
    ]
    # mix-d: never reported, but started 03-09 06:00, less than 2 days before as_of.
    rows += [ev("d1", "2026-03-09T06:00", gpu, "1", experiment="mix-d")]
    rows += [ev("d2", "2026-03-10T06:00", gpu, "1", experiment="mix-d")]
    # mix-e: never reported, 1 GPU-hour at 12:00 on 03-06 .. 03-09 and at 06:00 on 03-10.
    rows += [
        ev(f"e{d:02d}", f"2026-03-{d:02d}T12:00", gpu, "1", experiment="mix-e")
        for d in range(6, 10)
    ]
    rows += [ev("e10", "2026-03-10T06:00", gpu, "1", experiment="mix-e")]
    # mix-f: stalled but stopped spending on 03-05.
    rows += [
        ev(f"f{d:02d}", f"2026-03-{d:02d}T06:00", gpu, "4", experiment="mix-f") for d in range(1, 6)
    ]
    # Spend without an experiment label: never an experiment finding.
    rows += [ev(f"n{d:02d}", f"2026-03-{d:02d}T06:00", gpu, "3") for d in range(1, 11)]
    # An event after as_of (12:00 today): not counted.
    rows.append(ev("a-late", "2026-03-10T13:00", gpu, "10", experiment="mix-a"))
    return rows


def experiment_progress() -> dict[str, list[ProgressPoint]]:
    return {
        # loss, lower is better: improved to 2.40 on 03-04 06:00, then 2.41, 2.45, 2.40 (a tie
        # is not an improvement). Still reports (03-09 is within 2 days), last improvement
        # 03-04 06:00 <= as_of - 3 days (03-07 12:00): stopped improving.
        "mix-a": [
            point("2026-03-02T06:00", "loss", "2.50"),
            point("2026-03-04T06:00", "loss", "2.40"),
            point("2026-03-06T06:00", "loss", "2.41"),
            point("2026-03-08T06:00", "loss", "2.45"),
            point("2026-03-09T06:00", "loss", "2.40"),
        ],
        # one point on 03-07 00:00, none since: older than as_of - 2 days (03-08 12:00).
        "mix-b": [point("2026-03-07T00:00", "acc", "0.61", higher=True)],
        # loss stalled since 03-02, but a second metric improved on 03-09: progress.
        "mix-c": [
            point("2026-03-02T00:00", "loss", "2.0"),
            point("2026-03-09T00:00", "loss", "2.1"),
            point("2026-03-05T00:00", "acc", "0.50", higher=True),
            point("2026-03-09T00:00", "acc", "0.52", higher=True),
        ],
        # mix-f: last improvement 03-01, still reporting, but no spend since 03-05.
        "mix-f": [point("2026-03-01T00:00", "loss", "3"), point("2026-03-09T00:00", "loss", "3")],
        # A point in the future (after as_of) is ignored.
        "mix-e": [point("2026-03-10T18:00", "loss", "1")],
    }


def test_experiments_stalled_and_without_progress() -> None:
    report = run(experiment_events(), None, experiment_progress())
    by_name = {f.evidence.keys.get("experiment"): f for f in report.findings}
    assert set(by_name) == {"mix-a", "mix-b", "mix-e"}

    a = by_name["mix-a"]
    assert a.kind == "experiment_stalled"
    # Spend after 03-04 06:00: a05 .. a10 = 6 x 20.00 = 120.00 (the fixed bill and the
    # 13:00 event are out). Span 03-04 06:00 -> 03-10 12:00 = 6.25 days: 120 / 6.25 = 19.20.
    assert (a.cost_so_far, a.cost_per_day_if_left) == ("120.00", "19.20")
    assert a.evidence.event_ids == ["a05", "a06", "a07", "a08", "a09", "a10"]
    assert a.evidence.keys["metric"] == "loss"
    assert a.evidence.keys["best_value"] == "2.40"
    assert a.evidence.keys["last_improvement"] == "2026-03-04T06:00:00+00:00"
    assert (a.window.start, a.window.end) == (date(2026, 3, 4), date(2026, 3, 10))
    assert "6 day(s) ago" in a.title

    b = by_name["mix-b"]
    assert b.kind == "experiment_no_progress"
    # Spend after 03-07 00:00: b07 .. b10 = 4 x 10.00 = 40.00. Span 03-07 00:00 -> 03-10
    # 12:00 = 3.5 days: 40 / 3.5 = 11.428571428571... -> 11.428571429.
    assert (b.cost_so_far, b.cost_per_day_if_left) == ("40.00", "11.428571429")
    assert [d["cost"] for d in days(b)] == ["10.00"] * 4

    e = by_name["mix-e"]
    assert e.kind == "experiment_no_progress"
    # Never reported: all its spend, 5 x 2.00 = 10.00, over 03-06 12:00 -> 03-10 12:00 =
    # 4 days: 2.50 a day.
    assert (e.cost_so_far, e.cost_per_day_if_left) == ("10.00", "2.50")
    assert "ever" in e.title
    # Sorted by cost: 120.00, 40.00, 10.00 (the reserved bill of mix-a: 8 paid, 8 used).
    assert [f.cost_so_far for f in report.findings] == ["120.00", "40.00", "10.00"]
    assert report.total_waste == "170.00"


def test_experiment_policy_overrides() -> None:
    policy = msgspec.convert(
        {
            "min_improvement_pct": "5",
            "check_unreported": False,
            "ignore_experiments": ["mix-b"],
        },
        WastePolicy,
    )
    report = run(experiment_events(), policy, experiment_progress())
    # mix-e never reported -> not checked; mix-b ignored. mix-a: 2.40 is not 5 % better
    # than 2.50 (needs < 2.375), so the last improvement is the first point, 03-02 06:00:
    # a03 .. a10 = 8 x 20.00 = 160.00 over 8.25 days = 19.393939393939... -> 19.393939394.
    # mix-c: acc 0.50 -> 0.52 is 4 % < 5 %: no improvement either. Its last improvements
    # are the first points (loss 03-02, acc 03-05 00:00); it still reports (03-09), so it
    # stopped improving on 03-05: c05 .. c10 = 6 x 2.00 = 12.00 over 5.5 days
    # = 2.181818181818... -> 2.181818182.
    a, c = report.findings
    assert (a.cost_so_far, a.cost_per_day_if_left) == ("160.00", "19.393939394")
    assert a.evidence.keys["best_value"] == "2.50"
    assert (c.cost_so_far, c.cost_per_day_if_left) == ("12.00", "2.181818182")
    assert c.evidence.keys["experiment"] == "mix-c"
    assert c.evidence.keys["metric"] == "acc"

    # idle_days 5: mix-b's last point (03-07 00:00) is within 5 days -> still reporting;
    # its only point (the last improvement) is 3.5 days old >= 3: stopped improving, same
    # spend as before (40.00). mix-e was first seen 03-06 12:00, 4 days before as_of < 5:
    # too new to expect a report.
    policy = WastePolicy(idle_days=5)
    report = run(experiment_events(), policy, experiment_progress())
    kinds = {f.evidence.keys.get("experiment"): f.kind for f in report.findings}
    assert kinds == {"mix-a": "experiment_stalled", "mix-b": "experiment_stalled"}
    assert only(report, "experiment_stalled")[1].cost_so_far == "40.00"


def test_experiment_spend_is_net_of_other_findings() -> None:
    # mix-b also stores a checkpoint past retention (created 02-01, 36 days on 03-09):
    # 100 x 0.005 = 0.50, reported as storage; mix-b stays at 40.00, total 40.50.
    old_checkpoint = ev(
        "b-ck",
        "2026-03-09",
        "storage.checkpoint.gb_day",
        "100",
        experiment="mix-b",
        tags={"data_class": "checkpoint", "created": "2026-02-01"},
    )
    events = [*experiment_events(), old_checkpoint]
    progress = experiment_progress()
    report = run(events, None, {"mix-b": progress["mix-b"]}, window_from=date(2026, 3, 7))
    # (The other experiments get no progress here; only mix-b matters.)
    [b] = [f for f in report.findings if f.evidence.keys.get("experiment") == "mix-b"]
    assert b.kind == "experiment_no_progress"
    assert b.cost_so_far == "40.00"
    assert "b-ck" not in b.evidence.event_ids
    [ck] = only(report, "storage_past_retention")
    assert ck.cost_so_far == "0.50"


def test_share_of_a_day_split_exactly_before_netting() -> None:
    # run-z (never reported) ingests 3 x 4 GB of logs on 03-07 (2.00 each, 6.00) and runs
    # 1 GPU-hour on 03-09 (2.00). Cap 11 GB: excess 1 of 12 -> 6.00 / 12 = 0.50 of log waste,
    # split over the three events as 0.166666667 + 0.166666667 + 0.166666666 (exactly 0.50).
    # run-z: first event 03-07 00:00, no report ever: 8.00 - 0.50 = 7.50 over 03-07 00:00 ->
    # 03-10 12:00 = 3.5 days = 2.142857142857... -> 2.142857143 a day. Together exactly
    # the 8.00 it spent.
    events = [
        ev("z1", "2026-03-07T00:00", "logs.ingest.gb", "4", experiment="run-z"),
        ev("z2", "2026-03-07T01:00", "logs.ingest.gb", "4", experiment="run-z"),
        ev("z3", "2026-03-07T02:00", "logs.ingest.gb", "4", experiment="run-z"),
        ev("z4", "2026-03-09T06:00", "gpu.h100.hour", "1", experiment="run-z"),
    ]
    policy = msgspec.convert({"logs": {"max_ingest_gb_per_day": "11"}}, WastePolicy)
    report = run(events, policy)
    [run_z] = only(report, "experiment_no_progress")
    [logs] = only(report, "log_ingest_over_cap")
    assert (logs.cost_so_far, logs.cost_per_day_if_left) == ("0.50", "0.00")
    assert (run_z.cost_so_far, run_z.cost_per_day_if_left) == ("7.50", "2.142857143")
    assert report.total_waste == "8.00"
    assert allocate(10, [1, 1, 1]) == [4, 3, 3]
    assert allocate(7, [0, 2, 5]) == [0, 2, 5]
    assert allocate(5, [0, 0]) == [0, 0]


def test_experiment_window_start_clips_the_span() -> None:
    # Window from 03-08: mix-a counts a08 .. a10 = 60.00 over 03-08 00:00 -> 03-10 12:00 =
    # 2.5 days = 24.00 a day.
    progress = {"mix-a": experiment_progress()["mix-a"]}
    report = run(experiment_events(), None, progress, window_from=date(2026, 3, 8))
    [a] = only(report, "experiment_stalled")
    assert (a.cost_so_far, a.cost_per_day_if_left) == ("60.00", "24.00")
    assert a.window.start == date(2026, 3, 8)


# --------------------------------------------------------------------------------------
# Quiet project, combined report, edge cases
# --------------------------------------------------------------------------------------


def test_quiet_project_has_no_findings() -> None:
    paid = "gpu.h100.reserved.hour"
    events = [
        ev("p08", "2026-03-08", paid, "8"),
        ev("u08", "2026-03-08T05:00", "gpu.h100.reserved.used.hour", "8"),  # fully used
        ev("g08", "2026-03-08T06:00", "gpu.h100.hour", "10", experiment="run-1"),
        ev("g09", "2026-03-09T06:00", "gpu.h100.hour", "10", experiment="run-1"),
        ev(
            "s09",
            "2026-03-09",
            "storage.hot.gb_day",
            "1000",
            tags={"data_class": "intermediate", "created": "2026-03-01"},
        ),
        ev("x09", "2026-03-09", "network.cross_region.gb", "100", tags={"dataset": "d1"}),
        ev("l09", "2026-03-09", "logs.ingest.gb", "3"),
        ev("r09", "2026-03-09", "logs.retention.gb_day", "3", tags={"created": "2026-03-01"}),
    ]
    progress = {"run-1": [point("2026-03-09T00:00", "loss", "2.1")]}
    policy = msgspec.convert(
        {"checkpoint": {"size_gb": "100"}, "logs": {"max_ingest_gb_per_day": "10"}},
        WastePolicy,
    )
    report = run(events, policy, progress)
    assert report.findings == []
    assert (report.total_waste, report.total_per_day_if_left) == ("0.00", "0.00")
    assert report.policy == policy
    assert (report.window_from, report.window_to) == (W_FROM, W_TO)


def test_combined_report_sorted_by_cost() -> None:
    events = reserved_events() + storage_events() + log_events()
    report = run(events)
    # reserved 16.00, raw cc-2024 3.00, logs past retention 2.00, intermediate 0.50,
    # checkpoint 0.30, raw cc-2025 0.20 -> 22.00.
    assert [f.cost_so_far for f in report.findings] == [
        "16.00",
        "3.00",
        "2.00",
        "0.50",
        "0.30",
        "0.20",
    ]
    assert report.total_waste == "22.00"
    assert report.findings[0].kind == "reserved_idle"


def test_events_outside_the_window_and_default_window() -> None:
    hot = "storage.hot.gb_day"
    tags = {"data_class": "intermediate", "created": "2025-01-01"}
    events = [
        ev("old", "2026-02-08", hot, "1000", tags=tags),  # 30 days before 03-10: outside
        ev("in1", "2026-02-09", hot, "1000", tags=tags),  # first day of the default window
        ev("in2", "2026-03-10", hot, "500", tags=tags),  # today
    ]
    # Default window: 30 days ending today (02-09 .. 03-10).
    report = run(events, window_from=None, window_to=None)
    assert (report.window_from, report.window_to) == (date(2026, 2, 9), date(2026, 3, 10))
    [f] = report.findings
    # 1.00 + 0.50; per day = the rate day 03-09 had nothing -> 0.
    assert (f.cost_so_far, f.cost_per_day_if_left) == ("1.50", "0.00")
    assert f.evidence.event_ids == ["in1", "in2"]
    # A one-day window on today: the rate day is today itself.
    report = run(events, window_from=date(2026, 3, 10))
    [f] = report.findings
    assert (f.cost_so_far, f.cost_per_day_if_left) == ("0.50", "0.50")


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="timezone"):
        find_waste("llm", [], SKUS, None, None, datetime(2026, 3, 10), None, None, "USD")
    with pytest.raises(ValueError, match="after"):
        run([], window_from=date(2026, 3, 10), window_to=date(2026, 3, 9))
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"idle_dayz": 3}, WastePolicy)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"checkpoint": {"size_gb": "1.0000001"}}, WastePolicy)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"idle_days": 0}, WastePolicy)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"time": "2026-03-01T00:00:00Z", "metric": "loss", "value": "NaN"}',
            type=ProgressPoint,
        )
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"time": "2026-03-01T00:00:00", "metric": "loss", "value": 1}', type=ProgressPoint
        )


def test_policy_defaults() -> None:
    policy = msgspec.convert({"retention_days": {"raw": 180}}, WastePolicy)
    assert msgspec.to_builtins(policy) == {
        "usage_skus": {},
        "idle_days": 2,
        "stall_days": 3,
        "min_improvement_pct": "0",
        "check_unreported": True,
        "ignore_experiments": [],
        "retention_days": {"raw": 180, "intermediate": 30, "checkpoint": 14, "other": None},
        "checkpoint": {"size_gb": None, "keep_last": 3, "tolerance_pct": 20},
        "logs": {"max_ingest_gb_per_day": None, "retention_days": 30},
        "rate_days": 7,
    }
