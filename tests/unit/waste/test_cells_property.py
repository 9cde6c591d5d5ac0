"""The cell-based waste rules (`report.find_waste_in_units`) against the per-event reference
(`reference.report.find_waste`, the rules as first written), over random event sets.

The units are what the service reads: whole-day cells (`cells.cells_of_rows`) on every day but
the `plan_report` row days, which are read as events. Without a finding that spreads a day's
waste among units (checkpoint growth, log ingest over the cap) the reports are equal, field for
field. With one, only the experiments' figures may move, within the documented bound
(`scan.claim_share`): by at most the experiment's events that such a finding spread waste over.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainledger.ledger.eventlog import LoggedEvent
from trainledger.waste.cells import Unit, cells_of_rows, facts_of_rows, row_unit, unit_of_cell
from trainledger.waste.days import DAY_US
from trainledger.waste.model import CheckpointPolicy, LogPolicy, ProgressPoint, WastePolicy
from trainledger.waste.reference.report import find_waste as reference_find_waste
from trainledger.waste.report import find_waste_in_units, plan_report

from .test_waste import SKUS, _us

BASE = datetime(2026, 3, 1, tzinfo=UTC)
EXPERIMENTS = ["", "", "exp-a", "exp-b"]
TAG_VALUES = {
    "dataset": ["ds1", "ds2"],
    "dest_region": ["us", "eu"],
    "created": ["2026-01-01", "2026-02-25", "2026-03-05", "bad"],
    "reservation": ["gpu.h100.reserved.hour"],
    "data_class": ["checkpoint", "raw", "intermediate", "other", "weird"],
}


@st.composite
def events(draw: st.DrawFn) -> list[LoggedEvent]:
    rows = []
    for n in range(draw(st.integers(0, 30))):
        sku = draw(st.sampled_from(sorted(SKUS)))
        # Days 2026-02-20 .. 2026-03-14: history before the window, the window, the future.
        offset = draw(st.integers(-9 * 24, 13 * 24 + 23)) * 3_600 + draw(st.integers(0, 3_599))
        when = BASE + timedelta(seconds=offset)
        tags = {}
        for name, values in TAG_VALUES.items():
            if draw(st.booleans()):
                tags[name] = draw(st.sampled_from(values))
        quantity = draw(st.integers(0, 50)) * 100_000
        cost = draw(st.sampled_from([0, 1, 7, 1_000_003, quantity * 1_000 + 1]))
        rows.append(
            LoggedEvent(
                f"e{n:03d}",
                _us(when),
                "pretrain",
                draw(st.sampled_from(EXPERIMENTS)),
                "alice",
                sku,
                quantity,
                tags or None,
                cost,
                1,
                SKUS[sku].category,
            )
        )
    return rows


@st.composite
def policies(draw: st.DrawFn, spreading: bool) -> WastePolicy:
    return WastePolicy(
        idle_days=draw(st.integers(1, 4)),
        stall_days=draw(st.integers(1, 4)),
        check_unreported=draw(st.booleans()),
        checkpoint=CheckpointPolicy(size_gb="0.7" if spreading else None, keep_last=1),
        logs=LogPolicy(max_ingest_gb_per_day="0.9" if spreading else None, retention_days=3),
        rate_days=draw(st.integers(1, 7)),
    )


@st.composite
def progress(draw: st.DrawFn) -> dict[str, list[ProgressPoint]]:
    out: dict[str, list[ProgressPoint]] = {}
    for experiment in ("exp-a", "exp-b"):
        points = []
        for _ in range(draw(st.integers(0, 3))):
            seconds = draw(st.integers(-5 * 86_400, 13 * 86_400))
            points.append(
                ProgressPoint(
                    time=BASE + timedelta(seconds=seconds),
                    metric="loss",
                    value=Decimal(draw(st.sampled_from(["2.5", "2.4", "2.6"]))),
                )
            )
        if points:
            out[experiment] = points
    return out


def _units(
    rows: list[LoggedEvent], row_days: frozenset[int], read_from: int, last_day: int
) -> list[Unit]:
    """What the service reads: events on the row days, cells on the other days."""
    kept = [r for r in rows if read_from <= r.epoch_us // DAY_US <= last_day]
    units = [row_unit(r) for r in kept if r.epoch_us // DAY_US in row_days]
    cells = cells_of_rows(r for r in kept if r.epoch_us // DAY_US not in row_days)
    units += [unit_of_cell(k, c.quantity, c.cost, c.count, c.sample) for k, c in cells.items()]
    return units


def _both(
    rows: list[LoggedEvent],
    policy: WastePolicy,
    points: dict[str, list[ProgressPoint]],
    now: datetime,
    window: tuple[date | None, date | None],
) -> tuple[dict[str, Any], dict[str, Any]]:
    expected = reference_find_waste("llm", rows, SKUS, policy, points, now, *window, "USD")
    facts = facts_of_rows(rows)
    plan = plan_report(facts, SKUS, policy, points, now, *window)
    units = _units(rows, plan.row_days, plan.read_from, plan.last_day)
    got = find_waste_in_units("llm", units, facts, plan, SKUS, policy, points, "USD")
    return msgspec.to_builtins(expected), msgspec.to_builtins(got)


_nows = st.integers(0, 13 * 24 * 60).map(lambda m: BASE + timedelta(minutes=m, seconds=7))
_windows = st.sampled_from(
    [
        (None, None),
        (date(2026, 3, 1), date(2026, 3, 10)),
        (date(2026, 3, 4), date(2026, 3, 5)),
        (None, date(2026, 3, 12)),
    ]
)
_settings = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(events(), policies(spreading=False), progress(), _nows, _windows)
def test_cells_report_equals_the_per_event_reference(
    rows: list[LoggedEvent],
    policy: WastePolicy,
    points: dict[str, list[ProgressPoint]],
    now: datetime,
    window: tuple[date | None, date | None],
) -> None:
    expected, got = _both(rows, policy, points, now, window)
    assert got == expected


def _key(finding: dict[str, Any]) -> str:
    return finding["kind"] + msgspec.json.encode(finding["evidence"]["keys"]).decode()


def _nano(text: str) -> int:
    whole, _, frac = text.partition(".")
    sign = -1 if whole.startswith("-") else 1
    return sign * (abs(int(whole)) * 10**9 + int((frac + "0" * 9)[:9]))


@_settings
@given(events(), policies(spreading=True), progress(), _nows, _windows)
def test_cells_report_within_the_documented_bound_when_waste_is_spread(
    rows: list[LoggedEvent],
    policy: WastePolicy,
    points: dict[str, list[ProgressPoint]],
    now: datetime,
    window: tuple[date | None, date | None],
) -> None:
    expected, got = _both(rows, policy, points, now, window)
    want = {_key(f): f for f in expected["findings"]}
    have = {_key(f): f for f in got["findings"]}
    spread_by_experiment: dict[str, int] = {}
    for r in rows:  # the events the spreading findings may have spread waste over
        if r.sku in ("storage.checkpoint.gb_day", "storage.hot.gb_day", "logs.ingest.gb"):
            spread_by_experiment[r.experiment] = spread_by_experiment.get(r.experiment, 0) + 1
    slack = 0
    for key in want.keys() | have.keys():
        a, b = want.get(key), have.get(key)
        kind = (a or b or {})["kind"]
        if not kind.startswith("experiment_"):
            assert a == b
            continue
        bound = spread_by_experiment.get((a or b or {})["evidence"]["keys"]["experiment"], 0)
        slack += bound
        cost_a = _nano(a["cost_so_far"]) if a else 0
        cost_b = _nano(b["cost_so_far"]) if b else 0
        assert abs(cost_a - cost_b) <= bound
        if a and b:
            assert a["title"] == b["title"] and a["window"] == b["window"]
            assert abs(a["evidence"]["event_count"] - b["evidence"]["event_count"]) <= bound
    assert abs(_nano(expected["total_waste"]) - _nano(got["total_waste"])) <= slack
    for name in ("project", "currency", "window_from", "window_to", "as_of", "policy"):
        assert got[name] == expected[name]
