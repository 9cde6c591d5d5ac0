"""Money on the dashboard as people read it, through the one formatter for people
(`costcore.money.amount_for_people`): thousands grouped, rounded to the currency's minor
units. The exact figure the JSON API answers with stays on the element (a `title` to hover,
`data-exact` to read), so the page never cuts a digit off."""

from __future__ import annotations

from html import escape

from costcore.money import amount_for_people, minor_units, number_for_people

__all__ = ["axis_label", "grouped", "money_html", "people", "smallest_step", "tooltip"]


def people(value: str, currency: str) -> str:
    """`"1562.680000400"` -> `"1,562.68 USD"`."""
    return amount_for_people(value, currency)


def _exact(value: str, currency: str) -> str:
    return f"{value} {currency}" if currency else value


def money_html(value: str, currency: str) -> str:
    """The people figure in a span whose `title` and `data-exact` hold the exact amount."""
    return (
        f'<span class="money" title="{escape(_exact(value, currency))}" '
        f'data-exact="{escape(value)}">{escape(people(value, currency))}</span>'
    )


def tooltip(value: str, currency: str) -> str:
    """A chart tooltip's figure: as people read it, the exact amount after it when they differ."""
    shown = people(value, currency)
    exact = _exact(value, currency)
    return shown if shown == exact else f"{shown} (exactly {exact})"


def axis_label(tick: float, currency: str) -> str:
    """An axis tick as people read money, without the code (the axis names it once)."""
    text = amount_for_people(repr(tick), currency)
    return text.removesuffix(" " + currency) if currency else text


def smallest_step(currency: str) -> float:
    """The currency's smallest unit: axis ticks are never finer than that (0.01 USD, 1 JPY)."""
    return 10.0 ** -minor_units(currency)


def grouped(value: object) -> str:
    """A quantity as people read it: exact, thousands grouped (`"4032"` -> `"4,032"`)."""
    return number_for_people(value)
