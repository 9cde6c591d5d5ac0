"""Review reads against history (issue 26): `python -m bench.reviews [--sizes 10000,100000]`.

One project per size, loaded through the real ingest path in-process (bench/dataset.py:
decode, `Ingestor.ingest`, the background fold; 5,000-event batches in time order over
60 days, 12 experiments x 20 SKUs x 6 stages, 4 owners, `BENCH_CARD`'s 20 SKUs of which 4
are graduated). Each read runs in-process against that embedded Valkey, `--reps` times, and
the median is shown in milliseconds, with the growth per 10x of history beside each row:

* "before" rows run the algorithm the service used before this change (every log entry
  decoded: `read_log`, then the same per-event code: `rows_of_batch`, `counters_for` and
  `daily_for`, `burn_down_points`), kept here as the reference;
* "after" rows call the service's code as it is now (`FocusExport.rows` over the log index,
  `budgets.spend.counters_now` and `spend_by_day` over the kept totals);
* the cost-effect report: before, `cost_effect` over every logged event; "finest totals",
  the read it had until the cost-effect sums (`_spend_from_totals`: the finest totals a day
  at a time); after, `cost_effect_report` (the cost-effect sums kept at fold time, whole
  months at once); and again with a regression's restart day (read from the log);
* the regression check: `report_results` (`POST /v1/evaluations`) of a result that regresses
  a general benchmark not fired yet, then the same batch again (nothing new to fire);
* the waste report: before, the per-event reference rules (`waste.reference`) over every
  logged event; after, `waste_report` over the fold's day cells (`wcell`), the facts
  (`wfacts`) and the few row days it reads as events; the dashboard calls the same report.

Also printed: a fresh 5,000-event batch's ingest at each size (the fold's added index work
is printed beside it: one entry summed without and with its index fields), and Valkey memory
per stored event, the log and tier indexes beside the log.
Times are this machine's, under whatever else runs on it; the ratios are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from trainledger.auth.model import Principal
from trainledger.budgets.firing import day_field, spend_field
from trainledger.budgets.model import BudgetIn, counters_for, daily_for, new_budget, shown_period
from trainledger.budgets.spend import counters_now, spend_by_day
from trainledger.dashboard.series import burn_down_of_days, burn_down_points
from trainledger.evaluations.effect import ReportFilter, cost_effect
from trainledger.evaluations.model import EvaluationSettings, ResultsIn
from trainledger.evaluations.service import (
    _spend_from_totals,
    cost_effect_report,
    evaluation_settings,
    list_results,
    report_results,
    set_evaluation_settings,
)
from trainledger.events.decoding import MSGPACK, decode_events
from trainledger.export.pricing import LogPricing
from trainledger.export.stream import _window_us, prepare_export, rows_of_batch
from trainledger.ingest.service import Ingestor
from trainledger.ledger.eventlog import decode_log_entry, read_log
from trainledger.ledger.folding import settle, sums_of_log
from trainledger.projects.service import project_catalog
from trainledger.ratecards.catalog import RateCards
from trainledger.stores import Stores
from trainledger.waste.reference.report import find_waste as reference_find_waste
from trainledger.waste.service import waste_policy, waste_report

from bench import dataset
from bench.common import EventFactory, Workload

WORKLOAD = Workload(experiments=12, skus=20, stages=6, owners=4, days=60)
_ADMIN = Principal("bench", "admin", None, "bench")


async def _median_ms(fn: Callable[[], Awaitable[Any]], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def _measure(url: str, events: int, reps: int, before: bool) -> dict[str, float]:
    store = Stores.from_url(url)
    cards = RateCards(store)
    project = WORKLOAD.project
    out: dict[str, float] = {}
    try:
        await settle(store, project)
        days = sorted(await store.ledger.daily_costs(project))
        mid = datetime.strptime(days[len(days) // 2], "%Y%m%d").replace(tzinfo=UTC)
        window = (mid, mid + timedelta(days=1))

        async def export_before() -> int:
            export = await prepare_export(store, cards, project)
            pricing, n = LogPricing(export.catalog), 0
            lo, hi = _window_us(window[0]), _window_us(window[1])
            async for _, batch in read_log(store, project, export.last_entry):
                n += sum(1 for _ in rows_of_batch(export.context, pricing, batch, lo, hi))
            return n

        async def export_after() -> int:
            export = await prepare_export(store, cards, project)
            return len([r async for r in export.rows(*window)])

        async def export_hourly() -> int:
            export = await prepare_export(store, cards, project)
            return len(b"".join([c async for c in export.csv_chunks(*window, granularity="hour")]))

        rows = await export_after()
        out["(rows of that day's export)"] = float(rows)
        if before:
            assert await export_before() == rows
            out["export one day, before"] = await _median_ms(export_before, reps)
        out["export one day, after"] = await _median_ms(export_after, reps)
        out["(bytes of that day's hourly export)"] = float(await export_hourly())
        out["export one day per hour (granularity=hour)"] = await _median_ms(export_hourly, reps)

        budget = new_budget(
            msgspec.convert(
                {
                    "project": project,
                    "name": "b",
                    "amount": "1000",
                    "scope": {"experiment": "exp-003"},
                },
                BudgetIn,
            )
        )

        async def budget_before() -> dict[str, int]:
            last = await store.ledger.last_log_entry(project)
            spend: dict[str, int] = {}
            async for _, rows in read_log(store, project, last):
                batch = [(r.event(project), r.epoch_us, r.category, r.cost_nano) for r in rows]
                for (_, period), (_, _, d) in counters_for([budget], batch).items():
                    spend[spend_field(budget.id, period)] = (
                        spend.get(spend_field(budget.id, period), 0) + d
                    )
                for (_, day), d in daily_for([budget], batch).items():
                    spend[day_field(budget.id, day)] = d
            return spend

        async def budget_after() -> dict[str, int]:
            counted = await counters_now(store, budget)
            assert counted is not None
            return counted[1]

        if before:
            before_spend, after_spend = await budget_before(), await budget_after()
            assert before_spend == after_spend, (before_spend, after_spend)
            out["create_budget counters, before"] = await _median_ms(budget_before, reps)
        out["create_budget counters, after"] = await _median_ms(budget_after, reps)

        now = datetime.now(UTC)
        bounds = shown_period(budget, now)

        async def burn_before() -> list[tuple[datetime, str]]:
            last = await store.ledger.last_log_entry(project)
            priced = [
                (r.event(project), r.category, r.cost_nano)
                async for _, rows in read_log(store, project, last)
                for r in rows
            ]
            return burn_down_points(budget, bounds.start, bounds.end, now, priced)

        async def burn_after() -> list[tuple[datetime, str]]:
            by_day = await spend_by_day(store, budget, bounds.start, bounds.end)
            return burn_down_of_days(bounds.start, bounds.end, now, by_day)

        if before:
            assert await burn_before() == await burn_after()
            out["budget panel burn-down, before"] = await _median_ms(burn_before, reps)
        out["budget panel burn-down, after"] = await _median_ms(burn_after, reps)

        waste_now = datetime.now(UTC)

        async def waste() -> bytes:
            report = await waste_report(store, cards, project, None, None, waste_now)
            return msgspec.json.encode(report)

        async def waste_before() -> bytes:
            _, catalog = await project_catalog(store, cards, project)
            assert catalog is not None
            skus = {}
            for i in range(len(catalog.history.versions)):
                skus.update(catalog.history.priced(i))
            last = await store.ledger.last_log_entry(project)
            events = [row async for _, rows in read_log(store, project, last) for row in rows]
            policy = await waste_policy(store, project)
            report = reference_find_waste(
                project, events, skus, policy, {}, waste_now, None, None, catalog.currency or ""
            )
            return msgspec.json.encode(report)

        async def effect() -> bytes:
            return msgspec.json.encode(
                await cost_effect_report(store, cards, project, ReportFilter())
            )

        async def effect_before() -> bytes:
            _, catalog = await project_catalog(store, cards, project)
            assert catalog is not None
            accelerators = _accelerators(catalog)
            last = await store.ledger.last_log_entry(project)
            events = [row async for _, rows in read_log(store, project, last) for row in rows]
            settings = await evaluation_settings(store, project)
            results = await list_results(store, project)
            report = cost_effect(
                project, catalog.currency, settings, events, accelerators, results, ReportFilter()
            )
            return msgspec.json.encode(report)

        async def effect_from_totals() -> bytes:
            _, catalog = await project_catalog(store, cards, project)
            assert catalog is not None
            accelerators = _accelerators(catalog)
            settings = await evaluation_settings(store, project)
            results = await list_results(store, project)
            filters = ReportFilter()
            spend = await _spend_from_totals(
                store, project, settings, results, accelerators, filters
            )
            report = cost_effect(
                project, catalog.currency, settings, [], accelerators, results, filters, spend
            )
            return msgspec.json.encode(report)

        if before:
            assert await waste_before() == await waste()
            out["waste report, before (whole log)"] = await _median_ms(
                waste_before, max(1, reps // 2)
            )
        out["waste report, after (cells)"] = await _median_ms(waste, reps)
        if before:
            assert await effect_before() == await effect()
            out["cost-effect report, before"] = await _median_ms(effect_before, max(1, reps // 2))
        assert await effect_from_totals() == await effect()
        out["cost-effect report, finest totals (the read replaced)"] = await _median_ms(
            effect_from_totals, max(1, reps // 2)
        )
        out["cost-effect report, after"] = await _median_ms(effect, max(1, reps // 2))
        out["(fields of kept sums the cost-effect report reads)"] = float(
            await _fields_read(store, effect)
        )
        out["(fields the finest totals' read of it read)"] = float(
            await _fields_read(store, effect_from_totals)
        )
        out.update(await _regression_check(store, cards, mid, reps))
        assert await effect_from_totals() == await effect()  # with a rework restart day
        out["cost-effect report with a restart day, finest totals"] = await _median_ms(
            effect_from_totals, max(1, reps // 2)
        )
        out["cost-effect report with a restart day, after"] = await _median_ms(
            effect, max(1, reps // 2)
        )

        factory = EventFactory(WORKLOAD, tag="zz")
        ingestor = Ingestor(store, cards, dedup_window_days=WORKLOAD.days + 2)

        async def ingest_batch() -> None:
            body = msgspec.msgpack.encode(factory.batch(int(time.time() * 1000) % 10**8, 5_000))
            items, _ = decode_events(body, MSGPACK)
            await ingestor.ingest(items, _ADMIN)

        out["ingest a fresh 5,000-event batch"] = await _median_ms(ingest_batch, reps)
        await settle(store, project)
    finally:
        await store.close()
    return out


async def _fields_read(store: Stores, read: Callable[[], Awaitable[Any]]) -> int:
    """The hash fields of kept sums (totals, roll-ups, cost-effect sums) `read` gets back."""
    ledger, counted = store.ledger, [0]
    originals = {name: getattr(ledger, name) for name in ("totals_hashes", "totals_fields")}

    def counting(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            replies = await method(*args, **kwargs)
            counted[0] += sum(len(r) for r in replies)
            return replies

        return wrapped

    try:
        for name, method in originals.items():
            setattr(ledger, name, counting(method))
        await read()
    finally:
        for name in originals:
            delattr(ledger, name)
    return counted[0]


def _accelerators(catalog: Any) -> set[str]:
    return {
        code
        for i in range(len(catalog.history.versions))
        for code, sku in catalog.history.priced(i).items()
        if sku.power_watts is not None
    }


async def _regression_check(
    store: Stores, cards: RateCards, mid: datetime, reps: int
) -> dict[str, float]:
    """`POST /v1/evaluations`'s use case (`report_results`) with a result that regresses a
    general benchmark not fired yet (so the check reads the report, with exp-001's restart
    day, noon of the middle day, from the log), and the same batch again (nothing new: the
    check reads the results only)."""
    project = WORKLOAD.project
    rep = itertools.count()
    settings = EvaluationSettings(baseline="exp-000", benchmarks={})

    def batch(n: int) -> ResultsIn:
        benchmark = f"qa{n}"
        good, bad = mid + timedelta(hours=12, minutes=7), mid + timedelta(days=3)
        rows = [
            ("exp-000", "50", bad),
            ("exp-001", "50", good),
            ("exp-001", "40", bad),
        ]
        return msgspec.convert(
            {
                "project": project,
                "results": [
                    {
                        "id": f"{benchmark}-{i}",
                        "experiment": e,
                        "benchmark": benchmark,
                        "value": v,
                        "time": t.isoformat(),
                    }
                    for i, (e, v, t) in enumerate(rows)
                ],
            },
            ResultsIn,
        )

    times, again = [], []
    for _ in range(reps):
        n = next(rep)
        settings.benchmarks[f"qa{n}"] = "general"
        await set_evaluation_settings(store, project, settings)
        alerts = await store.evaluations.fired_regressions(project)
        t0 = time.perf_counter()
        await report_results(store, cards, batch(n))
        times.append((time.perf_counter() - t0) * 1000)
        assert len(await store.evaluations.fired_regressions(project)) == len(alerts) + 1
        t0 = time.perf_counter()
        await report_results(store, cards, batch(n))
        again.append((time.perf_counter() - t0) * 1000)
    return {
        "POST of results that fires a regression (the check's report)": statistics.median(times),
        "POST of the same results again (nothing new)": statistics.median(again),
    }


async def _fold_cost(url: str, reps: int) -> tuple[float, float]:
    """ms to sum one 5,000-event entry without and with its log index fields."""
    store = Stores.from_url(url)
    try:
        page = await store.ledger.log_entries(WORKLOAD.project, count=20)
    finally:
        await store.close()
    coded = [decode_log_entry(blob) for _, blob in page]
    entries = [e for e in coded if e is not None]
    ids = [entry_id for entry_id, _ in page]

    without, with_index = [], []
    for _ in range(reps * 5):  # interleaved: the machine's load falls on both alike
        for with_ids, times in ((False, without), (True, with_index)):
            t0 = time.perf_counter()
            sums_of_log(entries, ids if with_ids else ())
            times.append((time.perf_counter() - t0) * 1000 / len(entries))
    return statistics.median(without), statistics.median(with_index)


def _growth(sizes: list[int], values: list[float | None]) -> str:
    """The growth per 10x of history between successive sizes: (b / a) ** (1 / log10(nb / na))."""
    ratios = []
    for (na, a), (nb, b) in itertools.pairwise(zip(sizes, values, strict=True)):
        ratios.append(f"{(b / a) ** (1 / math.log10(nb / na)):.1f}x" if a and b else "-")
    return " / ".join(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--no-before", action="store_true", help="skip the reference (pre-change) reads"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    table: dict[str, list[float | None]] = {}
    memory: list[tuple[int, float, float]] = []  # events, log and indexes bytes per event
    fold: tuple[float, float] | None = None
    for n in sizes:
        t0 = time.perf_counter()
        ds = dataset.get_dataset(n, WORKLOAD)
        print(f"# {n:,} events loaded in {time.perf_counter() - t0:.1f} s", flush=True)
        figures = asyncio.run(_measure(ds.url, n, args.reps, not args.no_before))
        for name, value in figures.items():
            table.setdefault(name, []).append(value)
        parts = dataset.structure_bytes(ds.url, WORKLOAD.project)
        memory.append(
            (n, parts.get("log", 0) / n, (parts.get("logix", 0) + parts.get("tierix", 0)) / n)
        )
        if fold is None:
            fold = asyncio.run(_fold_cost(ds.url, args.reps))
        dataset.close_all()
    print()
    print("| read (median ms) | " + " | ".join(f"{n:,}" for n in sizes) + " | growth per 10x |")
    print("|---|" + "---:|" * len(sizes) + "---|")
    for name, values in table.items():
        cells = " | ".join(f"{v:,.1f}" if v is not None else "-" for v in values)
        print(f"| {name} | {cells} | {_growth(sizes, values)} |")
    print()
    for n, log_b, index_b in memory:
        print(f"{n:,} events: log {log_b:.1f} B/event, log and tier indexes {index_b:.2f} B/event")
    if fold is not None:
        print(
            f"fold of one 5,000-event entry: {fold[0]:.2f} ms without the index fields, "
            f"{fold[1]:.2f} ms with them"
        )


if __name__ == "__main__":
    main()
