"""The dashboard's HTML: one self-contained page per project, and the project picker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from html import escape
from urllib.parse import quote, urlencode

from ..budgets.service import BudgetStatus
from ..costs.report import CostReport
from ..costs.summary import CostSummary
from ..evaluations.effect import CostEffectReport
from ..plans.service import PlanStatus
from ..waste.model import WasteReport
from .charts import (
    CATEGORY_COLORS,
    STAGE_COLORS,
    PlanBar,
    amount,
    burn_down,
    legend,
    plan_vs_actual,
    share_bar,
    stacked_bars,
)
from .effect import effect_section
from .money_text import money_html
from .series import stacked_by_period, threshold_limits


@dataclass(frozen=True)
class BudgetPanel:
    status: BudgetStatus
    points: Sequence[tuple[datetime, str]]  # cumulative spend over the current period


@dataclass(frozen=True)
class PlanPanel:
    name: str
    status: PlanStatus


@dataclass(frozen=True)
class DashboardData:
    """Everything one page shows: the results of the same domain calls the JSON routes make."""

    project: str
    currency: str
    first_day: date  # inclusive
    last_day: date  # inclusive
    now: datetime
    summary: CostSummary
    by_stage: CostReport  # granularity day, grouped by stage
    by_category: CostReport  # granularity day, grouped by category
    experiments: CostReport  # grouped by experiment, top N
    budgets: Sequence[BudgetPanel]
    plans: Sequence[PlanPanel]
    waste: WasteReport
    effect: CostEffectReport | None = None  # the cost-effect report over the page's days


CSS = """
*{box-sizing:border-box}
body{margin:0;background:#f4f6f9;color:#1f2933;
 font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif}
header{background:#1f2d3d;color:#fff;padding:14px 28px;display:flex;align-items:center;
 gap:24px;flex-wrap:wrap}
