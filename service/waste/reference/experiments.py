"""Experiments that spend without progress (kinds `experiment_no_progress`, `experiment_stalled`).

* Progress is passed as `progress: {experiment: [ProgressPoint(time, metric, value,
  higher_is_better)]}`. A point improves its series (experiment, metric, direction) when
  it beats the series' best so far by more than `min_improvement_pct` % of |best|
  (default 0: any strict improvement); the first point of a series is an improvement.
* An experiment's spend = its events (label `experiment`, non-fixed SKUs), net of cost
  already reported by other findings. Events without an experiment label are not checked.
* *No progress reported*: its last progress point (any metric) is at least `idle_days`
  (default 2) before `as_of`, or it has none; it has been spending for at least
  `idle_days` (first event at or before `as_of - idle_days`); and it spent in the last
  `idle_days`. Experiments that never reported are checked unless `check_unreported` is
  false; `ignore_experiments` are never checked.
* *Stopped improving*: it still reports (a point in the last `idle_days`), but its last
  improvement (the latest over its series) is at least `stall_days` (default 3) before
  `as_of`, and it spent in the last `stall_days`. One finding per experiment at most.
* Cost so far = spend after the last improvement (stalled) or after the last progress
  point (no progress; all spend if there is none), counting events in the window before
  `as_of`. Per day if left alone = that cost x 1 day / the span from its start (the
  point, or the experiment's first event, but not before the window) to `as_of`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal, localcontext

from costcore.money import decimal_bound_problem, format_money, round_half_even_div

from ..days import DAY_US, date_of, datetime_at, micros
from ..model import DayLine, Kind, ProgressPoint
from .scan import Found, Scan, new_finding

__all__ = ["experiments_without_progress"]


def _last_improvement(
    points: Sequence[ProgressPoint], min_pct: Decimal
) -> tuple[int, ProgressPoint] | None:
    """(time in µs, point) of the latest improvement over all of the experiment's series."""
    series: dict[tuple[str, bool], list[ProgressPoint]] = defaultdict(list)
    for p in points:
        # A value outside the one bound (stored before values were bounded at the door) is a
        # report of progress, never an improvement: reading it would overflow the context.
        if decimal_bound_problem(p.value) is None:
            series[(p.metric, p.higher_is_better)].append(p)
    latest: tuple[int, ProgressPoint] | None = None
    with localcontext() as dc:
        dc.prec = 200
        for (_, higher), pts in sorted(series.items()):
            best: Decimal | None = None
            for p in sorted(pts, key=lambda q: micros(q.time)):
                margin = abs(best) * min_pct / 100 if best is not None else Decimal(0)
                if best is None or (p.value > best + margin if higher else p.value < best - margin):
                    best = p.value
                    t = micros(p.time)
                    if latest is None or t >= latest[0]:
                        latest = (t, p)
    return latest


@dataclass(frozen=True)
class _Verdict:
    """Why an experiment is reported, and from when its spend counts."""

    kind: Kind
    since: int  # µs: spend is counted from here ...
    after: bool  # ... strictly after it (a progress point) or from it (the first event)
    recent: int  # µs: it must have spent in this last stretch before `as_of`
    last_point: int | None  # µs of its last progress point
    improvement: tuple[int, ProgressPoint] | None  # its last improvement


def _verdict(
    ctx: Scan, indexes: list[int], points: list[ProgressPoint], min_pct: Decimal
) -> _Verdict | None:
    as_of = ctx.as_of_us
    idle_us, stall_us = ctx.policy.idle_days * DAY_US, ctx.policy.stall_days * DAY_US
    first_us = ctx.rows[indexes[0]].epoch_us
    last_point = max((micros(p.time) for p in points), default=None)
    improvement = _last_improvement(points, min_pct)
    # Spend is counted from `since`: after the last improvement / progress point, or
    # from the experiment's first event (inclusive) when it never reported.
    # Reports stopped (or never came): "no progress reported". Reports still come but
    # show no improvement: "stopped improving". The two never apply at once.
    if last_point is None or last_point <= as_of - idle_us:
        if first_us > as_of - idle_us:
            return None  # not running long enough to expect a report
        since, after = (last_point, True) if last_point is not None else (first_us, False)
        return _Verdict("experiment_no_progress", since, after, idle_us, last_point, improvement)
    if improvement is not None and improvement[0] <= as_of - stall_us:
        return _Verdict(
            "experiment_stalled", improvement[0], True, stall_us, last_point, improvement
        )
    return None


