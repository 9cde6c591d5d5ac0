"""Figures as the command line shows them to people: money through the one formatter for
people (`costcore.money.amount_for_people`: thousands grouped, the currency's minor units),
other quantities grouped and exact, counts with their plural right, times readable. The JSON
a command prints with `--json` keeps the service's exact figures."""

from __future__ import annotations

from datetime import UTC, datetime

from costcore.money import amount_for_people, number_for_people

__all__ = ["count", "escaped", "grouped", "money", "none_line", "when"]


def money(value: object, currency: str, code: bool = True) -> str:
    """`"846855.311564552", "USD"` -> `"846,855.31 USD"` (without the code when the column's
    header names it)."""
    text = amount_for_people(value, currency)
    return text if code or not currency else text.removesuffix(" " + currency)


def grouped(value: object) -> str:
    """An exact decimal with its thousands grouped, nothing rounded: `"58982.136839"` ->
    `"58,982.136839"` (`costcore.money.number_for_people`)."""
    return number_for_people(value)


def count(n: int, singular: str, plural: str | None = None) -> str:
    """`1 row`, `2 rows`, `0 rows`; `plural` when adding "s" is wrong."""
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


def when(value: object) -> str:
    """A time as people read it, in UTC: a Unix timestamp (seconds) or an ISO 8601 text ->
    `2026-12-03 15:42 UTC`; anything else as it is."""
    try:
        if isinstance(value, int | float) or (isinstance(value, str) and _is_number(value)):
            moment = datetime.fromtimestamp(float(value), UTC)
        elif isinstance(value, str):
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        else:
            return str(value)
    except (ValueError, OverflowError, OSError):
        return str(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def none_line(text: str) -> None:
    """An empty list said in words (on stdout, where the table would be), not an empty table."""
    from .ui import ui

    ui.out.print(text, markup=False, highlight=False)


def escaped(value: object) -> str:
    """A value as text inside rich markup: its brackets are not markup."""
    from rich.markup import escape

    return escape(str(value))
