"""Exact decimal arithmetic, number formatting and the error type shared by the analyses.

Money is computed with `decimal.Decimal` at 50 significant digits (half-even, traps on) and
returned as decimal strings: amounts rounded half-even to 0.01 of the request currency,
per-unit rates (per token) to 15 decimal places, other quantities to 6.
"""

from __future__ import annotations

import decimal
import functools
import re
from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Decimal
from typing import ParamSpec, TypeVar

import msgspec

from ..errors import Invalid

__all__ = [
    "HOURS_PLACES",
    "MONEY_PLACES",
    "PRECISION",
    "RATE_PLACES",
    "AnalysisError",
    "exact",
    "money_text",
    "number_text",
    "percent_text",
    "quantize",
    "rate_text",
    "revalidate",
]

PRECISION = 50
MONEY_PLACES = 2
RATE_PLACES = 15
HOURS_PLACES = 6

_CONTEXT = decimal.Context(
    prec=PRECISION,
    rounding=ROUND_HALF_EVEN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)
_HUNDRED = Decimal(100)

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound=msgspec.Struct)


class AnalysisError(Invalid, ValueError):
    """A request the schema accepts but the analysis cannot; `field` is the JSON path."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


def exact(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run `fn` in the analyses' decimal context (50 digits, half-even, traps on)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with decimal.localcontext(_CONTEXT):
            return fn(*args, **kwargs)

    return wrapper


_PATH_RE = re.compile(r"at `(\$[^`]*)`")


def revalidate(req: _S) -> _S:
    """Re-check a request against its schema (a Struct built in Python skips validation)."""
    try:
        return msgspec.convert(msgspec.to_builtins(req), type(req))
    except msgspec.ValidationError as exc:
        found = _PATH_RE.search(str(exc))
        raise AnalysisError(found.group(1) if found else "$", str(exc)) from exc


def quantize(x: Decimal, places: int) -> Decimal:
    """`x` rounded half-even to `places` decimals; never a negative zero."""
    q = x.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
    return q.copy_abs() if q == 0 else q


def money_text(x: Decimal) -> str:
    """An amount of money: rounded half-even to 0.01, always two decimals."""
    return f"{quantize(x, MONEY_PLACES):f}"


def number_text(x: Decimal, places: int = HOURS_PLACES) -> str:
    """A quantity rounded half-even to `places` decimals, trailing zeros dropped."""
    text = f"{quantize(x, places):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def rate_text(x: Decimal) -> str:
    """A per-unit price (e.g. per token): rounded half-even to 15 decimals."""
    return number_text(x, RATE_PLACES)


def percent_text(part: Decimal, whole: Decimal) -> str | None:
    """`part` as a percentage of `whole` to 2 decimals; None when `whole` is 0."""
    return None if whole == 0 else f"{quantize(part / whole * _HUNDRED, 2):f}"
