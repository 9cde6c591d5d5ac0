"""The cost-effect report from the cost-effect sums kept at fold time (service/evaluations/
kept_spend.py, service/ledger/effectsums.py): the same report as the finest totals' read
(`service._spend_from_totals`, the read it replaces, kept as the reference) and as the sum over
every logged event, on generated histories across a month's end (hypothesis); and a read whose
work does not grow with the events a day."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainledger.evaluations import kept_spend, service
from trainledger.evaluations.effect import ReportFilter, cost_effect
from trainledger.evaluations.model import EvaluationSettings, ResultsIn
from trainledger.evaluations.service import (
    add_results,
    cost_effect_report,
    evaluation_settings,
    list_results,
    set_evaluation_settings,
)
from trainledger.ledger.effectsums import EFFECT_VERSION
from trainledger.ledger.eventlog import read_log
from trainledger.ledger.folding import settle
from trainledger.ratecards.catalog import RateCards
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import event, sync_client
from tests.integration.evaluations.test_effect_from_totals import CARD
from tests.integration.export.test_focus import ingest

# 30 days that always hold a month's first day, within the results' window (35 days back).
START = datetime.combine(datetime.now(UTC).date() - timedelta(days=31), datetime.min.time(), UTC)
SKUS = ["gpu.h100.hour", "storage.hot.gb_day", "network.cross_region.gb"]
ACCELERATORS = {"gpu.h100.hour"}
EXPERIMENTS = ["base", "a", "b", ""]
EVAL_SETTINGS = EvaluationSettings(baseline="base", benchmarks={"qa": "general", "math": "target"})
_projects = itertools.count()


async def _reference(store: Stores, project: str, filters: ReportFilter) -> bytes:
    """The report summed over every event of the log."""
    last = await store.ledger.last_log_entry(project)
    events = [row async for _, rows in read_log(store, project, last) for row in rows]
    report = cost_effect(
        project,
        "USD",
        await evaluation_settings(store, project),
        events,
        ACCELERATORS,
        await list_results(store, project),
        filters,
    )
    return msgspec.json.encode(report)


async def _from_totals(store: Stores, project: str, filters: ReportFilter) -> bytes:
    """The report as the finest totals' read (the one the cost-effect sums replace) sums it."""
    results = await list_results(store, project)
    settings_now = await evaluation_settings(store, project)
    spend = await service._spend_from_totals(
        store, project, settings_now, results, ACCELERATORS, filters
    )
    assert spend is not None
    report = cost_effect(project, "USD", settings_now, [], ACCELERATORS, results, filters, spend)
    return msgspec.json.encode(report)


def _at(day: int, minute: int) -> str:
    return (START + timedelta(days=day, minutes=minute)).isoformat()


_events = st.lists(
    st.tuples(
        st.integers(0, 29),  # day
        st.integers(0, 24 * 60 - 1),  # minute
        st.sampled_from(SKUS),
        st.sampled_from(EXPERIMENTS),
        st.sampled_from(["pretrain", "eval"]),
        st.sampled_from(["ann", "bo"]),
        st.integers(0, 3000),  # quantity, hundredths
    ),
    min_size=1,
    max_size=30,
)
_results = st.lists(
    st.tuples(
        st.sampled_from(EXPERIMENTS[:3]),
        st.sampled_from(["qa", "math"]),
        st.integers(40, 60),
        st.integers(0, 29),
        st.integers(0, 24 * 60 - 1),
    ),
    max_size=10,
)
_filters = st.one_of(
    st.just(ReportFilter()),
    st.builds(ReportFilter, stage=st.sampled_from(["pretrain", "eval"])),
    st.builds(ReportFilter, owner=st.sampled_from(["ann", "bo"])),
    st.tuples(st.integers(0, 29), st.integers(1, 29)).map(
        lambda d: ReportFilter(
            time_from=START + timedelta(days=d[0]),
            time_to=START + timedelta(days=min(30, d[0] + d[1])),
        )
    ),
    st.tuples(st.integers(0, 29 * 24), st.integers(1, 30 * 24)).map(
        lambda h: ReportFilter(
            stage="eval",
            time_from=START + timedelta(hours=h[0], minutes=7),
            time_to=START + timedelta(hours=h[0] + h[1]),
        )
    ),
)


