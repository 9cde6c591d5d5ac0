"""Rate cards: named, versioned, effective-dated price lists.

A version is immutable once written; a `PUT` adds a version with its own
`effective_from`. An event is priced with the version in effect at the event's
own time, so a late event is priced as it would have been on time.
"""

from __future__ import annotations

import bisect
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Literal

import msgspec

from costcore.money import parse_price, parse_quantity
from costcore.rates import RateRow

from ..errors import Invalid
from ..events.model import DECIMAL_PATTERN, UNSAFE_TEXT_REASON, safe_text

CostCategory = Literal["compute", "storage", "network", "data", "logging", "ops", "hidden"]
COST_CATEGORIES: tuple[str, ...] = (
    "compute",
    "storage",
    "network",
    "data",
    "logging",
    "ops",
    "hidden",
)

SKU_PATTERN = r"^[a-z0-9][a-z0-9_.\-]{0,127}$(?!\n)"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$(?!\n)"
CURRENCY_PATTERN = r"^[A-Z]{3}$(?!\n)"
_SKU_RE = re.compile(SKU_PATTERN)

SkuCode = Annotated[str, msgspec.Meta(pattern=SKU_PATTERN, examples=["gpu.h100.hour"])]
DecimalString = Annotated[
    str,
    msgspec.Meta(pattern=DECIMAL_PATTERN, description="non-negative decimal as a string"),
]
UtcDatetime = Annotated[datetime, msgspec.Meta(tz=True)]


class Tier(msgspec.Struct, forbid_unknown_fields=True):
    """One step of a graduated price: applies to the cumulative monthly quantity up to `up_to`."""

    unit_price: DecimalString
    up_to: DecimalString | None = None


