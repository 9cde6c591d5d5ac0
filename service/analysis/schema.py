"""Schema pieces every analysis shares: input string types and the parts of an answer.

Every answer lists the compared `options` (name, totals, breakdown `Line`s), the
`recommended` option, the `Savings`, a `BreakEven` with its definition, and the
`assumptions` (formulas and units).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

import msgspec

from costcore.money import MAX_FRACTION_DIGITS

from ..events.model import DECIMAL_PATTERN, SIGNED_DECIMAL_PATTERN
from .arithmetic import money_text, percent_text

__all__ = [
    "CURRENCY_PATTERN",
    "DECIMAL_PATTERN",
    "NAME_PATTERN",
    "PROBABILITY_PATTERN",
    "SIGNED_DECIMAL_PATTERN",
    "SKU_PATTERN",
    "BreakEven",
    "Currency",
    "DecimalString",
    "Line",
    "Name",
    "ProbabilityString",
    "Savings",
    "SignedDecimalString",
    "savings_versus",
]

CURRENCY_PATTERN = r"^[A-Z]{3}$(?!\n)"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$(?!\n)"
SKU_PATTERN = r"^[a-z0-9][a-z0-9_.\-]{0,127}$(?!\n)"
PROBABILITY_PATTERN = (
    f"^(0(\\.[0-9]{{1,{MAX_FRACTION_DIGITS}}})?|1(\\.0{{1,{MAX_FRACTION_DIGITS}}})?)$(?!\\n)"
)

Currency = Annotated[
    str,
    msgspec.Meta(
        pattern=CURRENCY_PATTERN,
        description="ISO 4217 code of every money amount in request and answer",
        examples=["USD"],
    ),
]
DecimalString = Annotated[
    str,
    msgspec.Meta(pattern=DECIMAL_PATTERN, description="non-negative decimal as a string"),
]
SignedDecimalString = Annotated[
    str,
    msgspec.Meta(pattern=SIGNED_DECIMAL_PATTERN, description="decimal as a string"),
]
ProbabilityString = Annotated[
    str,
    msgspec.Meta(pattern=PROBABILITY_PATTERN, description="decimal between 0 and 1 as a string"),
]
Name = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN)]


class Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of a breakdown: a named quantity, its value, its unit and how it was computed."""

    item: str
    value: str
    unit: str
    formula: str = ""


class Savings(msgspec.Struct, kw_only=True):
    """How much cheaper the recommended option is than `versus` (negative: dearer)."""

    amount: str
    currency: str
    percent: str | None
    versus: str
    definition: str


class BreakEven(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The value of `quantity` at which the compared costs meet (or the optimum); null if none."""

    quantity: str
    value: str | None
    unit: str
    definition: str
    note: str = ""


def savings_versus(
    recommended: str,
    recommended_total: Decimal,
    versus: str,
    versus_total: Decimal,
    currency: str,
    definition: str,
) -> Savings:
    """How much the recommended option saves against `versus` (negative: it costs more)."""
    diff = versus_total - recommended_total
    return Savings(
        amount=money_text(diff),
        currency=currency,
        percent=percent_text(diff, versus_total),
        versus=versus,
        definition=definition,
    )


# Both measured analyses: the tokens a verdict's option is scaled to (analysis/verdict.py).
ScaleTokens = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=10**18,
        description="tokens at full scale for the verdict's scale-up figures (tokens); needs "
        "experiments; default: the winner's planned_tokens in the evaluation settings",
    ),
]