# Experiments regressed on qa (against base's 50 at the end) after a last good result at a
# drawn time: their rework exposure restarts inside a day, in a month read whole or not.
_restarts = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 28), st.integers(0, 24 * 60 - 1)),
    max_size=2,
    unique_by=lambda r: r[0],
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    events=_events,
    results=_results,
    restarts=_restarts,
    filters=_filters,
    batch=st.integers(1, 10),
)
async def test_the_report_from_the_effect_sums_is_the_reports_before(
    store: Stores,
    events: list[Any],
    results: list[Any],
    restarts: list[Any],
    filters: ReportFilter,
    batch: int,
) -> None:
    project = f"eff{next(_projects)}"
    rows = [
        event(
            f"e{i}",
            f"{q // 100}.{q % 100:02d}",
            sku,
            project=project,
            time=_at(day, minute),
            experiment=experiment,
            stage=stage,
            owner=owner,
        )
        for i, (day, minute, sku, experiment, stage, owner, q) in enumerate(events)
    ]
    for at in range(0, len(rows), batch):
        await ingest(store, rows[at : at + batch], card=CARD if at == 0 else None)
    await set_evaluation_settings(store, project, EVAL_SETTINGS)
    posted = [
        {
            "id": f"r{i}",
            "experiment": experiment,
            "benchmark": benchmark,
            "value": str(value),
            "time": _at(day, minute),
        }
        for i, (experiment, benchmark, value, day, minute) in enumerate(results)
    ]
    if restarts:
        last = {"benchmark": "qa", "time": _at(29, 23 * 60)}
        posted.append({"id": "base-end", "experiment": "base", "value": "50", **last})
        for experiment, day, minute in restarts:
            good = {"benchmark": "qa", "value": "50", "time": _at(day, minute)}
            posted.append({"id": f"{experiment}-good", "experiment": experiment, **good})
            bad = {"benchmark": "qa", "value": "30", "time": _at(29, 23 * 60 + 30)}
            posted.append({"id": f"{experiment}-bad", "experiment": experiment, **bad})
    if posted:
        await add_results(
            store, msgspec.convert({"project": project, "results": posted}, ResultsIn)
        )
    cards = RateCards(store)
    results_now = await list_results(store, project)
    kept = await kept_spend.spend_from_effect_sums(
        store, project, EVAL_SETTINGS, results_now, ACCELERATORS, filters
    )
    assert kept is not None  # the cost-effect sums hold every event: they are what is read
    got = msgspec.json.encode(await cost_effect_report(store, cards, project, filters))
    assert got == await _from_totals(store, project, filters)
    assert got == await _reference(store, project, filters)


