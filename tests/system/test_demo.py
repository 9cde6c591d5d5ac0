"""`trainledger demo` end to end, against real servers.

* Self-contained: `run()` starts its own `trainledger serve` (embedded Valkey in a temporary
  directory) and webhook receiver; the test reads what it printed.
* Against a running service (`ServerThread` over the suite's embedded Valkey): `run_demo()`
  with a receiver the test owns, then the service's state is checked: the three incidents
  are waste findings, every alert reached the receiver exactly once, and the totals equal the
  events priced here, independently, from the rate card with Decimal.
* `--url` mode: a fresh project and rate card, never the `default` card; the webhook is
  removed at the end.

The demo is deterministic apart from dates, so exact figures that do not depend on the
calendar (the idle reservation, the hung experiment, the replayed event count) are asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import httpx
import pytest
import redis
from rich.console import Console
from trainledger.cli.demo import (
    BATCH_EVENTS,
    CRASH,
    DAYS,
    EXAMPLE_CARD,
    HUNG,
    MAIN,
    RESERVED_SKU,
    USAGE_SKU,
    Receiver,
    Scenario,
    add_arguments,
    demo_rate_card,
    generate_events,
    load_example_card,
    run,
    run_demo,
)
from trainledger.cli.demo.replay import schedule
from trainledger.cli.demo.study import (
    BALANCED_MIX,
    BENCHMARKS,
    MATH_MIX,
    MIXES,
    PIPELINES,
    STUDY_TAG,
    TOLERANCE,
    evaluation_results,
    evaluation_settings,
)

from costcore.money import amount_for_people, format_money_for_people
from tests.conftest import ServerThread, make_admin_token

INCIDENTS = {"reserved_idle", "experiment_no_progress", "checkpoint_growth"}
GENERALS = sorted(b for b, (kind, _) in BENCHMARKS.items() if kind == "general")
NANO = Decimal("0.000000001")


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def server(embedded_valkey: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """The app over real HTTP on the suite's embedded Valkey (emptied), loopback allow-listed
    for webhooks (ServerThread's default settings), delivering every 0.2 s."""
    client = redis.Redis.from_url(embedded_valkey)
    client.flushdb()
    client.close()
    monkeypatch.setenv("TRAINLEDGER_WEBHOOK_POLL_S", "0.2")
    thread = ServerThread(embedded_valkey).start()
    try:
        yield thread.base_url, asyncio.run(make_admin_token(embedded_valkey))
    finally:
        thread.stop()


# --- independent pricing ------------------------------------------------------------------


def price_events(
    card: Mapping[str, Any], events: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Decimal], dict[str, str]]:
    """Cost per SKU, and each SKU's category: every event priced on its own (graduated tiers
    on the cumulative quantity of the SKU in the event's calendar month, in posting order),
    rounded half-even to the nano once per event."""
    skus = {s["code"]: s for s in card["skus"]}
    used: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    per_sku: dict[str, Decimal] = defaultdict(Decimal)
    for ev in events:
        sku = skus[ev["sku"]]
        quantity = Decimal(ev["quantity"])
        month = ev["time"][:7]
        if sku.get("tiers"):
            start = used[(ev["sku"], month)]
            cost, floor, left = Decimal(0), Decimal(0), quantity
            for tier in sku["tiers"]:
                ceiling = Decimal(tier["up_to"]) if tier.get("up_to") else None
                room = (ceiling - max(start, floor)) if ceiling is not None else left
                take = max(min(left, room), Decimal(0))
                cost += take * Decimal(tier["unit_price"])
                left -= take
                if ceiling is not None:
                    floor = ceiling
            used[(ev["sku"], month)] = start + quantity
        else:
            cost = quantity * Decimal(sku["unit_price"])
        per_sku[ev["sku"]] += cost.quantize(NANO, rounding=ROUND_HALF_EVEN)
    return dict(per_sku), {code: s["category"] for code, s in skus.items()}


def test_independent_pricing_handles_tiers() -> None:
    # The pricer above is itself checked on a boundary: 100 GB at 0, then 0.09 (egress).
    card = load_example_card()
    egress = [
        {"sku": "network.egress.gb", "quantity": "60", "time": "2026-11-01T00:00:00Z"},
        {"sku": "network.egress.gb", "quantity": "60", "time": "2026-11-02T00:00:00Z"},
        {"sku": "network.egress.gb", "quantity": "60", "time": "2026-12-01T00:00:00Z"},
    ]
    per_sku, _ = price_events(card, egress)
    assert per_sku["network.egress.gb"] == Decimal("1.80")  # 20 GB past the free 100, in Nov


