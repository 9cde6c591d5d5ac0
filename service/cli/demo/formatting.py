"""How the demo shows figures: money rounded for display, shares, and compact tables."""

from __future__ import annotations

from decimal import Decimal

from rich.table import Table

from costcore.money import amount_for_people


def money(value: str | Decimal | int, currency: str = "USD") -> str:
    """`1,234.57 USD`: the one formatter for people (`costcore.money.amount_for_people`);
    the ledger and its JSON answers keep the exact nanos."""
    return amount_for_people(value, currency)


def num(value: str | Decimal | int, currency: str = "USD") -> str:
    """`1,234.57`: as `money`, for a table whose column header names the currency."""
    return money(value, currency).removesuffix(" " + currency)


def pct(value: str | Decimal) -> str:
    return f"{Decimal(value) * 100:.1f} %"


def short_budget(name: str) -> str:
    return name.replace("plan 7b-base / ", "plan: ").replace("plan 7b-base", "plan: whole")


def compact_table(*columns: str) -> Table:
    """A compact table; columns named with a leading '>' are right-aligned (figures)."""
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in columns:
        right = col.startswith(">")
        table.add_column(col.lstrip(">"), justify="right" if right else "left", no_wrap=right)
    return table
