"""The demo's first steps: what goes into the ledger before any usage — the rate card, the
plan, the budgets and the webhook to the local receiver."""

from __future__ import annotations

from decimal import Decimal

from rich.markup import escape

from .formatting import compact_table, money, num, short_budget
from .scenario import (
    DAYS,
    GPUS_PER_NODE,
    NODES,
    PLAN_STAGES,
    PLANNED_MFU,
    RESERVED_SKU,
    USAGE_SKU,
    budget_bodies,
    demo_rate_card,
    plan_body,
)
from .session import DemoSession


def intro(demo: DemoSession) -> None:
    sc = demo.sc
    demo.say(
        f"[bold]trainledger demo[/]: {DAYS} simulated days ({sc.day(0)} .. "
        f"{sc.day(DAYS - 1)}) of a 7B pretraining run on {NODES} nodes × {GPUS_PER_NODE} "
        f"H100, project [cyan]{sc.project}[/], replayed into {demo.base_url}"
    )


def rate_card(demo: DemoSession) -> None:
    demo.heading(
        1,
        "Rate card",
        "Every event is priced with the card in effect at its own time; this one holds public "
        "list prices (GPUs, storage tiers, transfer, inference, logs, people), sources named.",
    )
    card = demo_rate_card(demo.example_card, demo.sc.start)
    demo.outcome.card = card
    version = demo.call("PUT", f"/v1/rate-cards/{demo.sc.card}", "rate card", json=card)
    if demo.sc.card != "default":
        demo.call(
            "PUT",
            f"/v1/projects/{demo.sc.project}",
            "project",
            json={"rate_card": demo.sc.card},
        )
    demo.say(
        f"  PUT /v1/rate-cards/{demo.sc.card} -> version {version['version']}: "
        f"{len(card['skus'])} SKUs in {card['currency']}"
    )
    if len(card["skus"]) > len(demo.example_card["skus"]):
        demo.say(
            f"  (the example rate card plus [cyan]{USAGE_SKU}[/] at 0: the scheduler "
            "posts there the reserved GPU-hours jobs use, so paid can be told from used)"
        )
    prices = {s["code"]: Decimal(s["unit_price"]) for s in card["skus"]}
    demo.say(
        f"  e.g. H100 on demand {money(prices['gpu.h100.hour'])} per GPU-hour; reserved "
        f"{money(prices[RESERVED_SKU])}, paid whether used or not; checkpoint storage "
        f"{money(prices['storage.checkpoint.gb_day'] * 1000)} per TB-day"
    )


def plan(demo: DemoSession) -> None:
    demo.heading(
        2,
        "Plan",
        "What the run should cost before it spends. Pretraining is sized in model terms: "
        "FLOPs = 6 × parameters × tokens; GPU-hours = FLOPs ÷ (peak FLOP/s × MFU) ÷ 3600.",
    )
    record = demo.call("POST", "/v1/plans", "plan", json=plan_body(demo.sc))
    demo.outcome.plan_id = record["id"]
    est = record["estimate"]
    table = compact_table("stage", "what", ">GPU-hours", ">days", ">USD (with 10 %)")
    for stage in est["stages"]:
        days = "whole window"
        if stage["start_day"] is not None:
            days = f"{Decimal(stage['start_day']):g} – {Decimal(stage['end_day']):g}"
        table.add_row(
            stage["stage"],
            stage["label"] or "",
            f"{Decimal(stage['accelerator_hours']):,.0f}",
            days,
            num(stage["total"]),
        )
    table.add_row(
        "[bold]plan",
        "8 weeks from day 0",
        f"{Decimal(est['accelerator_hours']):,.0f}",
        "",
        f"[bold]{num(est['total'])}",
    )
    demo.console.print(table)
    der = next(s["derivation"] for s in est["stages"] if s["stage"] == "pretrain")
    hours = Decimal(der["accelerator_hours"])
    demo.say(
        f"  pretrain: 6 × 7e9 parameters × 1e12 tokens = {Decimal(der['flops']):.2e} FLOPs; "
        f"÷ (989 TFLOP/s × {PLANNED_MFU} MFU) = {hours:,.0f} GPU-hours = "
        f"{hours / (NODES * GPUS_PER_NODE * 24):.1f} days on {NODES * GPUS_PER_NODE} GPUs"
    )
    peak = est["peak"]
    demo.say(
        f"  energy {Decimal(est['energy_kwh']):,.0f} kWh "
        f"({Decimal(est['emissions_kg_co2e']) / 1000:,.1f} t CO2e on the US grid); "
        f"peak {money(peak['peak_daily'])} a day against an average of "
        f"{money(peak['average_daily'])}"
    )
    demo.say(
        f"  POST /v1/plans -> {record['id']}, with {len(record['budget_ids'])} budgets over "
        "its window: the whole plan (with a forecast alert) and one per stage"
    )


def budgets(demo: DemoSession) -> None:
    demo.heading(
        3,
        "Budgets",
        "Each threshold alerts once per period, decided in the same atomic step that adds a "
        "batch; a forecast alert fires when the spend projected to the period's end passes "
        "the amount.",
    )
    for body in budget_bodies(demo.sc):
        demo.call("POST", "/v1/budgets", "budget", json=body)
    table = compact_table("budget", "scope", "period", ">USD", "alerts at")
    order = ["plan 7b-base", *(f"plan 7b-base / {s}" for s in PLAN_STAGES)]
    listed = demo.call("GET", "/v1/budgets", "budgets", params=demo.project_q)
    listed.sort(key=lambda b: (order.index(b["name"]) if b["name"] in order else 99, b["name"]))
    for b in listed:
        scope = ", ".join(f"{k}={v}" for k, v in b.get("scope", {}).items()) or "project"
        alerts = "/".join(str(t) for t in b.get("thresholds", [])) + " %"
        if b.get("forecast"):
            alerts += " + forecast"
        period = "plan window" if b["period"] == "window" else b["period"]
        table.add_row(short_budget(b["name"]), scope, period, num(b["amount"]), alerts)
    demo.console.print(table)
    demo.say("  (the two monthly budgets are ours: POST /v1/budgets; the rest came with the plan)")


def webhook(demo: DemoSession) -> None:
    demo.heading(
        4,
        "Webhook",
        "Alerts are delivered durably (retries, dead letters), signed per Standard Webhooks.",
    )
    if demo.receiver is None:
        demo.say("  no local receiver: alerts are read from GET /v1/alerts only")
        return
    response = demo.http.post(
        "/v1/webhooks",
        json={
            "url": demo.receiver.url,
            "format": "standard",
            "projects": [demo.sc.project],
            "description": "trainledger demo receiver",
        },
    )
    if response.status_code != 201:
        try:
            detail = str(response.json().get("detail", ""))
        except ValueError:
            detail = response.text[:300]
        demo.say(
            f"  [yellow]the service refused the local receiver {demo.receiver.url}[/] "
            f"({response.status_code}: {escape(detail)})."
        )
        demo.say(
            "  A service sends plain http or to loopback only for hosts on its allow-list: "
            "start it with TRAINLEDGER_WEBHOOK_ALLOWLIST=127.0.0.1 to see deliveries. The "
            "alerts are still listed below, from GET /v1/alerts."
        )
        return
    created = response.json()
    demo.receiver.secret = created.get("secret")
    demo.outcome.webhook_id = created["id"]
    demo.say(
        f"  POST /v1/webhooks -> {created['id']}: {demo.receiver.url}, a small HTTP server "
        "this demo runs; it checks each delivery's signature with the secret shown once"
    )