class Sku(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One SKU of a rate card: its code, category, unit and price (flat, or in tiers), and whether
    it is a fixed cost."""

    code: SkuCode
    category: CostCategory
    unit: Annotated[str, msgspec.Meta(min_length=1, max_length=32, examples=["hour"])]
    unit_price: DecimalString
    fixed: bool = False
    tiers: list[Tier] | None = None
    power_watts: Annotated[int, msgspec.Meta(ge=0, le=100_000)] | None = None
    description: Annotated[str, msgspec.Meta(max_length=500)] | None = None
    source: Annotated[str, msgspec.Meta(max_length=500)] | None = None


def pricing_facts(sku: Sku) -> tuple[object, ...]:
    """What of a SKU prices an event (its description and source do not): a new version that
    changes any of it for past events needs repricing. A new pricing rule's field goes here."""
    return (sku.category, sku.unit, sku.unit_price, sku.fixed, sku.tiers, sku.power_watts)


class RateCardIn(msgspec.Struct, forbid_unknown_fields=True):
    """Body of `PUT /v1/rate-cards/{name}`: one new version."""

    currency: Annotated[str, msgspec.Meta(pattern=CURRENCY_PATTERN, examples=["USD"])]
    effective_from: UtcDatetime
    skus: Annotated[list[Sku], msgspec.Meta(min_length=1, max_length=5000)]
    description: Annotated[str, msgspec.Meta(max_length=500)] | None = None
    # Not part of the version: what to do when it changes figures already priced
    # (service/jobs/reprice.py). Refused by default; true: stored, and the projects repriced.
    reprice: Annotated[
        bool,
        msgspec.Meta(
            description="A version effective before events already priced by the card is "
            "refused (409) unless this is true: then it is stored and every affected project "
            "is repriced by a job (202). Not stored with the version."
        ),
    ] = False


class RateCardVersion(msgspec.Struct, kw_only=True):
    """One version of a rate card: its SKUs and prices from `effective_from` on."""

    name: str
    version: int
    currency: str
    effective_from: datetime
    created_at: datetime
    skus: list[Sku]
    description: str | None = None


class RateCardView(msgspec.Struct, kw_only=True):
    """Answer of `GET /v1/rate-cards/{name}`: the version in effect now and the full history."""

    name: str
    current: RateCardVersion | None
    history: list[RateCardVersion]


class PricedSku(msgspec.Struct, frozen=True):
    """A SKU as the pricing core needs it: integer prices, tiers in micro-units."""

    code: str
    category: str
    unit: str
    fixed: bool
    unit_price_nano: int
    tiers: tuple[tuple[int | None, int], ...]  # (upto_micro or None, price_nano)
    power_watts: int | None

    @property
    def rate_row(self) -> RateRow:
        """The SKU's pricing rule as the pricing core reads it: its row of a
        `costcore.RateTable`, which `costcore.price_batch` and `costcore.price_segments` apply."""
        return RateRow(self.unit_price_nano, self.tiers)

    @property
    def cumulative(self) -> bool:
        """Whether its price depends on the quantity before an event (graduated tiers read the
        month's tier counter)."""
        return bool(self.tiers)


class RateCardError(Invalid, ValueError):
    """A rate card that cannot be accepted; `field` names the offending JSON path."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


def validate_rate_card(card: RateCardIn) -> dict[str, PricedSku]:
    """Check a rate card beyond its schema and return its SKUs in integer form."""
    priced: dict[str, PricedSku] = {}
    if card.description is not None and not safe_text(card.description):
        raise RateCardError("$.description", UNSAFE_TEXT_REASON)
    for i, sku in enumerate(card.skus):
        where = f"$.skus[{i}]"
        for name, text in (
            ("unit", sku.unit),
            ("description", sku.description),
            ("source", sku.source),
        ):
            if text is not None and not safe_text(text):
                raise RateCardError(f"{where}.{name}", UNSAFE_TEXT_REASON)
        if sku.code in priced:
            raise RateCardError(f"{where}.code", f"duplicate SKU code {sku.code!r}")
        priced[sku.code] = price_sku(sku, where)
    return priced


def price_sku(sku: Sku, where: str = "$") -> PricedSku:
    try:
        unit_price = parse_price(Decimal(sku.unit_price))
    except (ValueError, InvalidOperation) as exc:
        raise RateCardError(f"{where}.unit_price", str(exc)) from exc
    tiers: list[tuple[int | None, int]] = []
    previous = 0
    for k, tier in enumerate(sku.tiers or ()):
        tier_where = f"{where}.tiers[{k}]"
        try:
            price = parse_price(Decimal(tier.unit_price))
        except (ValueError, InvalidOperation) as exc:
            raise RateCardError(f"{tier_where}.unit_price", str(exc)) from exc
        last = k == len(sku.tiers or ()) - 1
        if tier.up_to is None:
            if not last:
                raise RateCardError(f"{tier_where}.up_to", "only the last tier may be unbounded")
            tiers.append((None, price))
            continue
        if last:
            raise RateCardError(
                f"{tier_where}.up_to", "the last tier must be unbounded (omit up_to)"
            )
        try:
            upto = parse_quantity(Decimal(tier.up_to))
        except (ValueError, InvalidOperation) as exc:
            raise RateCardError(f"{tier_where}.up_to", str(exc)) from exc
        if upto <= previous:
            raise RateCardError(f"{tier_where}.up_to", "tier bounds must strictly increase")
        previous = upto
        tiers.append((upto, price))
    return PricedSku(
        code=sku.code,
        category=sku.category,
        unit=sku.unit,
        fixed=sku.fixed,
        unit_price_nano=unit_price,
        tiers=tuple(tiers),
        power_watts=sku.power_watts,
    )


class RateCardHistory:
    """All versions of one card, ordered by `effective_from`, with their integer SKUs."""

    def __init__(self, versions: list[RateCardVersion]) -> None:
        # Two versions with the same effective_from: the later-created one wins.
        self.versions = sorted(versions, key=lambda v: (v.effective_from, v.version))
        self._starts = [v.effective_from for v in self.versions]
        self._priced: list[dict[str, PricedSku]] = [
            {s.code: price_sku(s) for s in v.skus} for v in self.versions
        ]

    def index_at(self, when: datetime) -> int:
        """Index of the version in effect at `when`, or -1 if none was yet."""
        return bisect.bisect_right(self._starts, when) - 1

    def version_at(self, when: datetime) -> RateCardVersion | None:
        i = self.index_at(when)
        return self.versions[i] if i >= 0 else None

    def priced(self, index: int) -> dict[str, PricedSku]:
        return self._priced[index]

    @property
    def currency(self) -> str | None:
        return self.versions[-1].currency if self.versions else None


def is_valid_sku(code: str) -> bool:
    return _SKU_RE.fullmatch(code) is not None