def _texts(ctx: Scan, experiment: str, verdict: _Verdict) -> tuple[dict[str, str], str, str]:
    """The finding's evidence keys, title and action."""
    as_of = ctx.as_of_us
    keys = {"experiment": experiment}
    if verdict.kind == "experiment_stalled":
        assert verdict.improvement is not None
        best = verdict.improvement[1]
        quiet_days = (as_of - verdict.improvement[0]) // DAY_US
        keys |= {
            "metric": best.metric,
            "best_value": str(best.value),
            "higher_is_better": "true" if best.higher_is_better else "false",
            "last_improvement": best.time.astimezone(UTC).isoformat(),
        }
        title = (
            f"Experiment {experiment} stopped improving: best {best.metric} "
            f"{best.value} set {quiet_days} day(s) ago, and it kept spending"
        )
        action = (
            f"Stop {experiment} or change its recipe: {best.metric} has not improved on "
            f"{best.value} since {best.time.astimezone(UTC).date().isoformat()}. Keep its "
            f"best checkpoint, release its GPUs, and restart from that checkpoint only with "
            f"a new learning-rate schedule or data mix."
        )
        return keys, title, action
    last_point = verdict.last_point
    if last_point is not None:
        keys["last_progress"] = datetime_at(last_point).isoformat()
        quiet = f"for {(as_of - last_point) // DAY_US} day(s)"
    else:
        quiet = "ever"
    title = f"Experiment {experiment} spends without reporting progress {quiet}"
    action = (
        f"Check whether {experiment} still does useful work: if so, post its eval "
        f"metrics as progress at least every {ctx.policy.idle_days} day(s); if not (hung, "
        f"looping or forgotten jobs), stop its jobs and release their resources."
    )
    return keys, title, action


def _experiment_finding(
    ctx: Scan, experiment: str, indexes: list[int], verdict: _Verdict
) -> Found | None:
    """The finding, or None when the experiment spent nothing recently or since `since`."""
    as_of, since, after = ctx.as_of_us, verdict.since, verdict.after
    recent_spend = sum(
        ctx.net(i) for i in indexes if ctx.rows[i].epoch_us >= as_of - verdict.recent
    )
    if recent_spend <= 0:
        return None
    counted = [
        i
        for i in indexes
        if (ctx.rows[i].epoch_us > since if after else ctx.rows[i].epoch_us >= since)
        and ctx.days[i] >= ctx.first_day
        and ctx.net(i) > 0
    ]
    cost = sum(ctx.net(i) for i in counted)
    span_start = max(since, ctx.first_day * DAY_US)
    span = as_of - span_start
    if cost <= 0 or span <= 0:
        return None
    per_day = round_half_even_div(cost * DAY_US, span)
    by_day: dict[int, int] = defaultdict(int)
    for i in counted:
        by_day[ctx.days[i]] += ctx.net(i)
    lines = [
        (d, c, DayLine(day=date_of(d), cost=format_money(c))) for d, c in sorted(by_day.items())
    ]
    as_of_day = (as_of - 1) // DAY_US
    window = (span_start // DAY_US, max(as_of_day, span_start // DAY_US))
    keys, title, action = _texts(ctx, experiment, verdict)
    return new_finding(
        ctx, verdict.kind, title, cost, per_day, keys, counted, lines, action, window
    )


def experiments_without_progress(
    ctx: Scan, progress: Mapping[str, Sequence[ProgressPoint]]
) -> list[Found]:
    """At most one finding per experiment: no progress reported, or stopped improving."""
    policy = ctx.policy
    as_of = ctx.as_of_us
    min_pct = Decimal(policy.min_improvement_pct)
    ignored = set(policy.ignore_experiments)
    by_experiment: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if row.experiment and row.epoch_us < as_of and not ctx.fixed(row.sku):
            by_experiment[row.experiment].append(i)

    found: list[Found] = []
    for experiment, indexes in sorted(by_experiment.items()):
        if experiment in ignored:
            continue
        points = [p for p in progress.get(experiment, ()) if micros(p.time) <= as_of]
        if not points and not policy.check_unreported:
            continue
        verdict = _verdict(ctx, indexes, points, min_pct)
        if verdict is None:
            continue
        finding = _experiment_finding(ctx, experiment, indexes, verdict)
        if finding is not None:
            found.append(finding)
    return found