async def test_data_folded_before_the_sums_existed_is_read_from_the_totals(
    store: Stores, clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the cost-effect sums do not hold every event (their count short of the folded
    events), the report reads the finest totals, and gives the same answer."""
    await ingest(
        store,
        [event(f"e{d}", "2", time=_at(d, 60), experiment="a") for d in range(0, 30, 3)],
        card=CARD,
    )
    await settle(store, "llm")
    client = sync_client(clean_redis)
    client.hdel(Keys.rollup_count("llm"), EFFECT_VERSION)  # as if folded by an older worker
    client.close()
    read: list[str] = []
    totals_read = service._spend_from_totals

    async def _spy(*args: Any) -> Any:
        read.append("totals")
        return await totals_read(*args)

    monkeypatch.setattr(service, "_spend_from_totals", _spy)
    got = await cost_effect_report(store, RateCards(store), "llm", ReportFilter())
    assert read == ["totals"]
    assert msgspec.json.encode(got) == await _reference(store, "llm", ReportFilter())
    assert got.rows[0].cost == "50.00"  # 10 GPU hours of 2 at 2.50


# --- the work a report does ---------------------------------------------------------------

DAYS = 40  # from 45 days back: at least one whole month, and parts of two others
SPREAD = [("x0", "pretrain"), ("x1", "eval"), ("x2", "pretrain"), ("base", "eval")]


class _Counted:
    """The fields a report's reads of the kept sums return, and the log entries it fetches."""

    def __init__(self, store: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fields = 0
        self.entries = 0
        ledger = store.ledger

        def counting(read: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def wrapped(*args: Any, **kwargs: Any) -> Any:
                replies = await read(*args, **kwargs)
                self.fields += sum(len(r) for r in replies)
                return replies

            return wrapped

        async def entries(*args: Any, **kwargs: Any) -> Any:
            got = await fetch(*args, **kwargs)
            self.entries += len(got)
            return got

        fetch = ledger.entries_by_id
        monkeypatch.setattr(ledger, "totals_hashes", counting(ledger.totals_hashes))
        monkeypatch.setattr(ledger, "totals_fields", counting(ledger.totals_fields))
        monkeypatch.setattr(ledger, "entries_by_id", entries)


async def _history(store: Stores, project: str, per_cell: int, start: datetime) -> None:
    """DAYS days, two batches a day, each of `per_cell` events on every cell of `SPREAD`
    (× two SKUs): the same cells every day, whatever `per_cell`."""
    for day in range(DAYS):
        for half in range(2):
            when = start + timedelta(days=day, hours=12 * half)
            await ingest(
                store,
                [
                    event(
                        f"{project}-{day}-{half}-{k}-{sku}-{n}",
                        "1.5",
                        sku,
                        project=project,
                        time=(when + timedelta(minutes=n % 600)).isoformat(),
                        experiment=experiment,
                        stage=stage,
                        owner="ann",
                    )
                    for k, (experiment, stage) in enumerate(SPREAD)
                    for sku in ("gpu.h100.hour", "storage.hot.gb_day")
                    for n in range(per_cell)
                ],
                card=CARD if day == half == 0 else None,
            )
    await settle(store, project)


async def test_the_report_reads_the_same_fields_whatever_the_events_a_day(
    embedded_valkey: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two projects with the same cells every day, one with 10x the events of the other: the
    report reads the same fields of the kept sums (fewer than the finest totals hold), and a
    regression's restart day is the only day whose log entries it fetches."""
    client = sync_client(embedded_valkey)
    client.flushdb()
    store = Stores.from_url(embedded_valkey)
    start = datetime.combine(
        datetime.now(UTC).date() - timedelta(days=45), datetime.min.time(), UTC
    )
    try:
        for project, per_cell in (("small", 1), ("large", 10)):
            await _history(store, project, per_cell, start)
        counts = {}
        for project in ("small", "large"):
            counted = _Counted(store, monkeypatch)
            report = await cost_effect_report(store, RateCards(store), project, ReportFilter())
            counts[project] = (counted.fields, counted.entries)
            assert msgspec.json.encode(report) == await _reference(store, project, ReportFilter())
        assert counts["small"] == counts["large"]
        days = [d.decode() for d in client.hkeys(Keys.daily("large"))]
        finest = sum(client.hlen(Keys.totals("large", d)) for d in days)
        assert counts["large"][0] < finest / 4  # months read whole, no SKU or tag cells
        assert counts["large"][1] == 0  # no log

        # A regression with its last good checkpoint on day 20: that day's two entries only.
        good = start + timedelta(days=20, hours=13)
        for project in ("small", "large"):
            await set_evaluation_settings(store, project, EVAL_SETTINGS)
            results = [
                ("b", "base", "50", good + timedelta(days=5)),
                ("g", "x0", "50", good),
                ("r", "x0", "40", good + timedelta(days=5)),
            ]
            await add_results(
                store,
                msgspec.convert(
                    {
                        "project": project,
                        "results": [
                            {
                                "id": i,
                                "experiment": e,
                                "benchmark": "qa",
                                "value": v,
                                "time": t.isoformat(),
                            }
                            for i, e, v, t in results
                        ],
                    },
                    ResultsIn,
                ),
            )
        with_rework = {}
        for project in ("small", "large"):
            counted = _Counted(store, monkeypatch)
            report = await cost_effect_report(store, RateCards(store), project, ReportFilter())
            with_rework[project] = (counted.fields, counted.entries)
            assert msgspec.json.encode(report) == await _reference(store, project, ReportFilter())
            row = next(r for r in report.rows if r.experiment == "x0")
            assert row.rework_since == good
        assert with_rework["small"][0] == with_rework["large"][0]
        assert with_rework["small"][1] == with_rework["large"][1] == 2
    finally:
        await store.close()
        client.close()
