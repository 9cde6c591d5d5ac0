"""What the people-facing formats say about an evaluation regression alert (kind
``evaluation_regression``): one sentence and the facts, from display strings the chat view
has already cleaned and clipped (`formats.view.chat_view`). ``esc`` escapes each name for the
target markup (identity for plain text); the figures need no escaping: values are decimal
strings, the rework exposure is money formatted for people
(`costcore.money.format_money_for_people`, code after it). No I/O."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

Escape = Callable[[str], str]


class RegressionLines(msgspec.Struct, frozen=True, kw_only=True):
    """A regression alert's display strings: cleaned and clipped, not yet escaped."""

    experiment: str
    benchmark: str
    baseline: str
    value: str
    baseline_value: str
    gain: str
    tolerance: str
    direction: str  # "higher is better" / "lower is better"
    exposure: str  # the rework exposure for people, without the currency code
    since: str | None  # the last good checkpoint's time; None: from the start
    measured: str  # the regressed result's time
    at: str | None  # "step 20000, 84,000,000,000 tokens" when reported


def regression_title(project: str, r: RegressionLines) -> str:
    return f"{project}: {r.benchmark} regressed in experiment {r.experiment}"


def regression_summary(r: RegressionLines, currency: str, esc: Escape) -> str:
    """One sentence: which benchmark fell how far below the baseline, and what the rework
    would cost."""
    since = f"since {r.since}" if r.since else "from the start (no good checkpoint)"
    return (
        f"General benchmark {esc(r.benchmark)} of experiment {esc(r.experiment)} is at "
        f"{r.value}, against {r.baseline_value} for the baseline {esc(r.baseline)}: a gain of "
        f"{r.gain}, past the tolerance of {r.tolerance}. Rework exposure: {r.exposure} "
        f"{currency} of cost {since}."
    )


def regression_facts(
    r: RegressionLines, project: str, currency: str, esc: Escape
) -> list[tuple[str, str]]:
    """The alert's facts as (label, value), names escaped with ``esc``."""
    facts = [
        ("Project", esc(project)),
        ("Experiment", esc(r.experiment)),
        ("Benchmark", f"{esc(r.benchmark)} ({r.direction})"),
        ("Value", r.value),
        ("Baseline", f"{r.baseline_value} ({esc(r.baseline)})"),
        ("Gain", r.gain),
        ("Tolerance", r.tolerance),
        ("Rework exposure", f"{r.exposure} {currency}"),
        ("Last good checkpoint", r.since or "none (all of the experiment's cost)"),
        ("Measured", r.measured + (f" ({r.at})" if r.at else "")),
    ]
    return facts
