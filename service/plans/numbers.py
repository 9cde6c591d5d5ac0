"""Plan numbers read exactly from their decimal text and written back as plain decimals.

A malformed or out-of-range number is a :class:`PlanError` naming its JSON path.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from fractions import Fraction

from costcore import parse_quantity, round_half_even_div
from costcore.money import decimal_bound_problem

from .model import PlanError

__all__ = ["decimal_text", "fixed_text", "parse_decimal", "parse_micro"]


def parse_decimal(text: str, field: str) -> Decimal:
    """A finite decimal, or a `PlanError` at `field`."""
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise PlanError(field, f"not a decimal number: {text!r}") from exc
    if not value.is_finite():
        raise PlanError(field, f"must be a finite number, got {text!r}")
    problem = decimal_bound_problem(value)  # "1e999" passes the pattern of a FLOPS figure
    if problem is not None:
        raise PlanError(field, f"{problem}, got {text[:40]!r}")
    return value


def parse_micro(text: str, field: str) -> int:
    """A quantity in micro-units (10⁻⁶), or a `PlanError` at `field`."""
    try:
        return parse_quantity(parse_decimal(text, field))
    except ValueError as exc:
        if isinstance(exc, PlanError):
            raise
        raise PlanError(field, str(exc)) from exc


def fixed_text(value: Fraction, decimals: int) -> str:
    """``value`` rounded half-even to ``decimals`` places; trailing zeros stripped."""
    scaled = round_half_even_div(value.numerator * 10**decimals, value.denominator)
    sign = "-" if scaled < 0 else ""
    whole, frac = divmod(abs(scaled), 10**decimals)
    frac_text = str(frac).rjust(decimals, "0").rstrip("0") if decimals else ""
    return f"{sign}{whole}.{frac_text}" if frac_text else f"{sign}{whole}"


def decimal_text(value: Decimal) -> str:
    """Plain (non-scientific) text of a finite decimal, without trailing zeros."""
    return fixed_text(Fraction(value), max(0, -_exponent(value)))


def _exponent(value: Decimal) -> int:
    exponent = value.normalize().as_tuple().exponent
    assert isinstance(exponent, int)
    return exponent
