"""The demo's cost-and-effect steps: the study's evaluation settings and results posted as the
eval harness would, then GET /v1/reports/cost-effect read back as a table, the winner on cost
per point and the rework exposure of the runs that broke a general benchmark, all read from
the report (the demo decides nothing itself)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rich.markup import escape
from rich.table import Table

from .formatting import compact_table, money, num
from .session import DemoSession
from .study import (
    BENCHMARKS,
    MIXES,
    PIPELINES,
    STUDY_TAG,
    evaluation_settings,
)


def put_settings(demo: DemoSession) -> dict[str, Any]:
    """The study's evaluation settings, put before the replay: the baseline, the kinds of
    benchmark, the tolerance and each run's planned tokens (a run is running until its
    results reach them)."""
    settings = evaluation_settings()
    demo.call(
        "PUT",
        "/v1/evaluations/settings",
        "evaluation settings",
        params=demo.project_q,
        json=settings,
    )
    return settings


def post_results(demo: DemoSession, results: Sequence[Mapping[str, Any]]) -> int:
    """Post one checkpoint's (or a few checkpoints') results as the eval harness would, when
    the replay reaches their time; the service checks for regressions on each post."""
    accepted = 0
    for i in range(0, len(results), 1000):
        answer = demo.call(
            "POST",
            "/v1/evaluations",
            "evaluations",
            json={"project": demo.sc.project, "results": list(results[i : i + 1000])},
        )
        accepted += int(answer["accepted"])
    return accepted


def say_results(demo: DemoSession, settings: Mapping[str, Any], accepted: int, posts: int) -> None:
    kinds = ", ".join(f"{name} ({what}, {kind})" for name, (kind, what) in BENCHMARKS.items())
    demo.say(
        f"  evaluations: {accepted} results at the study's checkpoints, posted in {posts} "
        f"requests as the replay reached each checkpoint's time (POST /v1/evaluations) on "
        f"{kinds}; baseline {settings['baseline']}, tolerance {settings['tolerance']} points "
        "(PUT /v1/evaluations/settings, before the replay)"
    )


@dataclass(frozen=True)
class Verdict:
    """What the report says, in the demo's words: per target benchmark the row with the
    lowest cost per point, and the rows with a rework exposure."""

    cheapest: dict[str, tuple[str, str]]  # target benchmark -> (experiment, cost per point)
    exposed: list[tuple[str, str, list[str]]]  # (experiment, rework exposure, regressions)


def read_verdict(report: Mapping[str, Any]) -> Verdict:
    cheapest: dict[str, tuple[str, str]] = {}
    for row in report["rows"]:
        for cell in row["benchmarks"]:
            cpp = cell["cost_per_point"]
            if cell["kind"] != "target" or cpp is None:
                continue
            best = cheapest.get(cell["benchmark"])
            if best is None or Decimal(cpp) < Decimal(best[1]):
                cheapest[cell["benchmark"]] = (row["experiment"], cpp)
    exposed = [
        (row["experiment"], row["rework_exposure"], row["regressions"])
        for row in report["rows"]
        if row["rework_exposure"] is not None
    ]
    return Verdict(cheapest, exposed)


def cost_effect(demo: DemoSession) -> None:
    key, value = STUDY_TAG
    demo.heading(
        10,
        "Cost and effect",
        "GET /v1/reports/cost-effect: each experiment's exact cost against its latest scores; "
        "change over the baseline, cost per point = cost ÷ gain on a target benchmark, and "
        "for a general benchmark fallen past the tolerance, the rework exposure: the spend "
        "after the last checkpoint within it.",
    )
    report = demo.call(
        "GET",
        "/v1/reports/cost-effect",
        "cost-effect report",
        params={**demo.project_q, "tag": f"{key}:{value}"},
    )
    demo.outcome.cost_effect = report
    demo.say(
        f"  the study's events (tag {key}:{value}): two mid-training mixes against "
        f"{report['baseline']}, and two data pipelines, each with a pilot run from the same "
        "checkpoint"
    )
    demo.console.print(_table(report))
    _pipelines(demo, report)
    demo.means(
        "the cheapest point of a target benchmark is not the biggest gain: a run that buys "
        "more points but breaks a general benchmark carries the cost of redoing its later "
        "runs. The closing lines name both, from the report."
    )


def _ordered(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    order = [*MIXES, *PIPELINES]
    return sorted(
        rows,
        key=lambda r: (
            order.index(r["experiment"]) if r["experiment"] in order else 99,
            r["experiment"],
        ),
    )


def _table(report: Mapping[str, Any]) -> Table:
    currency = report["currency"]
    benchmarks = [b for b in BENCHMARKS if any(_cell(r, b) for r in report["rows"])]
    columns = [">" + currency, ">tokens"]
    for b in benchmarks:
        columns.append(">" + b)
        if BENCHMARKS[b][0] == "target":
            columns.append(">per pt")
    table = compact_table("experiment", *columns, ">rework")
    for row in _ordered(report["rows"]):
        cells = [num(row["cost"], currency), _tokens(row["tokens_seen"])]
        for b in benchmarks:
            cell = _cell(row, b)
            change = cell["change"] if cell else None
            text = "-" if change is None else f"{Decimal(change):+}"
            if cell and cell["regression"]:
                text = f"[red]{text}[/]"
            cells.append(text)
            if BENCHMARKS[b][0] == "target":
                cpp = cell["cost_per_point"] if cell else None
                cells.append("-" if cpp is None else num(cpp, currency))
        exposure = row["rework_exposure"]
        cells.append("-" if exposure is None else f"[red]{num(exposure, currency)}[/]")
        name = escape(row["experiment"]) + (" (base)" if row["is_baseline"] else "")
        table.add_row(name, *cells)
    return table


def _cell(row: Mapping[str, Any], benchmark: str) -> Mapping[str, Any] | None:
    return next((c for c in row["benchmarks"] if c["benchmark"] == benchmark), None)


def _tokens(tokens: int | None) -> str:
    return "-" if tokens is None else f"{Decimal(tokens) / 1_000_000_000:.1f}B"


def _pipelines(demo: DemoSession, report: Mapping[str, Any]) -> None:
    rows = {r["experiment"]: r for r in report["rows"] if r["experiment"] in PIPELINES}
    target = next((b for b, (kind, _) in BENCHMARKS.items() if kind == "target"), None)
    if len(rows) < 2 or target is None:
        return
    parts = []
    for name in PIPELINES:
        cell = _cell(rows[name], target)
        cpp = cell["cost_per_point"] if cell else None
        change = cell["change"] if cell else None
        per = "no gain" if cpp is None else f"at {money(cpp, report['currency'])} a point"
        parts.append(
            f"{name} cost {money(rows[name]['cost'], report['currency'])} for "
            f"{'-' if change is None else f'{Decimal(change):+}'} on {target}, {per}"
        )
    ranked = [
        (Decimal(c["cost_per_point"]), n)
        for n in PIPELINES
        if (c := _cell(rows[n], target)) is not None and c["cost_per_point"] is not None
    ]
    demo.say("  data pipelines: " + "; ".join(parts) + ".")
    if ranked:
        demo.say(
            f"  the cheaper point of {target} between the two pipelines: "
            f"[bold]{min(ranked)[1]}[/], scoring included"
        )


def closing(demo: DemoSession) -> None:
    """The last lines of the demo: the winner on cost per point and the rework exposure."""
    report = demo.outcome.cost_effect
    if not report:
        return
    currency = report["currency"]
    verdict = read_verdict(report)
    winners = {name for name, _ in verdict.cheapest.values()}
    if len(winners) == 1:
        (winner,) = winners
        per = " and ".join(
            f"{money(cpp, currency)} a point of {b}" for b, (_, cpp) in verdict.cheapest.items()
        )
        demo.say(f"  winner on cost per point: [bold]{winner}[/], at {per}")
    else:
        for b, (name, cpp) in verdict.cheapest.items():
            demo.say(
                f"  winner on cost per point of {b}: [bold]{name}[/], at {money(cpp, currency)}"
            )
    for name, exposure, regressions in verdict.exposed:
        demo.say(
            f"  rework exposure of {name}: [bold red]{money(exposure, currency)}[/] (it fell "
            f"past the tolerance of {report['tolerance']} points on {', '.join(regressions)}; "
            "the spend after its last good checkpoint would be redone)"
        )
    _alerted(demo, report)


def _alerted(demo: DemoSession, report: Mapping[str, Any]) -> None:
    """The regression alerts, as GET /v1/alerts has them: each fired when the checkpoint that
    fell past the tolerance was posted, with the tokens its run had seen by then."""
    fired = demo.call(
        "GET",
        "/v1/alerts",
        "regression alerts",
        params={**demo.project_q, "kind": "evaluation_regression", "limit": 1000},
    )
    by_run: dict[str, list[Mapping[str, Any]]] = {}
    for a in fired:
        by_run.setdefault(a["regression"]["experiment"], []).append(a["regression"])
    planned = {r["experiment"]: r.get("planned_tokens") for r in report["rows"]}
    for name, regressions in by_run.items():
        when = " and ".join(
            f"{r['benchmark']} at {_tokens(r['tokens_seen'])}"
            for r in sorted(regressions, key=lambda r: (r["measured_at"], r["benchmark"]))
        )
        of = f" of its {_tokens(planned[name])} planned" if planned.get(name) else ""
        demo.say(
            f"  alerted as it happened: {escape(name)} fell past the tolerance on {when}"
            f"{of} tokens, while it still ran (GET /v1/alerts: evaluation_regression)"
        )
