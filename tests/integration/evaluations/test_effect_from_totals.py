"""The cost-effect report sums its events from the kept totals, whole days at a time, and
from the log only for the days where a time it reads falls inside (the cost-effect sums:
service/evaluations/kept_spend.py; the finest totals: service.py `_spend_from_totals`): the
same report as the sum over every logged event, on randomized events and results
(regressions with restart points inside days, filters by stage, owner and time, midnight and
not)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from trainledger.evaluations import service
from trainledger.evaluations.effect import ReportFilter, cost_effect
from trainledger.evaluations.model import EvaluationSettings, ResultsIn
from trainledger.evaluations.service import (
    add_results,
    cost_effect_report,
    list_results,
    set_evaluation_settings,
)
from trainledger.ledger.eventlog import read_log
from trainledger.ratecards.catalog import RateCards
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, event
from tests.integration.export.test_focus import ingest

# Recent enough for evaluation times (the events' window: 35 days back), at a midnight.
START = datetime.combine(datetime.now(UTC).date() - timedelta(days=28), datetime.min.time(), UTC)
SKUS = ["gpu.h100.hour", "storage.hot.gb_day", "network.cross_region.gb"]
CARD = {
    **TEST_CARD,
    "skus": [
        {**s, "power_watts": 700} if s["code"] == "gpu.h100.hour" else s  # type: ignore[index]
        for s in TEST_CARD["skus"]  # type: ignore[attr-defined]
    ],
}
EXPERIMENTS = ["base", "a", "b", "c", ""]


async def _reference(store: Stores, filters: ReportFilter) -> bytes:
    """The report as it was summed before: every event of the log."""
    last = await store.ledger.last_log_entry("llm")
    events = [row async for _, rows in read_log(store, "llm", last) for row in rows]
    settings = msgspec.json.decode(
        (await store.evaluations.settings("llm")) or b"{}", type=EvaluationSettings
    )
    report = cost_effect(
        "llm", "USD", settings, events, {"gpu.h100.hour"}, await list_results(store, "llm"), filters
    )
    return msgspec.json.encode(report)


async def _not_kept(*_: object) -> None:
    return None


@pytest.mark.parametrize("sparse", [0.0, 1.0, None], ids=["totals", "by-size", "cost-effect-sums"])
async def test_the_report_from_totals_is_the_report_from_events(
    store: Stores, sparse: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0: every whole day from its totals; 1: the service's rule (these small days: the log);
    # None: the cost-effect sums kept at fold time (kept_spend.py), as the service reads.
    if sparse is not None:  # the finest totals' read, as when the cost-effect sums are short
        monkeypatch.setattr(service, "SPARSE_EVENTS_PER_FIELD", sparse)
        monkeypatch.setattr(service, "spend_from_effect_sums", _not_kept)
    rng = random.Random(19)
    k = 0
    for b in range(25):
        base = START + timedelta(hours=rng.randrange(0, 24 * 20))
        batch = []
        for _ in range(rng.randint(1, 10)):
            k += 1
            batch.append(
                event(
                    f"e{k}",
                    f"{rng.randint(0, 30)}.{rng.randint(0, 99):02d}",
                    rng.choice(SKUS),
                    time=(base + timedelta(minutes=rng.randrange(0, 600))).isoformat(),
                    experiment=rng.choice(EXPERIMENTS),
                    stage=rng.choice(["pretrain", "eval"]),
                    owner=rng.choice(["ann", "bo"]),
                )
            )
        await ingest(store, batch, card=CARD if b == 0 else None)
    await set_evaluation_settings(
        store,
        "llm",
        EvaluationSettings(baseline="base", benchmarks={"qa": "general", "math": "target"}),
    )
    results = []
    for i in range(40):
        experiment = rng.choice(EXPERIMENTS[:4])
        results.append(
            {
                "id": f"r{i}",
                "experiment": experiment,
                "benchmark": rng.choice(["qa", "math"]),
                "value": f"{rng.randint(40, 60)}.{rng.randint(0, 9)}",
                "time": (START + timedelta(minutes=rng.randrange(0, 60 * 24 * 20))).isoformat(),
                "tokens_seen": rng.randint(1, 10**6),
            }
        )
    # Experiment "r": good at noon of day 5, regressed the next day: its rework exposure
    # restarts inside day 5, where only the events after noon count.
    noon = START + timedelta(days=5, hours=12)
    await ingest(
        store,
        [
            event(f"r{h}", "2", time=(noon + timedelta(hours=h)).isoformat(), experiment="r")
            for h in (-6, 6, 30)
        ],
        card=None,
    )
    results += [
        {
            "id": "base-qa",
            "experiment": "base",
            "benchmark": "qa",
            "value": "50",
            "time": (START + timedelta(days=25)).isoformat(),
        },
        {
            "id": "r-good",
            "experiment": "r",
            "benchmark": "qa",
            "value": "50",
            "time": noon.isoformat(),
        },
        {
            "id": "r-bad",
            "experiment": "r",
            "benchmark": "qa",
            "value": "40",
            "time": (noon + timedelta(days=1)).isoformat(),
        },
    ]
    await add_results(store, msgspec.convert({"project": "llm", "results": results}, ResultsIn))
    cards = RateCards(store)
    filters = [
        ReportFilter(),
        ReportFilter(stage="eval"),
        ReportFilter(owner="bo"),
        ReportFilter(time_from=START + timedelta(days=3), time_to=START + timedelta(days=12)),
        ReportFilter(
            stage="pretrain",
            time_from=START + timedelta(days=2, hours=5),
            time_to=START + timedelta(days=9, hours=17, minutes=3),
        ),
        ReportFilter(tags={"team": "x"}),  # read from the log, as before
    ]
    reworked = 0
    for f in filters:
        got = await cost_effect_report(store, cards, "llm", f)
        assert msgspec.json.encode(got) == await _reference(store, f), f
        reworked += sum(1 for r in got.rows if r.rework_since is not None)
    assert reworked  # restart points inside days were exercised
    row = next(
        r
        for r in (await cost_effect_report(store, cards, "llm", filters[0])).rows
        if r.experiment == "r"
    )
    assert row.rework_since == noon and row.rework_exposure == "10.00"  # 2 of its 3 GPU hours
