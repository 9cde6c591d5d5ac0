"""Exact fixed-point money helpers.

Every amount on the money path is a Python ``int`` (an ``int64`` in arrays):

* quantities are micro-units: ``quantity * 10**6`` (``QUANTITY_SCALE``);
* unit prices are nano-currency per unit: ``price * 10**9`` (``PRICE_SCALE``);
* costs are nano-currency: ``cost * 10**9`` (``MONEY_SCALE``).

No ``float`` is used anywhere. Parsing goes straight from the ``Decimal`` digit tuple to an
integer, so it is exact and independent of the active ``decimal`` context.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from functools import cache

from iso4217 import Currency

__all__ = [
    "BOUND_REASON",
    "DECIMAL_TEXT_PATTERN",
    "INT64_MAX",
    "JSON_NUMBER_PATTERN",
    "MAX_FRACTION_DIGITS",
    "MAX_INTEGER_DIGITS",
    "MONEY_MAX",
    "MONEY_SCALE",
    "PRICE_DECIMALS",
    "PRICE_SCALE",
    "QUANTITY_DECIMALS",
    "QUANTITY_SCALE",
    "decimal_bound_problem",
    "decimal_text_problem",
    "format_money",
    "format_money_for_people",
    "format_quantity",
    "minor_units",
    "number_for_people",
    "parse_money",
    "parse_price",
    "parse_quantity",
    "quantity_for_people",
    "round_half_even_div",
]

INT64_MAX = 2**63 - 1

QUANTITY_DECIMALS = 6
PRICE_DECIMALS = 9
MONEY_DECIMALS = 9

QUANTITY_SCALE = 10**QUANTITY_DECIMALS
PRICE_SCALE = 10**PRICE_DECIMALS
MONEY_SCALE = 10**MONEY_DECIMALS

# The largest amount (nano) the ledger's sums hold: two int64 limbs, ``hi * 10**9 + lo``
# (service/storage/limbs.py, docs/exact-money.md).
MONEY_MAX = INT64_MAX * MONEY_SCALE + INT64_MAX

# A non-zero value whose adjusted exponent exceeds this cannot fit in int64 at any of our scales;
# rejecting it early avoids building astronomically large ints for inputs like "1E+999999999".
_MAX_INT_DIGITS = len(str(INT64_MAX))


# The text forms `parse_quantity` and `parse_price` read: an ASCII decimal, an optional
# leading "-", an optional fraction and exponent, nothing around it. `Decimal(str)` alone also
# takes " 1", "1_000", "+1", ".5", "5.", "1\n", full-width and other Unicode digits,
# "Infinity" and "NaN": no caller means those. (Event quantities are held to the stricter
# JSON-number form, `JSON_NUMBER_PATTERN`, by the event decoder; rate-card prices to
# ``^[0-9]+(\.[0-9]+)?$`` by their schema.)
DECIMAL_TEXT_PATTERN = r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$"
# A JSON number (RFC 8259, section 6): no leading zeros.
JSON_NUMBER_PATTERN = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"
_DECIMAL_TEXT = re.compile(DECIMAL_TEXT_PATTERN, re.ASCII)
_JSON_NUMBER = re.compile(JSON_NUMBER_PATTERN, re.ASCII)
# Longer texts are refused before a regular expression reads them (an int64 of micro- or
# nano-units has at most 19 digits; the rest is a sign, a point and an exponent).
_MAX_TEXT = 64


def decimal_text_problem(text: str, json_number: bool = False) -> str | None:
    """Why `text` is not a decimal in the accepted form (`DECIMAL_TEXT_PATTERN`, or
    `JSON_NUMBER_PATTERN` when `json_number`), or None when it is. Matched whole (never
    `re.search`, whose `$` also matches before a final newline)."""
    if len(text) > _MAX_TEXT:
        return f"is longer than {_MAX_TEXT} characters"
    if (_JSON_NUMBER if json_number else _DECIMAL_TEXT).fullmatch(text) is None:
        return (
            "is not a decimal number as JSON writes one in ASCII (digits, an optional '.' and "
            "digits, an optional exponent; no sign other than a leading '-', no spaces or '_'"
            + (", no leading zeros)" if json_number else ")")
        )
    return None


# The one bound of every decimal the API accepts besides the ledger's own columns (an
# evaluation's value, a progress value, a plan's, a policy's or an analysis's numbers, a
# tolerance): at most 24 digits before the point and 18 after it. Reports compare, subtract
# and multiply such values exactly; one of `1E+1000000` overflowed the decimal context and
# broke a project's waste report for good. The schema patterns of the decimal strings are
# built from these two numbers (`service.events.model.DECIMAL_PATTERN`), and a value that may
# carry an exponent is held to them by `decimal_bound_problem`.
MAX_INTEGER_DIGITS = 24
MAX_FRACTION_DIGITS = 18
BOUND_REASON = (
    f"must be a finite decimal of at most {MAX_INTEGER_DIGITS} digits before the point and "
    f"{MAX_FRACTION_DIGITS} after it"
)


def decimal_bound_problem(value: Decimal) -> str | None:
    """Why `value` is outside the bound (`MAX_INTEGER_DIGITS`, `MAX_FRACTION_DIGITS`), or None.
    Read from its digits and exponent alone: no arithmetic, so any stored value can be asked."""
    if not value.is_finite():
        return BOUND_REASON
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    significant = len(digits)
    while significant > 1 and digits[significant - 1] == 0:  # trailing zeros carry nothing
        significant -= 1
        exponent += 1
    if significant == 1 and digits[0] == 0:
        return None  # a zero, however written
    if exponent < -MAX_FRACTION_DIGITS or exponent + significant > MAX_INTEGER_DIGITS:
        return BOUND_REASON
    return None


def _to_decimal(value: Decimal | str | int, what: str) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"{what} must be a Decimal, str or int, not {type(value).__name__}")
    if isinstance(value, str):
        problem = decimal_text_problem(value)
        if problem is not None:
            raise ValueError(f"{what} {problem}: {value[:_MAX_TEXT]!r}")
    try:
        return Decimal(value)
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what} is not a decimal number: {value!r}") from None


def _parse_scaled(
    value: Decimal | str | int, decimals: int, what: str, most: int = INT64_MAX
) -> int:
    """Return ``value * 10**decimals`` exactly as an int, validating range (at most `most`)
    and precision."""
    d = _to_decimal(value, what)
    if d.is_nan():
        raise ValueError(f"{what} must be a number, got NaN")
    if d.is_infinite():
        raise ValueError(f"{what} must be finite, got {d}")
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)  # finite Decimal
    coefficient = int("".join(map(str, digits)))
    if coefficient == 0:
        return 0  # also covers -0 and 0E-50
    if sign:
        raise ValueError(f"{what} must not be negative, got {d}")
    # Strip trailing zeros of the coefficient so "1.50000000" counts as 2 decimal places.
    while coefficient % 10 == 0:
        coefficient //= 10
        exponent += 1
    if exponent < -decimals:
        raise ValueError(f"{what} has more than {decimals} decimal places: {d}")
    shift = exponent + decimals  # >= 0
    if len(str(coefficient)) + shift > len(str(most)):
        raise ValueError(f"{what} is too large: {d} (max {_format_fixed(most, decimals, 0)})")
    scaled: int = coefficient * 10**shift
    if scaled > most:
        raise ValueError(f"{what} is too large: {d} (max {_format_fixed(most, decimals, 0)})")
    return scaled


def parse_quantity(d: Decimal | str | int) -> int:
    """Parse a non-negative quantity into exact micro-units (``int64``).

    Raises ``ValueError`` for NaN/infinity, negative values, more than 6 decimal places, or a
    result above ``INT64_MAX`` micro-units; ``TypeError`` for floats and other types.
    """
    return _parse_scaled(d, QUANTITY_DECIMALS, "quantity")


def parse_price(d: Decimal | str | int) -> int:
    """Parse a non-negative unit price into exact nano-currency per unit (``int64``).

    Same checks as :func:`parse_quantity`, with at most 9 decimal places.
    """
    return _parse_scaled(d, PRICE_DECIMALS, "price")


def parse_money(d: Decimal | str | int) -> int:
    """Parse a non-negative amount of money (a total, a budget) into exact nano-currency.

    As :func:`parse_price`, but up to ``MONEY_MAX`` (what the ledger's sums hold, past int64).
    """
    return _parse_scaled(d, MONEY_DECIMALS, "amount", MONEY_MAX)


def _format_fixed(value: int, decimals: int, min_decimals: int) -> str:
    sign = "-" if value < 0 else ""
    whole, frac = divmod(abs(value), 10**decimals)
    frac_text = str(frac).rjust(decimals, "0").rstrip("0")
    if len(frac_text) < min_decimals:
        frac_text = frac_text.ljust(min_decimals, "0")
    return f"{sign}{whole}.{frac_text}" if frac_text else f"{sign}{whole}"


def format_money(nano: int) -> str:
    """Exact decimal string of a nano-currency amount.

    At least two decimals; trailing zeros beyond two are stripped:
    ``12500000000 -> "12.50"``, ``1 -> "0.000000001"``, ``-1500000000 -> "-1.50"``.
    """
    return _format_fixed(nano, MONEY_DECIMALS, 2)


@cache
def minor_units(currency: str) -> int:
    """The currency's minor units: its ISO 4217 exponent (``USD`` 2, ``JPY`` 0, ``KWD`` 3,
    ``CLF`` 4), from the ISO table the ``iso4217`` package ships. A code ISO gives no minor
    unit (``XAU``, ``XXX``) or does not know shows cents, the common precision."""
    try:
        exponent = Currency(currency).exponent
    except ValueError:
        return 2
    return 2 if exponent is None else exponent


def format_money_for_people(nano: int, currency: str) -> str:
    """A nano-currency amount as people read it: rounded (half to even) to the currency's
    minor units, thousands grouped with ",", the ISO code after it: ``1562680000400, "USD"
    -> "1,562.68 USD"``, ``"JPY" -> "1,563 JPY"``. An amount that is not zero but rounds to
    zero shows as below the smallest unit (``"<0.01 USD"``), never as a bare zero. Money
    shown to people goes through this; machine-readable answers keep `format_money`."""
    places = minor_units(currency)
    units = round_half_even_div(abs(nano), 10 ** (MONEY_DECIMALS - places))
    sign = "-" if nano < 0 else ""
    prefix = ""
    if units == 0 and nano != 0:
        prefix, units = "<", 1
    whole, frac = divmod(units, 10**places)
    text = f"{whole:,}" + (f".{frac:0{places}d}" if places else "")
    return f"{prefix}{sign}{text} {currency}" if currency else f"{prefix}{sign}{text}"


def amount_for_people(amount: object, currency: str) -> str:
    """A decimal amount as the API answers it (text or Decimal) shown to people, through
    `format_money_for_people`: the chat formats, the Teams card, the email and the CLI's
    tables all show money this one way. Text that is not a finite decimal is shown as it is."""
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        return f"{amount} {currency}" if currency else str(amount)
    nano = int(value.scaleb(MONEY_DECIMALS).to_integral_value(rounding=ROUND_HALF_EVEN))
    return format_money_for_people(nano, currency)


def quantity_for_people(micro: int) -> str:
    """A micro-unit quantity in a sentence for people: exact, thousands grouped
    (``20_736_000_000 -> "20,736"``, ``1_500_250_000 -> "1,500.25"``). Machine-readable
    fields keep `format_quantity`."""
    return number_for_people(format_quantity(micro))


def number_for_people(value: object) -> str:
    """An exact decimal (text or Decimal) with its thousands grouped, nothing rounded:
    ``"58982.136839" -> "58,982.136839"``, ``"4.2E+22" -> "42,000,...,000"``. Text that is not
    a finite decimal is shown as it is."""
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    return f"{number:,f}" if number.is_finite() else str(value)


def format_quantity(micro: int) -> str:
    """Exact decimal string of a micro-unit quantity without trailing zeros (``"3"``, ``"0.5"``)."""
    return _format_fixed(micro, QUANTITY_DECIMALS, 0)


def round_half_even_div(numerator: int, divisor: int) -> int:
    """``numerator / divisor`` rounded to the nearest integer, ties to even. Exact for any ints.

    Raises ``ZeroDivisionError`` if ``divisor`` is 0.
    """
    if divisor == 0:
        raise ZeroDivisionError("round_half_even_div: divisor is zero")
    if divisor < 0:
        numerator, divisor = -numerator, -divisor
    quotient, remainder = divmod(numerator, divisor)  # floor division: 0 <= remainder < divisor
    twice = 2 * remainder
    if twice > divisor or (twice == divisor and quotient % 2 == 1):
        quotient += 1
    return quotient
