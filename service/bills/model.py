"""The reconciliation's pure rules: which bill rows a project's mapping takes, which rate-card
SKU a row is, and each drift cell's status (no I/O, no clock).

A bill row is kept under its *bill key*: what the mappings match on (SkuId, SkuPriceId,
ServiceName, ResourceId, SubAccountId, ConsumedUnit, Tags). A row belongs to the first project,
in name order, whose mapping matches it (a row is never counted twice); a row no mapping
matches is unattributed spend. Mappings are applied when the report is read, so changing one
re-attributes the bills already imported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Annotated, Literal

import msgspec

from ..errors import Invalid
from .focus import BillRow

KEY_SEP = "\x1f"
UNMAPPED_SKU = "(unmapped)"
# Reconciled: the bill's EffectiveCost within max(ABS, REL x |EffectiveCost|) of the ledger's.
TOLERANCE_ABS_NANO = 10_000_000  # 0.01 of the currency
TOLERANCE_REL = Decimal("0.005")  # 0.5 %
# A provider may still add rows for recent days: days ending later than this before the newest
# ChargePeriodEnd of the imported bills are pending.
OPEN_WINDOW = timedelta(hours=48)
NANO = Decimal(10) ** 9

Status = Literal[
    "reconciled", "over", "under", "billed_not_metered", "metered_not_billed", "pending"
]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class ProjectMatch(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One way a bill row belongs to the project: every condition given must hold (a tag key,
    with its value if given; a sub-account; a resource id prefix)."""

    tag_key: Text | None = None
    tag_value: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    sub_account_id: Text | None = None
    resource_id_prefix: Text | None = None


