"""The demo's replay: the simulated usage posted in batches, the progress reports, and the wait
for the webhook deliveries the replay set off."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from . import costeffect
from .scenario import (
    BATCH_EVENTS,
    CHECKPOINT_GB,
    CKPT_BREAK_DAY,
    CRASH,
    DAYS,
    GPUS_PER_NODE,
    HANG_LAST_PROGRESS,
    HANG_START,
    HUNG,
    KEEP_LAST,
    NODES,
    PLANNED_TOKENS,
    PRETRAIN_START,
    checkpoint_gb,
)
from .session import DemoError, DemoSession
from .simulation import experiment_progress, pretrain_tokens_done
from .study import evaluation_results


def replay(demo: DemoSession) -> None:
    sc = demo.sc
    demo.heading(
        5,
        "Replay",
        f"{DAYS} days of usage as the cluster's exporters would post it, "
        f"~{BATCH_EVENTS:,} events a request.",
    )
    crash_from, crash_to = sc.at(*CRASH[0]), sc.at(*CRASH[1])
    demo.say(
        f"  the cluster: {NODES} nodes × {GPUS_PER_NODE} H100 in a reserved block from day "
        f"{PRETRAIN_START} (billed per node-hour, its use posted per GPU-hour), one on-demand "
        "node for data prep and side experiments, hosted scoring inference, hot / warm / "
        "archive / checkpoint storage, a cross-region copy, logs, on-call hours"
    )
    demo.say("  and three things going wrong in it:")
    demo.say(
        f"   [bold]• idle reservation[/]: the pretraining job dies {crash_from:%a %d %b %H:%M} "
        f"and is restarted {crash_to:%a %d %b %H:%M}; the block is billed all along"
    )
    demo.say(
        f"   [bold]• over-long experiment[/]: {HUNG}, planned for 2 days on an on-demand "
        f"node, starts {sc.day(HANG_START):%d %b}, hangs after its last progress report "
        f"{sc.at(*HANG_LAST_PROGRESS):%d %b %H:%M} and is never stopped"
    )
    demo.say(
        f"   [bold]• checkpoint blow-up[/]: from {sc.day(CKPT_BREAK_DAY):%d %b} old "
        f"checkpoints are no longer deleted: a new {CHECKPOINT_GB} GB every hour, "
        f"{CHECKPOINT_GB * KEEP_LAST} GB kept becomes "
        f"{checkpoint_gb(DAYS - 1, 23) / 1000:.1f} TB"
    )
    demo.say(
        f"  and a study on a second on-demand node from the day-20 checkpoint "
        f"({sc.day(21):%d %b} .. {sc.day(24):%d %b}): two mid-training mixes (math/code-heavy, "
        "balanced) against a baseline run, and the next data slice filtered two ways, by the "
        "quality scorer (hosted inference) or by flat heuristics, each with a pilot run"
    )
    settings = costeffect.put_settings(demo)
    events = demo.outcome.events
    requests = schedule(events, evaluation_results(sc), BATCH_EVENTS)
    posted = accepted = 0
    with Progress(
        TextColumn("  [progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("events [cyan]{task.fields[day]}"),
        TimeElapsedColumn(),
        console=demo.console,
    ) as progress:
        task = progress.add_task("POST /v1/events", total=len(events), day="")
        for batch, results in requests:
            if batch:
                _post_events(demo, batch)
                progress.update(task, advance=len(batch), day=f"up to {batch[-1]['time'][:10]}")
            if results:
                accepted += costeffect.post_results(demo, results)
                posted += 1
    demo.say(
        f"  {sum(1 for b, _ in requests if b)} requests of events: "
        f"{demo.outcome.accepted:,} events accepted, {demo.outcome.duplicates} duplicates, "
        f"{demo.outcome.rejected} rejected (batches also end at each of the study's checkpoints)"
    )
    costeffect.say_results(demo, settings, accepted, posted)


Request = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def schedule(
    events: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]], size: int
) -> list[Request]:
    """The replay's requests in time order: (events, results) pairs. Events (in time order)
    go in batches of at most `size`, and a batch also ends at each checkpoint's time (it
    holds the events up to and including that time); the results of the checkpoints the
    batch reached follow it, as an eval harness posts them when it has scored a checkpoint.
    Results left after the last event follow the last batch."""
    due = sorted(results, key=lambda r: _when(r["time"]))
    cuts = sorted({_when(r["time"]) for r in results})
    out: list[Request] = []
    batch: list[dict[str, Any]] = []
    taken = 0

    def flush(end: int) -> None:  # the batch so far, then the results due[taken:end]
        nonlocal batch, taken
        if batch or end > taken:
            out.append((batch, due[taken:end]))
        batch, taken = [], end

    for ev in events:
        when = _when(ev["time"])
        while cuts and cuts[0] < when:  # the replay has passed a checkpoint: its results
            cut = cuts.pop(0)
            flush(
                next((i for i in range(taken, len(due)) if _when(due[i]["time"]) > cut), len(due))
            )
        batch.append(ev)
        if len(batch) == size:
            flush(taken)
    flush(len(due))
    return out


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _post_events(demo: DemoSession, batch: list[dict[str, Any]]) -> None:
    answer = demo.call(
        "POST",
        "/v1/events",
        "replay",
        content=json.dumps(batch).encode(),
        headers={"content-type": "application/json"},
    )
    demo.outcome.accepted += int(answer["accepted"])
    demo.outcome.duplicates += int(answer["duplicates"])
    demo.outcome.rejected += len(answer["rejected"])
    if answer["rejected"]:
        first = answer["rejected"][0]
        raise DemoError(f"replay: event {first.get('id')} rejected: {first.get('reason')}")


def progress(demo: DemoSession) -> None:
    reports = experiment_progress(demo.sc)
    for report in reports:
        demo.call(
            "POST", "/v1/experiments/progress", "progress", params=demo.project_q, json=report
        )
    tokens = pretrain_tokens_done(demo.outcome.events)
    path = f"/v1/plans/{demo.outcome.plan_id}/progress"
    for body in (
        {"stage": "data_prep", "fraction_done": "1"},
        {"stage": "quality_scoring", "fraction_done": "1"},
        {"stage": "pretrain", "tokens_done": tokens},
    ):
        demo.call("POST", path, "plan progress", params=demo.project_q, json=body)
    by_exp: dict[str, int] = {}
    for r in reports:
        by_exp[r["experiment"]] = by_exp.get(r["experiment"], 0) + 1
    demo.say(
        f"  progress: {len(reports)} eval-loss reports ("
        + ", ".join(f"{k} {v}" for k, v in by_exp.items())
        + f"); plan: data prep and scoring done, pretraining at {tokens / 1e9:,.0f}B of "
        f"{PLANNED_TOKENS / 1e9:,.0f}B tokens"
    )


def wait_for_deliveries(demo: DemoSession) -> None:
    alerts = _all_alerts(demo)
    demo.outcome.alerts = alerts
    if demo.receiver is None or demo.outcome.webhook_id is None:
        return
    wanted = {a["id"] for a in alerts}
    deadline = time.monotonic() + demo.delivery_timeout_s
    with demo.console.status(f"waiting for {len(wanted)} webhook deliveries ..."):
        while time.monotonic() < deadline:
            got = {i for d in demo.receiver.received() for i in d.alert_ids}
            pending = demo.call(
                "GET",
                "/v1/webhooks/deliveries",
                "deliveries",
                params={**demo.project_q, "status": "pending", "limit": 1},
            )
            if wanted <= got and pending["total"] == 0:
                break
            time.sleep(0.2)
        time.sleep(0.5)  # a delivery sent twice would have arrived by now
    demo.outcome.deliveries = demo.receiver.received()


def _all_alerts(demo: DemoSession) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {**demo.project_q, "limit": 1000}
        if after:
            params["after"] = after
        page = demo.call("GET", "/v1/alerts", "alerts", params=params)
        out += page
        if len(page) < 1000:
            return out
        after = page[-1]["cursor"]
