"""FOCUS billing exports read row by row: the columns this ledger uses, their checks, and one
row in exact integer form (pure: no I/O).

FOCUS 1.0 and 1.2 name the columns alike; 1.2 adds `InvoiceId` (among others), so a header
holding `InvoiceId` reads as 1.2. Amounts may be negative (credits, corrections) and may carry
more than nine decimals: each row's amounts are rounded half-even to nano units (10**-9), so
a row always gives the same integers whatever file or batch it arrives in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from ..errors import Invalid

NANO = Decimal(10) ** 9
# Columns a row cannot be read without (FOCUS requires them of every row in both versions).
REQUIRED = (
    "BilledCost",
    "EffectiveCost",
    "BillingCurrency",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
)
# Columns read when present (null or absent: empty).
OPTIONAL = (
    "ChargeClass",
    "ConsumedQuantity",
    "ConsumedUnit",
    "SkuId",
    "SkuPriceId",
    "ServiceName",
    "ResourceId",
    "SubAccountId",
    "Tags",
    "InvoiceId",
)
MAX_COLUMNS = 500
# Largest absolute amount (nano) one row may carry: Redis sums are signed 64-bit.
ROW_LIMIT = 10**17


class BillError(Invalid):
    """A billing export that cannot be imported: the `row` (1 = the first data row; 0 = the
    header) and the `column` it fails at. Nothing of the file is kept."""

    def __init__(self, row: int, column: str, reason: str) -> None:
        self.row = row
        self.column = column
        where = "header" if row == 0 else f"row {row}"
        super().__init__(column, f"{where}: {reason}")

    def problem_members(self) -> dict[str, object]:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class Header:
    """The columns of a file, by position, and the FOCUS version they read as."""

    positions: dict[str, int]
    version: str


@dataclass(frozen=True)
class BillRow:
    """One bill row as the ledger keeps it: amounts and quantity in nano units, the day its
    charge period starts (UTC), and what the mappings match on."""

    day: date
    period_end: datetime
    billed_nano: int
    effective_nano: int
    quantity_nano: int
    unit: str
    currency: str
    correction: bool
    sku_id: str
    sku_price_id: str
    service_name: str
    resource_id: str
    sub_account_id: str
    tags: tuple[tuple[str, str], ...]
    invoice_id: str
    billing_period: str


def read_header(cells: list[str]) -> Header:
    if len(cells) > MAX_COLUMNS:
        raise BillError(0, "*", f"more than {MAX_COLUMNS} columns")
    names = [c.strip().lstrip("\ufeff") for c in cells]
    positions: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in positions:
            raise BillError(0, name, "column named twice")
        positions[name] = i
    for name in REQUIRED:
        if name not in positions:
            raise BillError(0, name, "required FOCUS column missing")
    return Header(positions, "1.2" if "InvoiceId" in positions else "1.0")


def _nano(text: str, row: int, column: str, nullable: bool) -> int:
    if text == "" and nullable:
        return 0
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise BillError(row, column, f"not a decimal number: {text[:40]!r}") from None
    if not value.is_finite():
        raise BillError(row, column, f"not a finite number: {text[:40]!r}")
    if abs(value) > ROW_LIMIT // 10**9:
        raise BillError(row, column, f"too large: {text[:40]!r}")
    nano = int((value * NANO).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    if abs(nano) > ROW_LIMIT:
        raise BillError(row, column, f"too large: {text[:40]!r}")
    return nano


def _time(text: str, row: int, column: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BillError(row, column, f"not an ISO 8601 date-time: {text[:40]!r}") from None
    # FOCUS times are UTC; one written without an offset is read as UTC.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _tags(text: str, row: int) -> tuple[tuple[str, str], ...]:
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise BillError(row, "Tags", "not a JSON object") from None
    if not isinstance(value, dict):
        raise BillError(row, "Tags", "not a JSON object")
    return tuple(
        sorted((str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in value.items())
    )


def read_row(header: Header, cells: list[str], row: int) -> BillRow:
    """One data row (`row` counts from 1), or a BillError naming the row and the column."""
    if len(cells) != len(header.positions):
        raise BillError(
            row, "*", f"{len(cells)} cells where the header has {len(header.positions)}"
        )

    def cell(name: str) -> str:
        i = header.positions.get(name)
        return "" if i is None else cells[i]

    start = _time(cell("ChargePeriodStart"), row, "ChargePeriodStart")
    end = _time(cell("ChargePeriodEnd"), row, "ChargePeriodEnd")
    if end < start:
        raise BillError(row, "ChargePeriodEnd", "before ChargePeriodStart")
    billing_start = _time(cell("BillingPeriodStart"), row, "BillingPeriodStart")
    _time(cell("BillingPeriodEnd"), row, "BillingPeriodEnd")
    currency = cell("BillingCurrency").strip()
    if not currency:
        raise BillError(row, "BillingCurrency", "empty")
    if not cell("ChargeCategory").strip():
        raise BillError(row, "ChargeCategory", "empty")
    return BillRow(
        day=start.date(),
        period_end=end,
        billed_nano=_nano(cell("BilledCost"), row, "BilledCost", nullable=False),
        effective_nano=_nano(cell("EffectiveCost"), row, "EffectiveCost", nullable=False),
        quantity_nano=_nano(cell("ConsumedQuantity"), row, "ConsumedQuantity", nullable=True),
        unit=cell("ConsumedUnit"),
        currency=currency,
        correction=cell("ChargeClass").strip() == "Correction",
        sku_id=cell("SkuId"),
        sku_price_id=cell("SkuPriceId"),
        service_name=cell("ServiceName"),
        resource_id=cell("ResourceId"),
        sub_account_id=cell("SubAccountId"),
        tags=_tags(cell("Tags"), row),
        invoice_id=cell("InvoiceId"),
        billing_period=billing_start.date().isoformat(),
    )
