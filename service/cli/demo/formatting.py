"""How the demo shows figures: money rounded for display, shares, and compact tables."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

from rich.table import Table


def money(value: str | Decimal | int, currency: str = "USD") -> str:
    """`USD 1,234.57`: rounded half-even to cents for display (the ledger keeps nanos)."""
    return f"{currency} {num(value)}"


def num(value: str | Decimal | int) -> str:
    amount = Decimal(value).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    return f"{amount:,.2f}"


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
