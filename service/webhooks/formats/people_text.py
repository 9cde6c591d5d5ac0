"""What the Teams card and the email say, as plain (unescaped) text: one sentence on what
crossed what and by how much, the facts, the top drivers, with money for people: digit
grouping and the currency's own precision ("1,562.68 USD", "1,563 JPY", "12.346 KWD"). The
exact figures stay in the machine-readable parts (the ``standard`` format's body, the API).

Built from the same neutral view as the chat formats (`view.chat_view`). Money goes
through the one formatter for people (`costcore.money.format_money_for_people`)."""

from __future__ import annotations

from costcore.money import amount_for_people

from .regression_text import regression_facts, regression_summary
from .view import ChatView


def money_for_people(amount: str, currency: str) -> str:
    """A decimal string as people read money (`costcore.money.amount_for_people`)."""
    return amount_for_people(amount, currency)


def _plain(text: str) -> str:
    return text


def _money(v: ChatView, amount: str) -> str:
    return money_for_people(amount, v.currency)


def people_summary(v: ChatView) -> str:
    """One sentence: what crossed what, and by how much (or what regressed)."""
    if v.regression is not None:
        return regression_summary(v.regression, v.currency, _plain)
    budget = v.budget or "(none)"
    spent, limit, over = _money(v, v.spent), _money(v, v.limit), _money(v, v.over_by)
    if v.kind == "threshold":
        if v.threshold_pct is not None:
            return (
                f"Spent {spent} crossed the {v.threshold_pct}% threshold ({limit} of "
                f"{_money(v, v.amount)}) of budget {budget}, over by {over}."
            )
        return f"Spent {spent} crossed the limit {limit} of budget {budget}, over by {over}."
    if v.kind == "forecast":
        projected = _money(v, v.forecast if v.forecast is not None else v.spent)
        return (
            f"Forecast {projected} for {v.period} exceeds the limit {limit} of budget "
            f"{budget} by {over} (spent so far {spent})."
        )
    if v.kind == "growth":
        return f"Daily spend {spent} exceeded the growth limit {limit} by {over}."
    return f"Waste finding: {spent} against a limit of {limit}, over by {over}."


def people_facts(v: ChatView) -> list[tuple[str, str]]:
    """The alert's facts as (label, value)."""
    if v.regression is not None:
        return regression_facts(v.regression, v.project, v.currency, _plain)
    facts = [("Project", v.project), ("Scope", v.scope), ("Period", v.period)]
    if v.budget is not None:
        facts.append(("Budget", f"{v.budget} ({_money(v, v.amount)})"))
    if v.threshold_pct is not None:
        facts.append(("Threshold", f"{v.threshold_pct}% = {_money(v, v.limit)}"))
    facts += [
        ("Spent", _money(v, v.spent)),
        ("Limit", _money(v, v.limit)),
        ("Over by", _money(v, v.over_by)),
    ]
    if v.forecast is not None:
        facts.append(("Forecast", _money(v, v.forecast)))
    return facts


def people_drivers(v: ChatView) -> list[tuple[str, str]]:
    """The top drivers as (name, cost for people)."""
    return [(name, _money(v, cost)) for name, cost in v.drivers]
