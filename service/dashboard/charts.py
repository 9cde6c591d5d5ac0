"""Server-side SVG charts: stacked bars over time, a budget burn-down, plan against actual.

Money arrives as the exact decimal strings the API answers with. Floats are used for pixel
geometry only. Figures people read (labels, axis ticks, tooltips) go through the one formatter
for people (`money_text`); the exact string stays in `data-value` and in the tooltip, so what
the page holds equals what the JSON API says. Every label is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape

from .money_text import axis_label, people, smallest_step, tooltip

# Fixed colours per stage and category, so a stage has the same colour in every chart.
STAGE_COLORS: dict[str, str] = {
    "data_prep": "#4e79a7",
    "quality_scoring": "#f28e2b",
    "pretrain": "#59a14f",
    "midtrain": "#b07aa1",
    "eval": "#edc948",
    "post_train": "#76b7b2",
    "other": "#9c9c9c",
}
CATEGORY_COLORS: dict[str, str] = {
    "compute": "#4e79a7",
    "storage": "#f28e2b",
    "network": "#e15759",
    "data": "#76b7b2",
    "logging": "#edc948",
    "ops": "#b07aa1",
    "hidden": "#9c755f",
}
_SPARE_COLORS = ("#ff9da7", "#86bcb6", "#d4a6c8", "#8cd17d", "#b6992d", "#499894", "#79706e")

FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif"


def color_of(name: str, palette: Mapping[str, str]) -> str:
    if name in palette:
        return palette[name]
    return _SPARE_COLORS[sum(name.encode()) % len(_SPARE_COLORS)]


def amount(money: str) -> float:
    """A money string as a float, for pixel geometry only (never summed into a figure)."""
    return float(Decimal(money))


def nice_ticks(top: float, count: int = 5, smallest: float = 0.0) -> list[float]:
    """Round axis ticks from 0 to at least `top` (steps of 1, 2 or 5 × 10^k), no step finer
    than `smallest` (a currency's smallest unit, so no two ticks read the same)."""
    if top <= 0:
        return [0.0, max(1.0, smallest)]
    raw = max(top / count, smallest)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def money_ticks(top: float, currency: str) -> tuple[list[float], list[str]]:
    """Axis ticks for money up to `top` and their labels as people read money (no code)."""
    ticks = nice_ticks(top, smallest=smallest_step(currency))
    return ticks, [axis_label(t, currency) for t in ticks]


def label_room(labels: Sequence[str], least: float, size: int = 11) -> float:
    """Room in px for right-aligned labels, at least `least`: a label is never clipped."""
    return max(least, max((len(t) for t in labels), default=0) * size * 0.62 + 10)


def _text(x: float, y: float, body: str, *, anchor: str = "start", size: int = 12,
          fill: str = "#444", extra: str = "") -> str:  # fmt: skip
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
        f'fill="{fill}"{extra}>{escape(body)}</text>'
    )


def _svg(width: int, height: int, label: str, body: list[str], css_class: str) -> str:
    return (
        f'<svg class="chart {css_class}" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMin meet" '
        f'xmlns="http://www.w3.org/2000/svg" style="{FONT}">' + "".join(body) + "</svg>"
    )


def legend(names: Sequence[str], palette: Mapping[str, str]) -> str:
    items = "".join(
        f'<li><span class="swatch" style="background:{color_of(n, palette)}"></span>'
        f"{escape(n)}</li>"
        for n in names
    )
    return f'<ul class="legend">{items}</ul>'


def _y_axis(
    ticks: Sequence[float],
    labels: Sequence[str],
    left: float,
    right: float,
    y_of: Callable[[float], float],
) -> list[str]:
    parts = []
    for t, text in zip(ticks, labels, strict=True):
        y = y_of(t)
        parts.append(
            f'<line x1="{left:.1f}" x2="{right:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#e3e3e3" stroke-width="1"/>'
        )
        parts.append(_text(left - 8, y + 4, text, anchor="end", size=11, fill="#666"))
    return parts


