"""The neutral view every people-facing format lays out (`chat_view`): an alert's display
strings cleaned and clipped, not yet escaped; the escaping of each chat markup; the summary
sentence and the facts the markup formats (Slack, DingTalk, WeCom, Feishu) share. No I/O.

User-supplied strings (project, scope, period, budget and driver names, link labels)
have control characters removed and are clipped, then escaped for the target markup:
Slack mrkdwn gets ``& < >`` as entities (Slack's documented escaping) and every mrkdwn
text object is ``verbatim``; DingTalk/WeCom markdown get ``& < >`` as entities and
``\\ ` * _ [ ] ~ |`` backslash-escaped. Amounts must be decimal strings and the currency
three capital letters (`formats.message.validate` checks); they are shown formatted for
people (`costcore.money.format_money_for_people`: grouped, rounded to the currency's minor
units, the code after), which needs no escaping either. The exact figures stay in the
standard format's payload.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final
from urllib.parse import quote, urlsplit

import msgspec

from costcore.money import format_money_for_people, parse_money

from .message import AlertMessage, RegressionMessage
from .regression_text import (
    RegressionLines,
    regression_facts,
    regression_summary,
    regression_title,
)

MAX_DRIVERS: Final = 3
# C0/C1 controls, line/paragraph separators and bidi overrides/isolates.
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
_MD_SPECIAL_RE: Final = re.compile(r"([\\`*_\[\]~|])")
_URL_SAFE: Final = "!#$%&'*+,/:;=?@[]~"

_KIND_LABEL: Final = {
    "threshold": "Budget threshold crossed",
    "forecast": "Forecast overrun",
    "growth": "Abnormal daily growth",
    "waste": "Waste finding",
    "evaluation_regression": "Evaluation regression",
}
_LINK_ORDER: Final = ("dashboard", "costs", "report", "evaluations", "alerts", "budget")
_LINK_LABEL: Final = {
    "dashboard": "Dashboard",
    "costs": "Costs",
    "report": "Cost-effect report",
    "evaluations": "Results",
    "alerts": "Alerts",
    "budget": "Budget",
}

Escape = Callable[[str], str]


# --- small helpers ----------------------------------------------------------------------


def clean(value: str, limit: int) -> str:
    """Control characters to spaces, trimmed, clipped to ``limit`` characters with '…'."""
    text = _CONTROL_RE.sub(" ", value).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def esc_slack(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def esc_md(value: str) -> str:
    entities = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL_RE.sub(r"\\\1", entities)


def plain(value: str) -> str:
    return value


def _nano(exact: str) -> int | None:
    try:
        return parse_money(Decimal(exact))
    except (ArithmeticError, ValueError, TypeError):
        return None


def people_amount(exact: str, currency: str) -> str:
    """An exact decimal string as people read it, without the code (the formats put the
    code after it): ``"1562.6800004", "USD" -> "1,562.68"``. Text that is not an amount is
    only cleaned."""
    nano = _nano(exact)
    if nano is None:
        return clean(exact, 40) or "?"
    return format_money_for_people(nano, currency).removesuffix(" " + currency)


def _used_pct(spent: str, amount: str) -> int | None:
    """Spent as a whole percentage of the budget's amount (rounded down)."""
    s, a = _nano(spent), _nano(amount)
    return s * 100 // a if s is not None and a else None


def _safe_link(url: str) -> str | None:
    """An http(s) URL with the characters that break markup links percent-encoded."""
    url = _CONTROL_RE.sub("", url).strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or len(url) > 2000:
        return None
    return quote(url, safe=_URL_SAFE)


