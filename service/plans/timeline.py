"""The plan's stages on the window's timeline, and the peak daily spend they imply.

**Peak headroom.** Stages with ``duration_days`` are laid on the window's timeline: a stage
starts at its ``start_day`` (days after ``window_start``) if given, else when the previous
timed stage ends (the first at day 0). Its daily burn is its total (with contingency) divided
by its duration. Stages without a duration are spread evenly over the whole window. The
*peak daily spend* is the highest sum of daily burns at any moment; the *average daily spend*
is the plan total over the window's length in days; *headroom* is peak − average and *ratio*
is peak / average. Budget the peak, not the average, for cash-flow and quota alarms.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from fractions import Fraction

from costcore import QUANTITY_SCALE, format_money, format_quantity, round_half_even_div

from .model import PeakHeadroom, PlanError, StageIn
from .numbers import fixed_text, parse_micro

__all__ = ["PEAK_NOTE", "micros", "peak_headroom", "place_stage"]

PEAK_NOTE = (
    "timed stages (duration_days) run from start_day, or back to back in stage order; untimed "
    "stages are spread evenly over the window; peak_daily = highest sum of daily burns at any "
    "moment; average_daily = total ÷ window days; headroom = peak_daily − average_daily; "
    "ratio = peak_daily ÷ average_daily"
)


US_PER_MICRODAY = 86_400  # 1 day = 86 400 s = 86 400 × 10⁶ µs, so 1 micro-day = 86 400 µs


def micros(delta: timedelta) -> int:
    """A duration in whole microseconds."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def place_stage(
    stage: StageIn, where: str, cursor: int, window_us: int
) -> tuple[tuple[int, int] | None, int]:
    """The stage's (start, end) in micro-days after the window start, and the new cursor."""
    if stage.duration_days is None:
        if stage.start_day is not None:
            raise PlanError(f"{where}.start_day", "needs duration_days")
        return None, cursor
    duration = parse_micro(stage.duration_days, f"{where}.duration_days")
    if duration <= 0:
        raise PlanError(f"{where}.duration_days", "must be greater than 0")
    start = cursor
    if stage.start_day is not None:
        start = parse_micro(stage.start_day, f"{where}.start_day")
    end = start + duration
    if end * US_PER_MICRODAY > window_us:
        window_days = fixed_text(Fraction(window_us, US_PER_MICRODAY * QUANTITY_SCALE), 6)
        raise PlanError(
            f"{where}.duration_days",
            f"stage runs to day {format_quantity(end)}, past the window's {window_days} days",
        )
    return (start, end), end


def peak_headroom(
    totals: list[int],
    timeline: list[tuple[int, int] | None],
    grand_total: int,
    window_us: int,
) -> PeakHeadroom:
    """The peak daily spend of the stages' timeline against the window's average."""
    day_us = US_PER_MICRODAY * QUANTITY_SCALE
    untimed = sum(t for t, span in zip(totals, timeline, strict=True) if span is None)
    background = round_half_even_div(untimed * day_us, window_us)  # nano per day
    average = round_half_even_div(grand_total * day_us, window_us)
    window_days = fixed_text(Fraction(window_us, day_us), 6)

    spans = [
        (span, round_half_even_div(t * QUANTITY_SCALE, span[1] - span[0]))
        for t, span in zip(totals, timeline, strict=True)
        if span is not None
    ]
    peak, peak_from, peak_to = background, "0", window_days
    if spans:
        ordered = sorted({p for span, _ in spans for p in span})
        best = -1
        for lo, hi in itertools.pairwise(ordered):
            rate = background + sum(r for (s, e), r in spans if s <= lo and hi <= e)
            if rate > best:
                best, peak_from, peak_to = rate, format_quantity(lo), format_quantity(hi)
        if best > background:
            peak = best
        else:
            peak_from, peak_to = "0", window_days
    return PeakHeadroom(
        window_days=window_days,
        average_daily=format_money(average),
        peak_daily=format_money(peak),
        peak_from_day=peak_from,
        peak_to_day=peak_to,
        headroom=format_money(peak - average),
        ratio=None if average == 0 else fixed_text(Fraction(peak, average), 4),
        definition=PEAK_NOTE,
    )