@dataclass(frozen=True)
class StackSeries:
    name: str
    values: Sequence[str]  # one exact money string per period ("0.00" when none)


def stacked_bars(
    label: str,
    periods: Sequence[str],
    series: Sequence[StackSeries],
    palette: Mapping[str, str],
    currency: str,
    *,
    css_class: str,
    width: int = 1200,
    height: int = 300,
) -> str:
    """Spend per period as bars stacked by series; each segment carries its exact figure."""
    totals = [sum(amount(s.values[i]) for s in series) for i in range(len(periods))]
    ticks, labels = money_ticks(max(totals, default=0.0), currency)
    left, right, top, bottom = label_room(labels, 52.0), 10.0, 22.0, 30.0
    plot_w, plot_h = width - left - right, height - top - bottom
    scale = plot_h / ticks[-1]
    body = _y_axis(ticks, labels, left, width - right, lambda t: top + plot_h - t * scale)
    body.append(_text(left - 8, 11, currency, anchor="end", size=10, fill="#888"))
    n = max(len(periods), 1)
    slot = plot_w / n
    bar_w = max(min(slot * 0.78, 48.0), 1.0)
    every = max(1, math.ceil(n / max(1, int(plot_w // 56))))  # labels ~56 px apart at least
    for i, period in enumerate(periods):
        x = left + i * slot + (slot - bar_w) / 2
        base = top + plot_h
        for s in series:
            value = s.values[i]
            h = amount(value) * scale
            if h <= 0:
                continue
            base -= h
            tip = f"{s.name} · {period}: {tooltip(value, currency)}"
            body.append(
                f'<rect class="bar" data-series="{escape(s.name)}" data-period="{escape(period)}"'
                f' data-value="{escape(value)}" x="{x:.2f}" y="{base:.2f}" width="{bar_w:.2f}"'
                f' height="{h:.2f}" fill="{color_of(s.name, palette)}">'
                f"<title>{escape(tip)}</title></rect>"
            )
        if i % every == 0:
            tick = period[5:] if len(period) == 10 else period  # 2026-11-29 -> 11-29
            body.append(_text(x + bar_w / 2, height - bottom + 18, tick, anchor="middle", size=11))
    body.append(
        f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" '
        f'stroke="#999" stroke-width="1"/>'
    )
    if not periods:
        body.append(_text(width / 2, height / 2, "no spend in this range", anchor="middle"))
    return _svg(width, height, label, body, css_class)


def burn_down(
    label: str,
    start: datetime,
    end: datetime,
    now: datetime,
    points: Sequence[tuple[datetime, str]],
    limit: str,
    forecast: str | None,
    thresholds: Sequence[tuple[int, str]],
    currency: str,
    *,
    width: int = 420,
    height: int = 210,
) -> str:
    """Cumulative actual spend over a budget period against its limit, with the forecast.

    `points` are (time, cumulative spend) in time order; the forecast line runs from the last
    actual point (now) to the period's end, at the projected spend.
    """
    peak = max(
        [amount(limit), *(amount(v) for _, v in points)] + ([amount(forecast)] if forecast else [])
    )
    ticks, labels = money_ticks(peak * 1.05, currency)
    left, right, top, bottom = label_room(labels, 44.0), 44.0, 22.0, 30.0
    plot_w, plot_h = width - left - right, height - top - bottom
    span = max((end - start).total_seconds(), 1.0)
    scale = plot_h / ticks[-1]

    def xy(when: datetime, value: float) -> tuple[float, float]:
        frac = min(max((when - start).total_seconds() / span, 0.0), 1.0)
        return left + frac * plot_w, top + plot_h - value * scale

    body = _y_axis(ticks, labels, left, left + plot_w, lambda t: top + plot_h - t * scale)
    body.append(_text(left - 8, 9, currency, anchor="end", size=9, fill="#888"))
    # The even burn: where spend would be if the budget were used evenly over the period.
    x0, y0 = xy(start, 0.0)
    x1, y1 = xy(end, amount(limit))
    body.append(
        f'<line class="even-burn" x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" '
        f'stroke="#c7c7c7" stroke-width="1.5" stroke-dasharray="2 4"/>'
    )
    body += _limit_lines(limit, thresholds, xy(start, amount(limit))[1], left, plot_w, xy, start)
    path = [xy(start, 0.0)] + [xy(t, amount(v)) for t, v in points]
    last_value = points[-1][1] if points else "0.00"
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in path)
    body.append(
        f'<polyline class="actual" data-value="{escape(last_value)}" points="{coords}" '
        f'fill="none" stroke="#2f6fb0" stroke-width="2.5" stroke-linejoin="round"/>'
    )
    if forecast is not None and now < end:
        body += _forecast_line(path[-1], xy(end, amount(forecast)), forecast, currency)
    if start < now < end:
        body += _now_line(xy(now, 0.0)[0], top, plot_h, left + plot_w)
    body.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        f'stroke="#999" stroke-width="1"/>'
    )
    body.append(_text(left, top + plot_h + 16, start.strftime("%Y-%m-%d"), size=10))
    body.append(
        _text(left + plot_w, top + plot_h + 16, end.strftime("%Y-%m-%d"), anchor="end", size=10)
    )
    return _svg(width, height, label, body, "burn-down")


Point = Callable[[datetime, float], tuple[float, float]]


def _limit_lines(
    limit: str,
    thresholds: Sequence[tuple[int, str]],
    ly: float,
    left: float,
    plot_w: float,
    xy: Point,
    start: datetime,
) -> list[str]:
    """The budget's threshold lines (labelled where there is room) and its limit line."""
    lines: list[str] = []
    labelled = [ly]  # label heights taken: a label closer than 11 px to another is left out
    for pct, value in thresholds:
        if pct == 100:
            continue
        _, ty = xy(start, amount(value))
        lines.append(
            f'<line class="threshold" x1="{left:.1f}" x2="{left + plot_w:.1f}" y1="{ty:.1f}" '
            f'y2="{ty:.1f}" stroke="#f0b429" stroke-width="1" stroke-dasharray="4 4"/>'
        )
        if all(abs(ty - y) >= 11 for y in labelled):
            labelled.append(ty)
            lines.append(_text(left + plot_w + 4, ty + 4, f"{pct} %", size=10, fill="#a57b00"))
    lines.append(
        f'<line class="limit" data-value="{escape(limit)}" x1="{left:.1f}" x2="{left + plot_w:.1f}"'
        f' y1="{ly:.1f}" y2="{ly:.1f}" stroke="#d64545" stroke-width="2"/>'
    )
    lines.append(_text(left + plot_w + 4, ly + 4, "limit", size=11, fill="#d64545"))
    return lines


def _forecast_line(
    last: tuple[float, float], at_end: tuple[float, float], forecast: str, currency: str
) -> list[str]:
    """The dashed forecast from the last actual point to the period end, and its end mark."""
    (fx0, fy0), (fx1, fy1) = last, at_end
    return [
        f'<line class="forecast" data-value="{escape(forecast)}" x1="{fx0:.1f}" '
        f'y1="{fy0:.1f}" x2="{fx1:.1f}" y2="{fy1:.1f}" stroke="#2f6fb0" stroke-width="2" '
        f'stroke-dasharray="6 4"><title>forecast at the period end: '
        f"{escape(tooltip(forecast, currency))}</title></line>",
        f'<circle cx="{fx1:.1f}" cy="{fy1:.1f}" r="3.5" fill="#fff" stroke="#2f6fb0" '
        f'stroke-width="2"/>',
    ]


def _now_line(nx: float, top: float, plot_h: float, plot_end: float) -> list[str]:
    """The "now" line, labelled above the plot: below it the period's dates would collide
    with the label early or late in the period; near the right end it reads leftwards, clear
    of the limit's label."""
    anchor, lx = ("end", nx - 2) if nx > plot_end - 16 else ("middle", nx)
    return [
        f'<line class="now" x1="{nx:.1f}" x2="{nx:.1f}" y1="{top:.1f}" y2="{top + plot_h:.1f}"'
        f' stroke="#888" stroke-width="1" stroke-dasharray="1 3"/>',
        _text(lx, top - 6, "now", anchor=anchor, size=10, fill="#888"),
    ]


@dataclass(frozen=True)
class PlanBar:
    label: str
    planned: str
    actual: str
    forecast: str
    stage: str = ""  # the stage's name (data-stage), when the label is another text


def plan_vs_actual(label: str, rows: Sequence[PlanBar], currency: str, *, width: int = 1200) -> str:
    """Per stage: planned, actual so far and forecast at completion, as horizontal bars. A
    stage's label gets the room it needs, up to a third of the width; a longer one wraps onto
    up to three lines there (never cut at the left edge)."""
    size = 13
    most = int((width / 3 - 14) / (size * 0.62))  # characters a line of the room holds
    wrapped = [wrap_label(r.label, most) for r in rows]
    longest = max((len(line) for lines in wrapped for line in lines), default=0)
    left, right, top, row_h = max(120.0, longest * size * 0.62 + 14), 150.0, 10.0, 54.0
    height = int(top + row_h * max(len(rows), 1) + 28)
    plot_w = width - left - right
    peak = max([amount(v) for r in rows for v in (r.planned, r.actual, r.forecast)], default=0.0)
    ticks, labels = money_ticks(peak, currency)
    scale = plot_w / ticks[-1]
    body: list[str] = []
    for t, text in zip(ticks, labels, strict=True):
        x = left + t * scale
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" y2="{height - 22:.1f}" '
            f'stroke="#e3e3e3" stroke-width="1"/>'
        )
        body.append(_text(x, height - 8, text, anchor="middle", size=11, fill="#666"))
    kinds = (("planned", "#b8c7d9"), ("actual", "#2f6fb0"), ("forecast", "#f28e2b"))
    for i, row in enumerate(rows):
        y = top + i * row_h
        lines = wrapped[i]
        first = y + row_h / 2 + 4 - (len(lines) - 1) * (size + 2) / 2
        for k, line in enumerate(lines):
            body.append(_text(left - 10, first + k * (size + 2), line, anchor="end", size=size))
        for j, (kind, fill) in enumerate(kinds):
            value = getattr(row, kind)
            by = y + 6 + j * 14
            w = amount(value) * scale
            body.append(
                f'<rect class="plan-{kind}" data-stage="{escape(row.stage or row.label)}" '
                f'data-value="{escape(value)}" x="{left:.1f}" y="{by:.1f}" width="{w:.2f}" '
                f'height="12" fill="{fill}"><title>{escape(row.label)} {kind}: '
                f"{escape(tooltip(value, currency))}</title></rect>"
            )
            shown = f"{kind} {people(value, currency)}"
            body.append(_text(left + w + 6, by + 10, shown, size=10, fill="#555"))
    return _svg(width, height, label, body, "plan-vs-actual")


def wrap_label(text: str, most: int, lines: int = 3) -> list[str]:
    """`text` in at most `lines` lines of at most `most` characters, broken between words
    (a word longer than a line is broken inside); what does not fit ends the last line with
    "…" (the bar's tooltip has it whole)."""
    words = text.split()
    out: list[str] = []
    for word in words:
        while len(word) > most:
            out.append(word[:most])
            word = word[most:]
        if out and len(out[-1]) + 1 + len(word) <= most and not out[-1].endswith(" "):
            out[-1] += " " + word
        else:
            out.append(word)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: most - 1] + "…"
    return out or [""]


def share_bar(share: float, color: str = "#4e79a7") -> str:
    """A small inline bar for a table cell (share between 0 and 1)."""
    w = max(min(share, 1.0), 0.0) * 120
    return (
        f'<svg class="share" viewBox="0 0 120 10" width="120" height="10" '
        f'xmlns="http://www.w3.org/2000/svg"><rect width="120" height="10" fill="#eef1f5"/>'
        f'<rect width="{w:.1f}" height="10" fill="{color}"/></svg>'
    )