def regression_rows(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The regression rows of the step-8 table: (experiment, benchmark) -> (limit, received),
    each row whole on one line."""
    found = re.findall(
        r"^(\d\d \w{3} \d\d:00)  (\S+) · (\S+) +regressed +(\S+ pt)  \S+ +(\S+) *$",
        text,
        flags=re.MULTILINE,
    )
    rows = {(name, bench): (limit, mark) for _, name, bench, limit, mark in found}
    assert len(rows) == len(found) == text.count("regressed  ")
    return rows


def cost_effect_table(text: str) -> list[str]:
    """The rows of the first cost-effect table in `text`: the lines after its header
    (`experiment  USD ...`) up to the first indented one."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("experiment "))
    rows = []
    for line in lines[start + 1 :]:
        if not line or line.startswith(" "):
            break
        rows.append(line)
    return rows


# --- the scenario --------------------------------------------------------------------------


def test_scenario_is_deterministic_and_inside_the_window() -> None:
    now = datetime.fromisoformat("2026-11-30T23:59:00+00:00")
    sc = Scenario.for_now("llm-7b", "default", now)
    events = generate_events(sc)
    assert events == generate_events(sc)  # seeded
    assert len({e["id"] for e in events}) == len(events)
    times = [datetime.fromisoformat(e["time"].replace("Z", "+00:00")) for e in events]
    assert times == sorted(times)
    # Inside the 35-day deduplication window with a day to spare, and never in the future.
    assert (now - min(times)).days < 34 and max(times) < sc.end <= now
    # The reserved block is billed through the crash; its use stops.
    for day, hour in (CRASH[0], (18, 12)):
        stamp = sc.at(day, hour).strftime("%Y-%m-%dT%H")
        that_hour = {e["sku"] for e in events if e["time"].startswith(stamp)}
        assert RESERVED_SKU in that_hour and USAGE_SKU not in that_hour


# --- end to end ---------------------------------------------------------------------------


def test_self_contained_demo_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(args()) == 0
    out = capsys.readouterr().out
    for heading in (
        "1. Rate card",
        "2. Plan",
        "3. Budgets",
        "4. Webhook",
        "5. Replay",
        "9. Waste",
        "10. Cost and effect",
    ):
        assert heading in out
    # It ends with the cost-effect table (every experiment of the study, one row each, nothing
    # cut off), the winner on cost per point and the rework exposure.
    end = out[out.index("10. Cost and effect") :]
    table = cost_effect_table(end)
    assert [line.split(" ")[0] for line in table] == [*MIXES, *PIPELINES]
    # name, cost, tokens, a change per benchmark, a cost per point per target, the rework
    assert all(len(line.split()) >= 4 + len(BENCHMARKS) + 2 for line in table), table
    assert "…" not in out
    assert end.index("In short") < end.index("winner on cost per point: ")
    assert re.search(r"rework exposure of \S+: [\d,.]+ USD", " ".join(end.split())) is not None
    replayed = re.search(
        r"(\d+) requests of events: ([\d,]+) events accepted, 0 duplicates, 0 rejected", out
    )
    assert replayed is not None
    sc = Scenario.for_now("llm-7b", "default")
    events = generate_events(sc)
    assert int(replayed[2].replace(",", "")) == len(events)
    # Batches of 5,000 events, also ending at each checkpoint; its results follow it.
    requests = schedule(events, evaluation_results(sc), BATCH_EVENTS)
    assert int(replayed[1]) == sum(1 for batch, _ in requests if batch)
    assert int(replayed[1]) < 2 * -(-len(events) // BATCH_EVENTS) + len(requests) // 2 + 1
    posted = re.search(r"(\d+) results at the study's checkpoints, posted in (\d+) requests", out)
    assert posted is not None and int(posted[1]) == len(evaluation_results(sc))
    assert int(posted[2]) == sum(1 for _, results in requests if results)
    # Every incident is named as a waste finding, with a plain-language line.
    for kind in INCIDENTS:
        assert f"{kind}:" in out
    assert out.count("what it means:") >= 3 + len(INCIDENTS)
    # The idle reservation: 2.5 days × 32 GPUs = 1,920 GPU-hours at 4.91625.
    assert "9,439.20 USD so far" in out
    # Money as people read it (grouped, cents, the code after it), the one way everywhere.
    figures = re.findall(r"(\S*\d\S*) USD\b", out)
    assert len(figures) > 20 and any("," in f for f in figures)
    assert all(re.fullmatch(r"<?-?\d{1,3}(,\d{3})*\.\d{2}", f) for f in figures), figures
    assert re.search(r"USD -?\d", out) is None  # not the demo's old "USD 1,234.57"
    # Each recorded alert reached the receiver exactly once, with a valid signature.
    got = re.search(
        r"the\s+receiver\s+got\s+(\d+)\s+messages,\s+(\d+)\s+with\s+a\s+valid\s+signature,"
        r"\s+telling\s+(\d+)\s+distinct\s+alerts\s+\((\d+)\s+in\s+all:[^)]*\);\s+(\d+)\s+alerts",
        out,
        flags=re.DOTALL,
    )
    assert got is not None and int(got[1]) == int(got[2]) > 0
    assert int(got[3]) == int(got[4]) == int(got[5]) >= int(got[1])
    # One row per alert, each marked as received once.
    rows = re.findall(r"^\d\d \w{3} \d\d:00 .*  (\S+) *$", out, flags=re.MULTILINE)
    assert rows == ["once"] * int(got[5])
    # The regression alerts of the math/code mix among them, and no other run's.
    assert regression_rows(out) == {(MATH_MIX, b): ("1.0 pt", "once") for b in GENERALS}
    assert "alerted as it happened: midtrain-mathcode fell past the tolerance on " in " ".join(
        out.split()
    )
    assert " times" not in out
    assert "the receiver" in out and "demo failed" not in out
    # Its last line says how to reach its dashboard (its service stops with it).
    last = " ".join(out.rstrip().splitlines()[-1].split())
    assert last == "run trainledger demo --keep to keep its service running and open its dashboard"


def test_demo_against_a_running_service(server: tuple[str, str]) -> None:
    base_url, token = server
    sc = Scenario.for_now("llm-7b", "default")
    receiver = Receiver().start()
    console = Console(file=io.StringIO(), width=100)
    try:
        outcome = run_demo(base_url, token, sc, receiver, console)
    finally:
        receiver.stop()
    events = outcome.events
    assert outcome.accepted == len(events) and outcome.rejected == 0

    # The three incidents, and nothing else, are waste findings.
    findings = {f["kind"]: f for f in outcome.waste["findings"]}
    assert set(findings) == INCIDENTS
    idle = findings["reserved_idle"]
    assert Decimal(idle["cost_so_far"]) == 1920 * Decimal("4.91625")
    assert [d["day"] for d in idle["evidence"]["days"] if Decimal(d["cost"])] == [
        sc.day(17).isoformat(),
        sc.day(18).isoformat(),
        sc.day(19).isoformat(),
    ]
    hung = findings["experiment_no_progress"]
    assert hung["evidence"]["keys"]["experiment"] == HUNG
    assert Decimal(hung["cost_so_far"]) > 20_000
    growth = findings["checkpoint_growth"]
    assert Decimal(growth["cost_so_far"]) > 0 and Decimal(growth["cost_per_day_if_left"]) > 0
    assert all(f["evidence"]["keys"].get("experiment") != MAIN for f in findings.values())
    assert Decimal(outcome.waste["total_waste"]) == sum(
        Decimal(f["cost_so_far"]) for f in findings.values()
    )

    # Every alert recorded was received exactly once, signed; nothing else was received.
    alert_ids = [a["id"] for a in outcome.alerts]
    assert alert_ids and len(set(alert_ids)) == len(alert_ids)
    # (A batch's crossings of one budget share a message, which lists the lower ones.)
    received = Counter(i for d in receiver.received() for i in d.alert_ids)
    assert received == Counter(alert_ids)
    assert all(d.signed for d in receiver.received())
    kinds = {a["kind"] for a in outcome.alerts}
    # Thresholds are crossed; no forecast alert from the plan's budgets: they forecast by
    # earned value, and its finished stages (forecast = spend) were the false alarms issue 27
    # removed. The two monthly budgets forecast linearly in the month, so theirs follow the
    # calendar: early in a month, its first days' spend can rightly forecast over.
    assert "threshold" in kinds, kinds
    plan_forecasts = [
        a for a in outcome.alerts if a["kind"] == "forecast" and a["period"] == "window"
    ]
    assert plan_forecasts == [], plan_forecasts
    stage_alerts = {(a["scope"].get("stage"), a.get("threshold_pct")) for a in outcome.alerts}
    assert ("pretrain", 50) in stage_alerts and ("quality_scoring", 80) in stage_alerts

    # The totals are the events priced independently from the rate card.
    card = demo_rate_card(load_example_card(EXAMPLE_CARD), sc.start)
    per_sku, categories = price_events(card, events)
    assert "network.egress.gb" not in {e["sku"] for e in events}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
        by_sku = http.get(
            "/v1/costs", params={"project": sc.project, "group_by": "sku", "limit": 1000}
        ).json()
        summary = http.get("/v1/costs/summary", params={"project": sc.project}).json()
        plans = http.get("/v1/plans", params={"project": sc.project}).json()
    ledger = {row["key"]["sku"]: Decimal(row["cost"]) for row in by_sku["rows"]}
    assert ledger == {k: v for k, v in per_sku.items() if k in ledger}
    assert set(per_sku) == set(ledger)
    assert Decimal(summary["total_cost"]) == sum(per_sku.values())
    assert summary["total_events"] == len(events)
    by_category: dict[str, Decimal] = defaultdict(Decimal)
    for code, cost in per_sku.items():
        by_category[categories[code]] += cost
    listed = {b["name"]: Decimal(b["cost"]) for b in summary["by_category"]}
    assert listed == {k: by_category[k] for k in listed}
    assert all(k in listed for k, v in by_category.items() if v)
    # Plan against actual: the same total, and pretraining forecast over its plan.
    status = outcome.status
    assert Decimal(status["actual"]) == sum(per_sku.values())
    pretrain = next(s for s in status["stages"] if s["stage"] == "pretrain")
    assert Decimal(pretrain["cpi"]) < 1 and Decimal(pretrain["variance"]) < 0
    assert len(plans) == 1 and plans[0]["id"] == outcome.plan_id
    assert len(events) == len(generate_events(sc)) and DAYS == 33
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    check_cost_effect(base_url, token, sc, events, per_event_cost(card, events), printed)
    check_regression_alerts(sc, outcome.alerts, receiver.received(), printed)


def check_regression_alerts(
    sc: Scenario,
    alerts: Sequence[Mapping[str, Any]],
    deliveries: Sequence[Any],
    printed: str,
) -> None:
    """The regression alerts: one for each general benchmark of the math/code mix, fired at
    the first checkpoint past the tolerance (re-derived here from the results the demo
    posts) while it still ran, each received once, signed and typed; none for another run;
    each a row of step 8."""
    regressions = [a for a in alerts if a["kind"] == "evaluation_regression"]
    assert {(a["scope"]["experiment"], a["scope"]["benchmark"]) for a in regressions} == {
        (MATH_MIX, b) for b in GENERALS
    }
    assert len(regressions) == len(GENERALS)
    results = evaluation_results(sc)
    baseline = {
        r["benchmark"]: Decimal(r["value"])  # the baseline's last checkpoint: its final scores
        for r in sorted(results, key=lambda r: r["tokens_seen"])
        if r["experiment"] == evaluation_settings()["baseline"]
    }
    planned = evaluation_settings()["planned_tokens"][MATH_MIX]
    for a in regressions:
        fact = a["regression"]
        series = sorted(
            (
                r
                for r in results
                if (r["experiment"], r["benchmark"]) == (MATH_MIX, fact["benchmark"])
            ),
            key=lambda r: r["tokens_seen"],
        )
        first = next(
            r
            for r in series
            if Decimal(r["value"]) - baseline[fact["benchmark"]] < -Decimal(TOLERANCE)
        )
        assert (fact["value"], fact["tokens_seen"]) == (first["value"], first["tokens_seen"])
        assert fact["measured_at"] == first["time"] and fact["tokens_seen"] < planned
        assert Decimal(fact["baseline_value"]) == baseline[fact["benchmark"]]
        assert Decimal(fact["tolerance"]) == Decimal(TOLERANCE)
        assert Decimal(fact["rework_exposure"]) > 0
        # Received exactly once (the caller checked every alert's count), signed, typed.
        got = [d for d in deliveries if d.webhook_id == a["id"]]
        assert len(got) == 1 and got[0].signed
        assert got[0].body["type"] == "evaluation.regression"
        # Its row in step 8: the checkpoint's simulated time, once.
        when = datetime.fromisoformat(fact["measured_at"].replace("Z", "+00:00"))
        row = f"{when:%d %b %H:00}  {MATH_MIX} · {fact['benchmark']} "
        assert any(line.startswith(row) for line in printed.splitlines()), row
        shown = format_money_for_people(
            int(Decimal(fact["rework_exposure"]).scaleb(9)), a["currency"]
        )
        assert f"rework exposure then {shown}" in " ".join(printed.split())
    assert regression_rows(printed) == {(MATH_MIX, b): ("1.0 pt", "once") for b in GENERALS}


def per_event_cost(card: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[Decimal]:
    """Each event's cost, as `price_events` prices it (no tiered SKU is in the study)."""
    skus = {s["code"]: s for s in card["skus"]}
    out = []
    for ev in events:
        sku = skus[ev["sku"]]
        if sku.get("tiers"):
            out.append(Decimal("NaN"))  # not needed: the study uses no tiered SKU
            continue
        cost = Decimal(ev["quantity"]) * Decimal(sku["unit_price"])
        out.append(cost.quantize(NANO, rounding=ROUND_HALF_EVEN))
    return out


def check_cost_effect(
    base_url: str,
    token: str,
    sc: Scenario,
    events: Sequence[Mapping[str, Any]],
    costs: Sequence[Decimal],
    printed: str,
) -> None:
    """The study in the cost-effect report, and the demo's closing lines read from it."""
    key, value = STUDY_TAG
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        report = http.get(
            "/v1/reports/cost-effect", params={"project": sc.project, "tag": f"{key}:{value}"}
        ).json()
    rows = {r["experiment"]: r for r in report["rows"]}
    assert set(rows) == {*MIXES, *PIPELINES}
    # Each row costs exactly its tagged events, priced here.
    study: dict[str, Decimal] = defaultdict(Decimal)
    for ev, cost in zip(events, costs, strict=True):
        if (ev.get("tags") or {}).get(key) == value:
            study[ev["experiment"]] += cost
    assert {n: Decimal(r["cost"]) for n, r in rows.items()} == study
    assert all(r["tokens_seen"] for r in rows.values())
    assert max(r["tokens_seen"] for r in evaluation_results(sc)) == max(
        r["tokens_seen"] for r in rows.values()
    )

    # The winner on cost per point, re-derived from the JSON answer, is the one named.
    targets = [b for b, (kind, _) in BENCHMARKS.items() if kind == "target"]
    cheapest: dict[str, str] = {}
    for b in targets:
        priced = [
            (Decimal(c["cost_per_point"]), r["experiment"])
            for r in report["rows"]
            for c in r["benchmarks"]
            if c["benchmark"] == b and c["cost_per_point"] is not None
        ]
        cheapest[b] = min(priced)[1]
    text = " ".join(printed.split())
    (winner,) = set(cheapest.values())  # the story: one run is cheapest on every target
    assert f"winner on cost per point: {winner}, at " in text
    assert winner == BALANCED_MIX and not rows[winner]["regressions"]
    # The loser's rework exposure, as the report has it, formatted for people.
    exposed = [r for r in report["rows"] if r["rework_exposure"] is not None]
    assert [r["experiment"] for r in exposed] == [MATH_MIX]
    loser = exposed[0]
    nano = int(Decimal(loser["rework_exposure"]).scaleb(9))
    shown = format_money_for_people(nano, report["currency"])
    assert f"rework exposure of {MATH_MIX}: {shown} (" in text
    assert 0 < Decimal(loser["rework_exposure"]) < Decimal(loser["cost"])
    assert set(loser["regressions"]) == {
        b for b, (kind, _) in BENCHMARKS.items() if kind == "general"
    }
    # The table shows every study row with its cost as people read it.
    table = cost_effect_table(printed[printed.index("10. Cost and effect") :])
    assert [line.split(" ")[0] for line in table] == [*MIXES, *PIPELINES]
    for line, name in zip(table, [*MIXES, *PIPELINES], strict=True):
        cost = amount_for_people(rows[name]["cost"], "USD").removesuffix(" USD")
        assert line.split()[1 + (name == report["baseline"])] == cost, line


def test_url_mode_uses_a_fresh_project_and_cleans_up(
    server: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, token = server
    assert run(args("--url", base_url, "--token", token)) == 0
    out = capsys.readouterr().out
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
        projects = http.get("/v1/projects").json()
        cards = http.get("/v1/rate-cards").json()["names"]
        hooks = http.get("/v1/webhooks").json()
        assert len(projects) == 1 and projects[0].startswith("llm-7b-demo-")
        project = http.get(f"/v1/projects/{projects[0]}").json()
    assert "default" not in cards and project["rate_card"] in cards
    assert project["accepted_events"] == len(generate_events(Scenario.for_now("x", "x")))
    assert hooks == []  # the receiver is gone, so is its webhook
    assert f"project {projects[0]}" in out or projects[0] in out
    for kind in INCIDENTS:
        assert f"{kind}:" in out