def truncate_utf8(text: str, max_bytes: int, marker: str = "\n…(truncated)") -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, never inside a character.

    When cutting, it prefers the last line break in the second half of the budget (lines
    are self-contained markup), otherwise cuts at a character boundary and drops a
    trailing half-written entity or escape backslash; ``marker`` is appended.
    """
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(marker.encode())
    if room <= 0:
        return marker.encode()[:max_bytes].decode("utf-8", "ignore")
    head = data[:room].decode("utf-8", "ignore")
    newline = head.rfind("\n")
    if newline >= len(head) // 2:
        head = head[:newline]
    else:
        head = re.sub(r"(&#?[A-Za-z0-9]*|\\)$", "", head)
    return head + marker


# --- the neutral view -------------------------------------------------------------------


class ChatView(msgspec.Struct, frozen=True, kw_only=True):
    """The alert's display strings: cleaned and clipped, but not yet escaped."""

    kind: str
    title: str
    project: str
    scope: str
    period: str
    budget: str | None
    threshold_pct: int | None
    amount: str
    spent: str
    limit: str
    over_by: str
    forecast: str | None
    currency: str
    used_pct: int | None  # spent as a percentage of the budget's amount
    also: list[tuple[int | None, str]]  # other thresholds crossed: (pct, limit), highest first
    drivers: list[tuple[str, str]]
    links: list[tuple[str, str]]
    alert_id: str
    occurred: str
    regression: RegressionLines | None = None  # an evaluation regression's own lines


def _drivers(top: list[dict[str, str]], currency: str) -> list[tuple[str, str]]:
    return [
        (
            clean(driver.get("name", ""), 160) or "(unnamed)",
            people_amount(driver.get("cost", ""), currency),
        )
        for driver in top[:MAX_DRIVERS]
    ]


def _links(links: dict[str, str]) -> list[tuple[str, str]]:
    keys: list[str] = [k for k in _LINK_ORDER if k in links]
    keys += sorted(k for k in links if k not in _LINK_ORDER)
    shown: list[tuple[str, str]] = []
    for key in keys:
        url = _safe_link(links[key])
        if url is not None:
            shown.append((_LINK_LABEL.get(key) or clean(key, 40) or "link", url))
    return shown