header h1{font-size:20px;margin:0;font-weight:600}
header h1 .brand{color:#9fb3c8;font-weight:400}
header a{color:#cfe0f1}
header form{margin-left:auto;display:flex;gap:8px;align-items:center}
header input{padding:4px 6px;border-radius:4px;border:1px solid #587089;background:#fff}
header button{padding:5px 12px;border-radius:4px;border:0;background:#4e9af1;color:#fff}
main{padding:20px 28px 40px;max-width:1400px;margin:0 auto}
.pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:0 20px}
.money[title]{cursor:help}
section{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.08);
 padding:16px 20px;margin:0 0 20px}
h2{font-size:16px;margin:0 0 12px;font-weight:600}
h3{font-size:14px;margin:0 0 6px;font-weight:600}
.muted{color:#6b7785}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:14px;
 margin:0 0 20px}
.tile{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.08);padding:12px 16px}
.tile .label{color:#6b7785;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.tile .value{font-size:22px;font-weight:600;margin-top:2px;font-variant-numeric:tabular-nums}
.legend{list-style:none;margin:6px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:6px 18px}
.legend li{display:flex;align-items:center;gap:6px;font-size:12px}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px}
.budgets{display:grid;grid-template-columns:repeat(auto-fill,minmax(400px,1fr));gap:14px}
.budget{border:1px solid #e4e7eb;border-radius:6px;padding:12px}
.figures{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:13px;margin:4px 0 6px}
.figures b{font-variant-numeric:tabular-nums}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600}
.ok{background:#e3f4e6;color:#246b34}.risk{background:#fff1d6;color:#8a5a00}
.over{background:#fde2e2;color:#a12626}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #edf0f3;vertical-align:top}
th{color:#52606d;font-weight:600;background:#f8f9fb}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font-size:12px;background:#f1f3f5;padding:1px 4px;border-radius:3px}
.empty{color:#6b7785;font-style:italic;margin:4px 0}
.regression{color:#d62728;font-weight:600}
ul.projects{list-style:none;padding:0;font-size:16px}ul.projects li{margin:6px 0}
footer{color:#6b7785;font-size:12px;padding:0 28px 24px;max-width:1400px;margin:0 auto}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _money(value: str, currency: str) -> str:
    """An amount as people read it; the exact figure in its `title` (`money_text.money_html`)."""
    return money_html(value, currency)


def _pct(share: str) -> str:
    """A decimal fraction ("0.1234") as a percentage ("12.34 %")."""
    return f"{(Decimal(share) * 100).quantize(Decimal('0.01'))} %"


def _doc(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>{body}</body></html>"
    )


def render_picker(projects: Sequence[str]) -> str:
    items = (
        "".join(f'<li><a href="/ui/{quote(p, safe="")}">{_e(p)}</a></li>' for p in projects)
        or '<li class="empty">no project this token may read has any data yet</li>'
    )
    body = (
        '<header><h1><span class="brand">trainledger</span> dashboard</h1></header>'
        f'<main><section><h2>Projects</h2><ul class="projects">{items}</ul></section></main>'
    )
    return _doc("trainledger dashboard", body)


def _tiles(d: DashboardData) -> str:
    s, c = d.summary, d.currency
    tiles = [
        ("Spend in range", _money(s.total_cost, c), "total-spend"),
        ("Events", f"{s.total_events:,}", "events"),
        ("Fixed share", _pct(s.fixed_share), "fixed-share"),
        ("Peak day", _money(s.peak_daily.peak, c), "peak-day"),
        # Spend tagged rework=true; not the cost-effect section's "rework exposure" (the cost
        # of a regressed experiment since its last good checkpoint).
        ("Tagged rework", _money(s.rework_cost, c), "rework"),
        ("Waste found", _money(d.waste.total_waste, c), "waste-total"),
    ]
    return (
        '<div class="tiles">'
        + "".join(
            f'<div class="tile" id="tile-{key}"><div class="label">{_e(label)}</div>'
            f'<div class="value">{value}</div></div>'
            for label, value, key in tiles
        )
        + "</div>"
    )


def _spend_section(d: DashboardData, report: CostReport, dimension: str, title: str) -> str:
    palette = STAGE_COLORS if dimension == "stage" else CATEGORY_COLORS
    periods, series = stacked_by_period(report, dimension, d.first_day, d.last_day)
    chart = stacked_bars(
        f"{title}, per day",
        periods,
        series,
        palette,
        d.currency,
        css_class=f"spend-{dimension}",
        width=640,
        height=260,
    )
    totals = "".join(
        f"<li>{_e(b.name)}: <b>{_money(b.cost, d.currency)}</b> ({_pct(b.share)})</li>"
        for b in (d.summary.by_stage if dimension == "stage" else d.summary.by_category)
    )
    return (
        f'<section id="spend-by-{dimension}"><h2>{_e(title)}</h2>{chart}'
        f"{legend([s.name for s in series], palette)}"
        f'<ul class="legend muted">{totals}</ul></section>'
    )


def _budget_card(panel: BudgetPanel, now: datetime) -> str:
    st = panel.status
    b = st.budget
    currency = st.currency or ""
    scope = ", ".join(
        f"{k}={v}"
        for k, v in (
            ("stage", b.scope.stage),
            ("category", b.scope.category),
            ("experiment", b.scope.experiment),
            ("owner", b.scope.owner),
            *((f"tag.{k}", v) for k, v in b.scope.tags.items()),
        )
        if v is not None
    )
    used = Decimal(st.used_pct)
    if used >= 100:
        badge = '<span class="badge over">over budget</span>'
    elif st.forecast_over_budget:
        badge = '<span class="badge risk">forecast over</span>'
    else:
        badge = '<span class="badge ok">on track</span>'
    assert st.period_start is not None and st.period_end is not None
    chart = burn_down(
        f"burn-down of {b.name}",
        st.period_start,
        st.period_end,
        now,
        panel.points,
        b.amount,
        st.forecast,
        threshold_limits(b),
        currency,
    )
    forecast = _money(st.forecast, currency) if st.forecast is not None else "—"
    return (
        f'<div class="budget" data-budget="{_e(b.id)}"><h3>{_e(b.name)} {badge}</h3>'
        f'<div class="muted">{_e(b.period)} · period {_e(st.period)} · scope '
        f"{_e(scope or 'whole project')}</div>"
        f'<div class="figures"><span>spent <b class="spent">{_money(st.spent, currency)}</b>'
        f"</span><span>of <b>{_money(b.amount, currency)}</b> ({_e(st.used_pct)} %)</span>"
        f"<span>left <b>{_money(st.remaining, currency)}</b></span>"
        f'<span>forecast <b class="forecast">{forecast}</b></span></div>{chart}</div>'
    )


def _budget_order(panels: Sequence[BudgetPanel]) -> list[BudgetPanel]:
    """The project's own budgets first, then those a plan made; by name within each."""
    return sorted(panels, key=lambda p: (p.status.budget.plan_id is not None, p.status.budget.name))


def _budgets_section(d: DashboardData) -> str:
    if not d.budgets:
        inner = '<p class="empty">no budgets: create one with POST /v1/budgets</p>'
    else:
        inner = (
            '<div class="budgets">'
            + "".join(_budget_card(p, d.now) for p in _budget_order(d.budgets))
            + "</div>"
            + '<p class="muted">Solid line: cumulative spend in the current period. Red: the '
            "limit; amber: alert thresholds; grey dots: an even burn; dashed: the forecast (a "
            "plan's budget: from the plan's progress; any other: linear to the period's end).</p>"
        )
    return f'<section id="budgets"><h2>Budgets: burn-down</h2>{inner}</section>'


def _plan_block(panel: PlanPanel) -> str:
    st, c = panel.status, panel.status.currency
    bars = [
        PlanBar(s.label or s.stage, s.planned, s.actual, s.forecast_at_completion, s.stage)
        for s in st.stages
    ]
    chart = plan_vs_actual(f"plan {panel.name}: plan against actual", bars, c)
    rows = "".join(
        f'<tr data-stage="{_e(s.stage)}"><td>{_e(s.label or s.stage)}</td>'
        f'<td class="num">{_money(s.planned, c)}</td><td class="num">{_money(s.actual, c)}</td>'
        f'<td class="num">{_e(_pct(s.fraction_done) if s.fraction_done else "—")}</td>'
        f'<td class="num">{_money(s.earned_value, c) if s.earned_value else "—"}</td>'
        f'<td class="num">{_e(s.cpi or "—")}</td>'
        f'<td class="num">{_money(s.forecast_at_completion, c)}</td>'
        f'<td class="num">{_money(s.variance, c)}</td></tr>'
        for s in st.stages
    )
    return (
        f'<div class="plan" data-plan="{_e(st.plan_id)}"><h3>{_e(panel.name)}</h3>'
        f'<div class="figures"><span>window {_e(st.window_start.date())} – '
        f"{_e(st.window_end.date())}</span><span>planned <b>{_money(st.planned, c)}</b></span>"
        f"<span>actual <b>{_money(st.actual, c)}</b></span><span>forecast at completion "
        f"<b>{_money(st.forecast_at_completion, c)}</b></span><span>variance "
        f"<b>{_money(st.variance, c)}</b></span></div>{chart}"
        f"{legend(['planned', 'actual', 'forecast'], _PLAN_PALETTE)}"
        '<table><thead><tr><th>stage</th><th class="num">planned</th>'
        '<th class="num">actual</th><th class="num">done</th><th class="num">earned value</th>'
        '<th class="num">CPI</th><th class="num">forecast</th><th class="num">variance</th>'
        f"</tr></thead><tbody>{rows}</tbody></table></div>"
    )


_PLAN_PALETTE = {"planned": "#b8c7d9", "actual": "#2f6fb0", "forecast": "#f28e2b"}


def _plans_section(d: DashboardData) -> str:
    if not d.plans:
        inner = '<p class="empty">no plans: register one with POST /v1/plans</p>'
    else:
        inner = "".join(_plan_block(p) for p in d.plans)
    return f'<section id="plans"><h2>Plan vs actual per stage</h2>{inner}</section>'


def _experiments_section(d: DashboardData) -> str:
    report, c = d.experiments, d.currency
    total = amount(d.summary.total_cost)
    rows = []
    for i, row in enumerate(report.rows, start=1):
        name = row.key["experiment"] or "(none)"
        share = amount(row.cost) / total if total else 0.0
        rows.append(
            f'<tr data-experiment="{_e(name)}"><td class="num">{i}</td><td>{_e(name)}</td>'
            f'<td class="num cost">{_money(row.cost, c)}</td>'
            f'<td class="num">{row.events:,}</td><td>{share_bar(share)} '
            f'<span class="muted">{share * 100:.1f} %</span></td></tr>'
        )
    if not rows:
        inner = '<p class="empty">no spend in this range</p>'
    else:
        inner = (
            '<table><thead><tr><th class="num">#</th><th>experiment</th>'
            '<th class="num">cost</th><th class="num">events</th><th>share of spend</th></tr>'
            f"</thead><tbody>{''.join(rows)}</tbody></table>"
        )
    return f'<section id="experiments"><h2>Top experiments</h2>{inner}</section>'


def _waste_section(d: DashboardData) -> str:
    w, c = d.waste, d.currency
    rows = "".join(
        f'<tr data-kind="{_e(f.kind)}"><td><code>{_e(f.kind)}</code></td><td>{_e(f.title)}'
        f'<div class="muted">{_e(", ".join(f"{k}={v}" for k, v in f.evidence.keys.items()))}'
        f'</div></td><td class="num cost">{_money(f.cost_so_far, c)}</td>'
        f'<td class="num">{_money(f.cost_per_day_if_left, c)}</td>'
        f'<td class="num">{_e(f.window.start)} – {_e(f.window.end)}</td>'
        f"<td>{_e(f.action)}</td></tr>"
        for f in w.findings
    )
    if not rows:
        inner = '<p class="empty">no waste found in this range</p>'
    else:
        inner = (
            f'<p>Total <b id="waste-total">{_money(w.total_waste, c)}</b> so far; '
            f"<b>{_money(w.total_per_day_if_left, c)}</b> a day if left alone.</p>"
            '<table><thead><tr><th>kind</th><th>finding</th><th class="num">cost so far</th>'
            '<th class="num">per day if left</th><th class="num">days</th><th>what to do</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    return f'<section id="waste"><h2>Waste findings</h2>{inner}</section>'


def render_dashboard(d: DashboardData) -> str:
    link = "/ui/" + quote(d.project, safe="")
    form = (
        f'<form method="get" action="{_e(link)}"><label>from <input type="date" name="from" '
        f'value="{_e(d.first_day)}"></label><label>to <input type="date" name="to" '
        f'value="{_e(d.last_day)}"></label><button type="submit">Show</button></form>'
    )
    body = (
        f'<header><h1><span class="brand">trainledger</span> {_e(d.project)}</h1>'
        f"<span>{_e(d.first_day)} – {_e(d.last_day)} (UTC days, both included)</span>"
        f'<a href="/ui">all projects</a>{form}</header><main>'
        + _tiles(d)
        + '<div class="pair">'
        + _spend_section(d, d.by_stage, "stage", "Spend over time by stage")
        + _spend_section(d, d.by_category, "category", "Spend over time by category")
        + "</div>"
        + _budgets_section(d)
        + _plans_section(d)
        + _experiments_section(d)
        + _waste_section(d)
        + (effect_section(d.effect) if d.effect is not None else "")
        + "</main>"
        f"<footer>As of {_e(d.now.strftime('%Y-%m-%d %H:%M UTC'))}. Read-only. Amounts are rounded "
        "to the currency's minor unit for reading; hover one for the exact amount the JSON API "
        "answers with ("
        f"<code>/v1/costs?{_e(urlencode({'project': d.project}))}</code>, "
        "<code>/v1/budgets</code>, <code>/v1/plans/…/status</code>, "
        "<code>/v1/reports/waste</code>, <code>/v1/reports/cost-effect</code>).</footer>"
    )
    return _doc(f"{d.project} · trainledger", body)