class SkuMatch(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Which rate-card SKU a bill row is: every condition given must hold. `quantity_factor`
    turns the bill's ConsumedQuantity into the rate card's unit (3600 for seconds to hours of
    a SKU priced per hour, say)."""

    sku: Annotated[str, msgspec.Meta(min_length=1, max_length=128, examples=["gpu.h100.hour"])]
    sku_id: Text | None = None
    sku_price_id: Text | None = None
    service_name: Text | None = None
    consumed_unit: Text | None = None
    quantity_factor: Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,12}(\.[0-9]{1,9})?$")] = "1"


class BillMapping(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `PUT /v1/bills/mappings/{project}`: which bill rows are the project's (any of
    `match`), and which rate-card SKU each is (the first of `skus` that matches; none: the
    row's SKU is `(unmapped)`)."""

    match: Annotated[list[ProjectMatch], msgspec.Meta(min_length=1, max_length=100)]
    skus: Annotated[list[SkuMatch], msgspec.Meta(max_length=1000)] = msgspec.field(
        default_factory=list
    )


class BillMappingView(msgspec.Struct):
    """A project's bill mapping, as stored."""

    project: str
    match: list[ProjectMatch]
    skus: list[SkuMatch]


def check_mapping(mapping: BillMapping) -> None:
    for i, rule in enumerate(mapping.match):
        if not (rule.tag_key or rule.sub_account_id or rule.resource_id_prefix):
            raise Invalid(f"$.match[{i}]", "give tag_key, sub_account_id or resource_id_prefix")
        if rule.tag_value is not None and rule.tag_key is None:
            raise Invalid(f"$.match[{i}].tag_value", "needs tag_key")
    for i, sku in enumerate(mapping.skus):
        if not (sku.sku_id or sku.sku_price_id or sku.service_name):
            raise Invalid(f"$.skus[{i}]", "give sku_id, sku_price_id or service_name")
        if Decimal(sku.quantity_factor) == 0:
            raise Invalid(f"$.skus[{i}].quantity_factor", "must not be 0")


@dataclass(frozen=True)
class BillKey:
    """What the mappings match a bill row on."""

    sku_id: str
    sku_price_id: str
    service_name: str
    resource_id: str
    sub_account_id: str
    unit: str
    tags: dict[str, str]

    def encode(self) -> str:
        tags = json.dumps(self.tags, sort_keys=True, separators=(",", ":"))
        parts = (self.sku_id, self.sku_price_id, self.service_name, self.resource_id)
        return KEY_SEP.join((*parts, self.sub_account_id, self.unit, tags))

    @classmethod
    def decode(cls, text: str) -> BillKey:
        sku_id, price_id, service, resource, account, unit, tags = text.split(KEY_SEP, 6)
        return cls(sku_id, price_id, service, resource, account, unit, json.loads(tags))

    @classmethod
    def of(cls, row: BillRow) -> BillKey:
        return cls(
            row.sku_id,
            row.sku_price_id,
            row.service_name,
            row.resource_id,
            row.sub_account_id,
            row.unit,
            dict(row.tags),
        )


def _matches(rule: ProjectMatch, key: BillKey) -> bool:
    if rule.tag_key is not None:
        if rule.tag_key not in key.tags:
            return False
        if rule.tag_value is not None and key.tags[rule.tag_key] != rule.tag_value:
            return False
    if rule.sub_account_id is not None and key.sub_account_id != rule.sub_account_id:
        return False
    prefix = rule.resource_id_prefix
    return prefix is None or key.resource_id.startswith(prefix)


def owner_of(key: BillKey, mappings: Sequence[tuple[str, BillMapping]]) -> str | None:
    """The project a bill key belongs to: the first in name order whose mapping matches."""
    for project, mapping in sorted(mappings, key=lambda pm: pm[0]):
        if any(_matches(rule, key) for rule in mapping.match):
            return project
    return None


def sku_of(key: BillKey, mapping: BillMapping) -> tuple[str, Decimal]:
    """The rate-card SKU of a bill key and the factor to its unit (`(unmapped)`, 1: none)."""
    for rule in mapping.skus:
        if rule.sku_id is not None and key.sku_id != rule.sku_id:
            continue
        if rule.sku_price_id is not None and key.sku_price_id != rule.sku_price_id:
            continue
        if rule.service_name is not None and key.service_name != rule.service_name:
            continue
        if rule.consumed_unit is not None and key.unit != rule.consumed_unit:
            continue
        return rule.sku, Decimal(rule.quantity_factor)
    return UNMAPPED_SKU, Decimal(1)


@dataclass
class BillSums:
    """A bill's sums in one cell: amounts and quantity in nano, rows and correction rows."""

    billed: int = 0
    effective: int = 0
    quantity: Decimal = Decimal(0)  # nano units of the rate card's unit (after the factor)
    rows: int = 0
    corrections: int = 0

    def add(self, other: BillSums) -> None:
        self.billed += other.billed
        self.effective += other.effective
        self.quantity += other.quantity
        self.rows += other.rows
        self.corrections += other.corrections


def pending_from(newest_end: datetime | None) -> date | None:
    """The first day still open: a day is pending when it ends later than OPEN_WINDOW before
    the newest ChargePeriodEnd imported (and every day after it)."""
    if newest_end is None:
        return None
    return (newest_end - OPEN_WINDOW).date()


def status_of(
    day: date, ledger_cost: int | None, bill: BillSums | None, first_pending: date | None
) -> Status:
    """A cell's status: the bill against the ledger (`over`: the bill is the higher)."""
    if first_pending is not None and day >= first_pending:
        return "pending"
    if bill is None:
        return "metered_not_billed"
    if ledger_cost is None:
        return "billed_not_metered"
    diff = bill.effective - ledger_cost
    allowed = max(Decimal(TOLERANCE_ABS_NANO), TOLERANCE_REL * abs(bill.effective))
    if abs(diff) <= allowed:
        return "reconciled"
    return "over" if diff > 0 else "under"


def unit_price(cost_nano: int, quantity_nano: Decimal) -> str | None:
    """Cost per unit, rounded half-even to 9 decimals (None without a quantity)."""
    if quantity_nano == 0:
        return None
    price = (Decimal(cost_nano) / quantity_nano).quantize(Decimal("1E-9"), ROUND_HALF_EVEN)
    return format_decimal(price)


def format_decimal(value: Decimal) -> str:
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def nano_text(nano: int | Decimal) -> str:
    return format_decimal(Decimal(nano) / NANO)