def _utc(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def regression_view(alert: RegressionMessage) -> ChatView:
    """The neutral view of an evaluation regression alert: the budget fields empty, its own
    lines in `regression`."""
    project = clean(alert.project, 80) or "(unnamed project)"
    r = alert.regression
    at = ", ".join(
        part
        for part in (
            f"step {r.step:,}" if r.step is not None else "",
            f"{r.tokens_seen:,} tokens" if r.tokens_seen is not None else "",
        )
        if part
    )
    lines = RegressionLines(
        experiment=clean(r.experiment, 128) or "?",
        benchmark=clean(r.benchmark, 128) or "?",
        baseline=clean(r.baseline, 128) or "?",
        value=clean(r.value, 48),
        baseline_value=clean(r.baseline_value, 48),
        gain=clean(r.gain, 48),
        tolerance=clean(r.tolerance, 48),
        direction="higher is better" if r.higher_is_better else "lower is better",
        exposure=people_amount(r.rework_exposure, alert.currency),
        since=_utc(r.rework_since) if r.rework_since is not None else None,
        measured=_utc(r.measured_at),
        at=at or None,
    )
    title = regression_title(project, lines)
    if alert.test:
        title = "Test message (a sample, not an alert): " + title
    pairs = (f"{clean(k, 60)}={clean(v, 128)}" for k, v in sorted(alert.scope.items()))
    return ChatView(
        kind=alert.kind,
        title=title,
        project=project,
        scope=clean(", ".join(pairs), 300) or "whole project",
        period=lines.measured,
        budget=None,
        threshold_pct=None,
        amount="",
        spent="",
        limit="",
        over_by="",
        forecast=None,
        currency=alert.currency,
        used_pct=None,
        also=[],
        drivers=_drivers(alert.top_drivers, alert.currency),
        links=_links(alert.links),
        alert_id=clean(alert.id, 120),
        occurred=_utc(alert.occurred_at),
        regression=lines,
    )


def chat_view(alert: AlertMessage | RegressionMessage) -> ChatView:
    if isinstance(alert, RegressionMessage):
        return regression_view(alert)
    project = clean(alert.project, 80) or "(unnamed project)"
    budget_raw = alert.budget_name or alert.budget_id
    budget = clean(budget_raw, 80) if budget_raw else None
    if alert.scope:
        pairs = (f"{clean(k, 60)}={clean(v, 100)}" for k, v in sorted(alert.scope.items()))
        scope = clean(", ".join(pairs), 300)
    else:
        scope = "whole project"
    drivers = _drivers(alert.top_drivers, alert.currency)
    links = _links(alert.links)
    shown = budget or "(none)"
    also = [(a.threshold_pct, people_amount(a.limit, alert.currency)) for a in alert.also_crossed]
    if alert.kind == "threshold":
        pct = f" {alert.threshold_pct}%" if alert.threshold_pct is not None else " its limit"
        lower = [f"{p}%" for p, _ in also if p is not None]
        title = f"{project}: budget {shown} crossed{pct}"
        if lower:
            title += f" (and {', '.join(lower)})"
    elif alert.kind == "forecast":
        title = f"{project}: forecast overrun on budget {shown}"
    elif alert.kind == "growth":
        title = f"{project}: abnormal daily spend growth"
    else:
        title = f"{project}: waste finding"
    if alert.test:
        title = "Test message (a sample, not an alert): " + title
    occurred = _utc(alert.occurred_at)
    cur = alert.currency
    return ChatView(
        kind=alert.kind,
        title=title,
        project=project,
        scope=scope,
        period=clean(alert.period, 40) or "?",
        budget=budget,
        threshold_pct=alert.threshold_pct,
        amount=people_amount(alert.amount, cur),
        spent=people_amount(alert.spent, cur),
        limit=people_amount(alert.limit, cur),
        over_by=people_amount(alert.over_by, cur),
        forecast=people_amount(alert.forecast, cur) if alert.forecast is not None else None,
        currency=cur,
        used_pct=_used_pct(alert.spent, alert.amount),
        also=also,
        drivers=drivers,
        links=links,
        alert_id=clean(alert.id, 120),
        occurred=occurred,
    )


def _also(v: ChatView) -> str:
    """The other thresholds the same batch crossed: "80% (8.00 USD), 50% (5.00 USD)"."""
    return ", ".join(
        f"{pct}% ({limit} {v.currency})" if pct is not None else f"{limit} {v.currency}"
        for pct, limit in v.also
    )


def summary(v: ChatView, esc: Escape) -> str:
    """What crossed what and by how much; the other thresholds crossed with it; the
    forecast."""
    if v.regression is not None:
        return regression_summary(v.regression, v.currency, esc)
    cur = v.currency
    budget = esc(v.budget or "(none)")
    over = f"{v.over_by} {cur}"
    ahead = f" Forecast for {esc(v.period)}: {v.forecast} {cur}." if v.forecast else ""
    if v.kind == "threshold":
        if v.threshold_pct is not None:
            text = (
                f"Spent {v.spent} {cur} crossed the {v.threshold_pct}% threshold "
                f"({v.limit} {cur}) of budget {budget} ({v.amount} {cur}), over by {over}."
            )
        else:
            text = (
                f"Spent {v.spent} {cur} crossed the limit {v.limit} {cur} "
                f"of budget {budget}, over by {over}."
            )
        if v.also:
            text += f" Also crossed in the same batch: {_also(v)}."
        return text + ahead
    if v.kind == "forecast":
        projected = v.forecast if v.forecast is not None else v.spent
        return (
            f"Forecast {projected} {cur} for {esc(v.period)} exceeds budget {budget} "
            f"({v.amount} {cur}): spent so far {v.spent} {cur}, over the pace limit "
            f"{v.limit} {cur} by {over}."
        )
    if v.kind == "growth":
        return f"Daily spend {v.spent} {cur} exceeded the growth limit {v.limit} {cur} by {over}."
    return f"Waste finding: {v.spent} {cur} against a limit of {v.limit} {cur}, over by {over}."


def facts(v: ChatView, esc: Escape) -> list[tuple[str, str]]:
    if v.regression is not None:
        return regression_facts(v.regression, v.project, v.currency, esc)
    cur = v.currency
    facts = [("Project", esc(v.project)), ("Scope", esc(v.scope)), ("Period", esc(v.period))]
    if v.budget is not None:
        facts.append(("Budget", f"{esc(v.budget)} ({v.amount} {cur})"))
    if v.threshold_pct is not None:
        facts.append(("Threshold", f"{v.threshold_pct}% = {v.limit} {cur}"))
    if v.also:
        facts.append(("Also crossed", _also(v)))
    used = f" ({v.used_pct}% of the budget)" if v.used_pct is not None and v.budget else ""
    facts += [
        ("Spent", f"{v.spent} {cur}{used}"),
        ("Limit", f"{v.limit} {cur}"),
        ("Over by", f"{v.over_by} {cur}"),
    ]
    if v.forecast is not None:
        facts.append(("Forecast", f"{v.forecast} {cur}"))
    return facts
