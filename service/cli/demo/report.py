"""The demo's read-back: where the money went, plan against actual, the alerts (with the hour
each limit was crossed), the waste findings, and the summary line."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from rich.markup import escape

from .costeffect import closing
from .formatting import compact_table, money, num, pct, short_budget
from .receiver import Delivery
from .scenario import CHECKPOINT_GB, DAYS, HEALTHY, KEEP_LAST, MAIN
from .session import DemoSession

MEANING = {
    "reserved_idle": "The reserved block is paid for every hour whether jobs run or not: these "
    "are the GPU-hours paid for and not used (the job died at night and nobody restarted it).",
    "experiment_no_progress": "This experiment kept spending but has reported no progress: a "
    "hung job holding on-demand GPUs long past its planned two days.",
    "experiment_stalled": "This experiment still reports, but its metric stopped improving "
    "while it keeps spending.",
    "checkpoint_growth": "More checkpoint storage than the policy expects (size × keep_last): "
    "old checkpoints are no longer deleted, so the bill grows every day.",
    "storage_past_retention": "Data kept past its class's retention period.",
    "cross_region_repull": "The same dataset copied to the same region again.",
    "log_ingest_over_cap": "Logs ingested above the daily cap.",
    "log_past_retention": "Logs kept past their retention period.",
}


def spend(demo: DemoSession) -> None:
    demo.heading(
        6,
        "Where the money went",
        "GET /v1/costs/summary: exact running totals, each a sum of priced events.",
    )
    summary = demo.call("GET", "/v1/costs/summary", "summary", params=demo.project_q)
    demo.outcome.summary = summary
    table = compact_table("stage", ">USD", ">share", "   category", ">USD ", ">share ")
    stages, cats = summary["by_stage"], summary["by_category"]
    for i in range(max(len(stages), len(cats))):
        s = stages[i] if i < len(stages) else None
        c = cats[i] if i < len(cats) else None
        table.add_row(
            s["name"] if s else "",
            num(s["cost"]) if s else "",
            pct(s["share"]) if s else "",
            "   " + c["name"] if c else "",
            num(c["cost"]) if c else "",
            pct(c["share"]) if c else "",
        )
    demo.console.print(table)
    demo.say(
        f"  total [bold]{money(summary['total_cost'])}[/] from "
        f"{summary['total_events']:,} events; fixed (paid whether used or not) "
        f"{money(summary['fixed_cost'])} = {pct(summary['fixed_share'])}; the dearest day "
        f"{money(summary['peak_daily']['peak'])} against an average of "
        f"{money(summary['peak_daily']['average'])}"
    )
    demo.means(
        "GPUs are most of the bill, and most of that is the reserved block, paid in full "
        "whether jobs run or not; storage, network and logs are small next to it."
    )


def plan_vs_actual(demo: DemoSession) -> None:
    demo.heading(
        7,
        "Plan against actual",
        "GET /v1/plans/{id}/status, by earned value: EV = plan × fraction done; CPI = EV ÷ "
        "actual (below 1: over cost); forecast = actual ÷ fraction done.",
    )
    status = demo.call(
        "GET", f"/v1/plans/{demo.outcome.plan_id}/status", "plan status", params=demo.project_q
    )
    demo.outcome.status = status
    table = compact_table("stage", ">planned", ">actual", ">done", ">CPI", ">forecast", ">variance")
    for s in status["stages"]:
        done = pct(s["fraction_done"]) if s["fraction_done"] is not None else "-"
        variance = Decimal(s["variance"])
        table.add_row(
            s["stage"],
            num(s["planned"]),
            num(s["actual"]),
            done,
            s["cpi"] or "-",
            num(s["forecast_at_completion"]),
            f"[{'red' if variance < 0 else 'green'}]{num(variance)}",
        )
    variance = Decimal(status["variance"])
    table.add_row(
        "[bold]plan (USD)",
        num(status["planned"]),
        num(status["actual"]),
        "",
        "",
        num(status["forecast_at_completion"]),
        f"[bold {'red' if variance < 0 else 'green'}]{num(variance)}",
    )
    demo.console.print(table)
    pre = next(s for s in status["stages"] if s["stage"] == "pretrain")
    demo.means(
        f"pretraining is {pct(pre['fraction_done'])} done but has spent "
        f"{pct(Decimal(pre['actual']) / Decimal(pre['planned']))} of its plan; at that "
        f"efficiency (CPI {pre['cpi']}) it finishes at {money(pre['forecast_at_completion'])}, "
        f"{money(-Decimal(pre['variance']))} over. The idle block and the hung ablation "
        "(step 9) are most of the gap; stages not started yet are forecast at plan."
    )


REGRESSION = "evaluation_regression"


def alerts(demo: DemoSession) -> None:
    demo.heading(
        8,
        "Alerts",
        "Recorded once per budget, period and limit, or per experiment, benchmark and baseline, "
        "and delivered to the webhook. 'crossed' is the simulated hour the spend passed the "
        "limit (USD), or that of the checkpoint whose score fell past the tolerance (points below "
        "the baseline); 'mostly' is the largest cost driver the delivered message names.",
    )
    received: dict[str, list[Delivery]] = {}
    for d in demo.outcome.deliveries:
        for alert_id in d.alert_ids:  # one message tells a batch's crossings of a budget
            received.setdefault(alert_id, []).append(d)
    crossings = _crossing_times(demo)
    rows = sorted(
        demo.outcome.alerts,
        key=lambda a: (crossings.get(a["id"], demo.sc.end), _what(a), a["id"]),
    )
    table = compact_table("crossed", "what", "alert", ">limit", "mostly", "received")
    for a in rows:
        got = received.get(a["id"], [])
        if demo.outcome.webhook_id is None:
            mark = "-"
        elif len(got) == 1:
            mark = "[green]once[/]"
        else:
            mark = f"[red]{len(got)} times[/]"
        drivers = got[0].body.get("data", {}).get("top_drivers", []) if got else []
        top = drivers[0]["name"].split(" / ")[0].rsplit(".", 1)[0] if drivers else ""
        when = crossings.get(a["id"])
        table.add_row(
            f"{when:%d %b %H:00}" if when else "?",
            escape(_what(a)),
            _kind(a),
            _limit(a),
            top,
            mark,
        )
    demo.console.print(table)
    if demo.outcome.webhook_id is not None:
        messages = demo.outcome.deliveries
        told = [i for d in messages for i in d.alert_ids]
        signed = sum(d.signed for d in messages)
        demo.say(
            f"  the receiver got {len(messages)} messages, {signed} with a valid signature, "
            f"telling {len(set(told))} distinct alerts ({len(told)} in all: a batch's "
            f"crossings of one budget share a message); {len(demo.outcome.alerts)} alerts "
            "were recorded (GET /v1/alerts)"
        )
    for d in demo.outcome.deliveries:
        data = d.body.get("data", {})
        if data.get("kind") == "forecast" and data.get("forecast"):
            demo.say(
                f"  forecast, {short_budget(data['budget_name'])}: at this pace "
                f"{money(data['forecast'])} by the end of the period, against "
                f"{money(data['amount'])}"
            )
    for a in rows:
        if a["kind"] == REGRESSION:
            _say_regression(demo, a)
    demo.means(
        "a threshold alert says a budget's spend reached that share of it: data prep and "
        "scoring came in near their plan, pretraining passed half its plan well before half "
        "its tokens, and the forecast alerts say the spend rate would overrun the plan and "
        "the month. A regression alert came as the eval harness posted the checkpoint that "
        "fell past the tolerance, while the run still went on (limit: the points a general "
        "benchmark may fall below the baseline). Monthly rows follow the calendar, so they "
        "change with today's date."
    )


def _what(a: dict[str, Any]) -> str:
    if a["kind"] == REGRESSION:
        return f"{a['scope'].get('experiment', '')} · {a['scope'].get('benchmark', '')}"
    return short_budget(a["budget_name"]) + ("" if a["period"] == "window" else f" {a['period']}")


def _kind(a: dict[str, Any]) -> str:
    if a["kind"] == REGRESSION:
        return "[red]regressed[/]"
    return f"{a['threshold_pct']} %" if a["kind"] == "threshold" else str(a["kind"])


def _limit(a: dict[str, Any]) -> str:
    """A budget's limit in the currency; a regression's tolerance in points."""
    if a["kind"] == REGRESSION:
        return f"{a['regression']['tolerance']} pt"
    return num(a["limit"], a.get("currency") or "USD")


def _say_regression(demo: DemoSession, a: dict[str, Any]) -> None:
    r = a["regression"]
    tokens = Decimal(r["tokens_seen"]) / 1_000_000_000 if r.get("tokens_seen") else None
    demo.say(
        f"  regression, {escape(_what(a))}: {r['value']} against {r['baseline_value']} for "
        f"the baseline {escape(r['baseline'])}, a change of {Decimal(r['gain']):+}, past the "
        f"tolerance of {r['tolerance']} points"
        + (f", after {tokens:.1f}B tokens" if tokens is not None else "")
        + f"; rework exposure then {money(r['rework_exposure'], a['currency'])}"
    )


def _crossing_times(demo: DemoSession) -> dict[str, datetime]:
    """The simulated hour each threshold or forecast limit was passed: the first hour the
    cumulative spend in the alert's scope and period reached it, from the hourly totals."""
    report = demo.call(
        "GET",
        "/v1/costs",
        "hourly costs",
        params={
            **demo.project_q,
            "group_by": "stage",
            "granularity": "hour",
            "limit": 10_000,
            "from": demo.sc.day(0).isoformat(),
            "to": demo.sc.day(DAYS).isoformat(),
        },
    )
    hourly: list[tuple[datetime, str, Decimal]] = []
    for row in report["rows"]:
        stamp = datetime.strptime(row["key"]["period"][:13], "%Y-%m-%dT%H")
        hourly.append((stamp.replace(tzinfo=UTC), row["key"]["stage"], Decimal(row["cost"])))
    hourly.sort(key=lambda r: r[0])
    budgets = {
        b["id"]: b for b in demo.call("GET", "/v1/budgets", "budgets", params=demo.project_q)
    }
    out: dict[str, datetime] = {}
    for a in demo.outcome.alerts:
        if a["kind"] == REGRESSION:  # the time of the checkpoint that fell past the tolerance
            out[a["id"]] = _when(a["regression"]["measured_at"])
            continue
        budget = budgets.get(a.get("budget_id"))
        if budget is None or a["kind"] == "growth":
            continue
        stage = a["scope"].get("stage")
        limit = Decimal(a["limit"])
        total = Decimal(0)
        for stamp, row_stage, cost in hourly:
            if stage is not None and row_stage != stage:
                continue
            if a["period"] == "window":
                start, end = _when(budget["window_start"]), _when(budget["window_end"])
                if not start <= stamp < end:
                    continue
            elif stamp.strftime("%Y-%m") != a["period"]:
                continue
            total += cost
            if total >= limit if a["kind"] == "threshold" else total > limit:
                out[a["id"]] = stamp
                break
    return out


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def waste(demo: DemoSession) -> None:
    demo.heading(
        9,
        "Waste",
        "GET /v1/reports/waste: rules over the accepted events and the experiments' progress; "
        "no cost is counted in two findings.",
    )
    policy = {"checkpoint": {"size_gb": str(CHECKPOINT_GB), "keep_last": KEEP_LAST}}
    demo.call("PUT", "/v1/reports/waste/policy", "waste policy", params=demo.project_q, json=policy)
    demo.say(
        f"  PUT /v1/reports/waste/policy: a checkpoint is {CHECKPOINT_GB} GB and the last "
        f"{KEEP_LAST} are kept (defaults: progress every 2 days, improvement within 3)"
    )
    report = demo.call(
        "GET",
        "/v1/reports/waste",
        "waste report",
        # Up to the last simulated day: figures do not move with the time of day.
        params={
            **demo.project_q,
            "from": demo.sc.day(0).isoformat(),
            "to": demo.sc.day(DAYS - 1).isoformat(),
        },
    )
    demo.outcome.waste = report
    for i, f in enumerate(report["findings"], 1):
        window = f["window"]
        demo.say(
            f"\n  [bold red]{i}. {f['kind']}[/]: {escape(f['title'])}\n"
            f"     [bold]{money(f['cost_so_far'])}[/] so far ({window['start']} .. "
            f"{window['end']}), {money(f['cost_per_day_if_left'])} a day if left alone"
        )
        demo.say(f"     [bold green]what it means:[/] {MEANING.get(f['kind'], '')}")
        demo.say(f"     [bold]what to do:[/] {escape(f['action'])}")
    flagged = {f["evidence"]["keys"].get("experiment") for f in report["findings"]}
    fine = [e for e in (MAIN, HEALTHY) if e not in flagged]
    demo.say(
        f"\n  total waste [bold]{money(report['total_waste'])}[/], "
        f"{money(report['total_per_day_if_left'])} a day if nothing changes. Not flagged: "
        + ", ".join(fine)
        + ": they reported a falling eval loss, or finished."
    )


def wrap_up(demo: DemoSession) -> None:
    demo.console.print()
    demo.console.rule("[bold]In short", align="left")
    waste = Decimal(demo.outcome.waste.get("total_waste", "0"))
    total = Decimal(demo.outcome.summary.get("total_cost", "0"))
    share = waste / total * 100 if total else Decimal(0)
    demo.say(
        f"  {money(total)} spent in {DAYS} days, {money(waste)} of it ({share:.1f} %) waste. "
        "The ledger priced every event exactly, alerted as budgets were crossed, showed "
        "pretraining heading over plan, and named the three incidents with what each costs; "
        "the study's table says what each point of a benchmark cost:"
    )
    closing(demo)
