"""The dashboard's cost-effect section: the report's table and, per target benchmark, a
cost-versus-score chart (the Pareto front drawn and highlighted, regressions marked).

The figures are those of `GET /v1/reports/cost-effect` over the page's days, shown as people
read money (`money_text`) with the exact string in each `title` and `data-cost`; floats only
place the points. Every name is escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from html import escape

from ..evaluations.effect import BenchmarkCell, CostEffectReport, ExperimentRow
from .charts import FONT, amount, money_ticks
from .money_text import grouped, money_html, tooltip

__all__ = ["effect_section"]

_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 640, 320, 64, 16, 16, 40
# A chart alone in its row is drawn no larger than this: scaled to a wide page it would read
# as a poster (fonts scale with the drawing).
_MAX_WIDTH_PX = 760
_LABEL_SIZE = 11
_FRONT, _OTHER, _REGRESSED = "#2f6fb0", "#9aa5b1", "#d62728"


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _cell(cell: BenchmarkCell | None, currency: str) -> str:
    if cell is None:
        return '<td class="num muted">–</td><td class="num muted">–</td>'
    change = f' <span class="muted">({_e(cell.change)})</span>' if cell.change else ""
    per_point = money_html(cell.cost_per_point, currency) if cell.cost_per_point else "–"
    return f'<td class="num">{_e(cell.value)}{change}</td><td class="num">{per_point}</td>'


def _row(row: ExperimentRow, targets: list[str], currency: str) -> str:
    cells = {c.benchmark: c for c in row.benchmarks}
    name = _e(row.experiment) + (
        ' <span class="muted">(baseline)</span>' if row.is_baseline else ""
    )
    exposure = money_html(row.rework_exposure, currency) if row.rework_exposure else "–"
    regressions = (
        f'<span class="regression">{_e(", ".join(row.regressions))}</span>: rework exposure '
        f"{exposure}"
        if row.regressions
        else '<span class="muted">none</span>'
    )
    forecast = (
        money_html(row.forecast_cost_at_completion, currency)
        if row.forecast_cost_at_completion
        else "–"
    )
    return (
        f'<tr data-experiment="{_e(row.experiment)}"><td>{name}</td>'
        f'<td class="num cost">{money_html(row.cost, currency)}</td>'
        f'<td class="num">{_e(grouped(row.accelerator_hours))}</td>'
        f'<td class="num">{_e(f"{row.tokens_seen:,}" if row.tokens_seen else "–")}</td>'
        + "".join(_cell(cells.get(t), currency) for t in targets)
        + f'<td>{regressions}</td><td class="num">{forecast}</td></tr>'
    )


def label_width(text: str, size: int = _LABEL_SIZE) -> float:
    """A label's width in the drawing's px, estimated generously (as `charts.label_room`)."""
    return len(text) * size * 0.62


Box = tuple[float, float, float, float]  # left, top, right, bottom


def _point_label(cx: float, cy: float, name: str, taken: list[Box]) -> str:
    """The experiment's name beside its point, at the first place (right or left, above or
    below) inside the drawing that no label already placed covers; `taken` gains its box."""
    width, height = label_width(name), _LABEL_SIZE * 1.25
    candidates = [
        (x, anchor, cy + dy)
        for dy in (-8, 4 + _LABEL_SIZE, -8 - height, 4 + _LABEL_SIZE + height)
        for x, anchor in ((cx + 9, "start"), (cx - 9, "end"))
    ]

    def box(x: float, anchor: str, baseline: float) -> Box:
        left = x if anchor == "start" else x - width
        return (left, baseline - _LABEL_SIZE, left + width, baseline - _LABEL_SIZE + height)

    def free(b: Box) -> bool:
        inside = b[0] >= 2 and b[2] <= _W - 2 and b[1] >= 0 and b[3] <= _H - _BOTTOM
        return inside and not any(
            b[0] < t[2] and t[0] < b[2] and b[1] < t[3] and t[1] < b[3] for t in taken
        )

    x, anchor, baseline = next(
        (c for c in candidates if free(box(*c))),
        candidates[0] if cx + 9 + width <= _W - 2 else candidates[1],
    )
    taken.append(box(x, anchor, baseline))
    return (
        f'<text x="{x:.1f}" y="{baseline:.1f}" font-size="{_LABEL_SIZE}" '
        f'text-anchor="{anchor}">{_e(name)}</text>'
    )


def score_ticks(low: float, high: float) -> list[Decimal]:
    """Round score values from `low` to `high` (a step of 1, 2 or 5 times a power of ten,
    at most 6 of them): geometry and labels only."""
    span = Decimal(repr(high - low)) if high > low else Decimal(1)
    step = Decimal(1).scaleb((span / 5).adjusted())
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= 5:
            step *= factor
            break
    first = (Decimal(repr(low)) / step).to_integral_value(rounding=ROUND_CEILING) * step
    ticks = []
    tick = first
    while tick <= Decimal(repr(high)):
        ticks.append(tick)
        tick += step
    return ticks


def _score_axis(
    low: float, high: float, y: Callable[[float], float], right_end: float
) -> list[str]:
    """Score ticks on the left edge, with faint grid lines."""
    out = []
    for tick in score_ticks(low, high):
        ty = y(float(tick))
        out.append(
            f'<line x1="{_LEFT}" y1="{ty:.1f}" x2="{right_end:.1f}" y2="{ty:.1f}" '
            'stroke="#e3e8ee"/>'
            f'<text class="score-tick" x="{_LEFT - 6}" y="{ty + 4:.1f}" font-size="11" '
            f'text-anchor="end">{_e(tick.normalize().to_eng_string() if tick else "0")}</text>'
        )
    return out


def _chart(report: CostEffectReport, benchmark: str) -> str:
    """Cost (x) against the benchmark's latest value (y), one point per experiment."""
    points = [
        (row, cell) for row in report.rows for cell in row.benchmarks if cell.benchmark == benchmark
    ]
    costs = [amount(row.cost) for row, _ in points]
    values = [float(cell.value) for _, cell in points]
    x_ticks, x_labels = money_ticks(max(costs, default=0), report.currency)
    low, high = min(values, default=0.0), max(values, default=1.0)
    pad = (high - low) * 0.1 or 1.0
    low, high = low - pad, high + pad
    # The last cost label is centred on the axis' end: room for its half on the right.
    right = max(_RIGHT, label_width(x_labels[-1]) / 2 + 4 if x_labels else 0)
    plot_w, plot_h = _W - _LEFT - right, _H - _TOP - _BOTTOM

    def x(cost: float) -> float:
        return _LEFT + plot_w * cost / (x_ticks[-1] or 1)

    def y(value: float) -> float:
        return _TOP + plot_h * (1 - (value - low) / (high - low))

    body = [
        *_score_axis(low, high, y, _W - right),
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_W - right:.1f}" y2="{_TOP + plot_h}" '
        'stroke="#9aa5b1"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="#9aa5b1"/>',
        f'<text x="{_W / 2:.1f}" y="{_H - 6}" text-anchor="middle" font-size="12">cost '
        f"({_e(report.currency)})</text>",
        f'<text x="14" y="{_TOP + plot_h / 2:.1f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2:.1f})">{_e(benchmark)}</text>',
    ]
    for tick, text in zip(x_ticks, x_labels, strict=True):
        body.append(
            f'<text class="cost-tick" x="{x(tick):.1f}" y="{_TOP + plot_h + 16}" font-size="11" '
            f'text-anchor="middle">{_e(text)}</text>'
        )
    front = sorted(((amount(row.cost), float(cell.value)) for row, cell in points if cell.on_front))
    if len(front) > 1:
        path = " ".join(f"{x(c):.1f},{y(v):.1f}" for c, v in front)
        body.append(
            f'<polyline class="front" points="{path}" fill="none" stroke="{_FRONT}" '
            'stroke-dasharray="4 3"/>'
        )
    taken: list[Box] = []  # label boxes placed so far: no label covers another
    for row, cell in points:
        cx, cy = x(amount(row.cost)), y(float(cell.value))
        fill = _FRONT if cell.on_front else _OTHER
        classes = (
            "point"
            + (" on-front" if cell.on_front else "")
            + (" regressed" if row.regressions else "")
        )
        body.append(
            f'<g class="{classes}" data-experiment="{_e(row.experiment)}" '
            f'data-cost="{_e(row.cost)}" data-value="{_e(cell.value)}">'
            f"<title>{_e(row.experiment)}: {_e(cell.value)} for "
            f"{_e(tooltip(row.cost, report.currency))}</title>"
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="6" fill="{fill}"/>'
        )
        if row.regressions:  # a red ring: a general benchmark fell past the tolerance
            body.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="10" fill="none" '
                f'stroke="{_REGRESSED}" stroke-width="2"/>'
            )
        body.append(_point_label(cx, cy, row.experiment, taken) + "</g>")
    label = f"cost against {benchmark}; the Pareto front highlighted, regressions ringed"
    return (
        f"<figure><figcaption>{_e(benchmark)}: cost against score</figcaption>"
        f'<svg class="chart cost-effect" role="img" aria-label="{_e(label)}" '
        f'viewBox="0 0 {_W} {_H}" width="100%" preserveAspectRatio="xMinYMin meet" '
        f'xmlns="http://www.w3.org/2000/svg" style="{FONT};max-width:{_MAX_WIDTH_PX}px">'
        + "".join(body)
        + "</svg></figure>"
    )


def effect_section(report: CostEffectReport) -> str:
    """The section: the table, then one chart per target benchmark with a front."""
    targets = [front.benchmark for front in report.fronts]
    currency = report.currency
    if not any(row.benchmarks for row in report.rows):
        inner = '<p class="empty">no evaluation results in this range</p>'
    else:
        head = "".join(
            f'<th class="num">{_e(t)}</th><th class="num">cost per point</th>' for t in targets
        )
        rows = "".join(_row(row, targets, currency) for row in report.rows)
        inner = (
            '<table><thead><tr><th>experiment</th><th class="num">cost</th>'
            '<th class="num">accelerator hours</th><th class="num">tokens seen</th>'
            f'{head}<th>regressions</th><th class="num">forecast at completion</th></tr>'
            f"</thead><tbody>{rows}</tbody></table>"
            '<div class="pair">' + "".join(_chart(report, t) for t in targets) + "</div>"
        )
    return f'<section id="cost-effect"><h2>Cost and effect</h2>{inner}</section>'
