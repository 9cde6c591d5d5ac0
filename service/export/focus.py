"""FOCUS 1.2 export: the accepted-event log as a FinOps cost-and-usage CSV.

FOCUS is the FinOps Foundation's Open Cost and Usage Specification. This module maps
trainledger's ledger onto its CostAndUsage dataset, version 1.2; stream.py streams it as CSV
straight from the log, one log page at a time, so an export never holds more than one page
of the log and one chunk of output in memory, and pricing.py prices each logged event again
(its parts at each tier).

Grain: one row per accepted event, for auditability (``x_EventId`` names the event). The one
exception follows the pricing itself: an event whose quantity crosses a graduated-tier
boundary is priced in parts (see README, "graduated tiers"), so it becomes one row per tier
it touches, each with that tier's own unit price and ``SkuPriceId``; its rows' ``BilledCost``
add up to exactly the event's ledger cost. With ``granularity=hour|day`` the export merges
these rows per UTC charge period instead (aggregate.py: exact sums, one period in memory).

Column mapping (FOCUS columns first, alphabetically; then trainledger's own, ``x_``-prefixed):

========================  ==================================================================
BilledCost                the event's cost as the ledger charged it (nano-exact decimal);
                          split across tier rows in proportion to their list cost, summing
                          exactly to the event's cost
BillingAccountId/Name     the project (each project keeps its own ledger and currency)
BillingCurrency           the currency of the rate-card version that priced the event
BillingPeriodStart/End    the calendar month (UTC) of the event: the period graduated tiers
                          accumulate over
ChargeCategory            "Usage"
ChargeClass               null (the ledger has no corrections of invoiced periods)
ChargeDescription         quantity, unit, SKU, unit price and tier, in words
ChargeFrequency           "Recurring" for a fixed SKU (paid whether used or not),
                          "Usage-Based" otherwise
ChargePeriodStart/End     the UTC hour that contains the event's time (aggregated: the
                          row's UTC hour or day)
CommitmentDiscountStatus  null (no commitment discounts; present because the validator
                          reads it in ConsumedQuantity's rules)
ConsumedQuantity/Unit     the row's quantity (exact) and the SKU's unit in FOCUS UnitFormat
                          spelling (``focus_unit``: "hour" -> "Hours", "GB-day" -> "GB-Days")
ContractedCost            ContractedUnitPrice × PricingQuantity, exact (up to 15 decimals)
ContractedUnitPrice       = ListUnitPrice: the rate card is the agreed price list
EffectiveCost             = BilledCost (no commitment discounts to amortize)
InvoiceId                 null (the ledger issues no invoices)
InvoiceIssuerName         PROVIDER ("trainledger")
ListCost                  ListUnitPrice × PricingQuantity, exact (up to 15 decimals)
ListUnitPrice             the SKU's unit price (its tier's price for a tiered SKU) in the
                          rate-card version recorded with the event
PricingCategory           "Standard"
PricingCurrency           = BillingCurrency (prices and bills are in one currency), and
PricingCurrency…          ContractedUnitPrice, EffectiveCost, ListUnitPrice: the same values
PricingQuantity/Unit      = ConsumedQuantity / ConsumedUnit (SKUs are priced per unit of use)
ProviderName              PROVIDER
PublisherName             PROVIDER
ServiceCategory           from the SKU category: compute→Compute, storage→Storage,
                          network→Networking, logging→Management and Governance,
                          data/ops/hidden→Other
ServiceName               "trainledger <category>"
ServiceSubcategory        Other (Compute|Storage|Networking), Observability (logging),
                          Other (Other)
SkuId                     the SKU code
SkuMeter                  the SKU's unit as the rate card writes it
SkuPriceDetails           tiered SKUs: {"x_Tier", "x_TierFrom", "x_TierUpTo"} (strings);
                          null for flat prices
SkuPriceId                "<rate card>/<SKU code>", "<rate card>/<SKU code>/tier-<n>" for
                          tier n of a graduated price: the price-list entry, stable over
                          time (no version or amount in it) and across projects
Tags                      the event's tags as a JSON object (user-defined: no prefix), or null
x_Project                 the project
x_Stage                   training stage
x_Experiment, x_Owner     as posted (null when empty)
x_EventId                 the event's id
x_EventTime               the event's exact time (RFC 3339, microseconds, UTC)
x_CostCategory            trainledger's category (compute, storage, …)
x_Fixed                   true/false
x_RateCard                the project's rate-card name
x_RateCardVersion         the version number recorded with the event when it was priced
x_Tags                    the event's tags as JSON, as requested for trainledger tools
                          (same content as Tags)
========================  ==================================================================

Prices and costs are those recorded when each event was accepted (the version number and
the cost are in the log), so an export is the audit record of what was charged. A rebuild
after a retroactive rate-card fix re-prices the totals but not the log: the export then
still shows the charges as first made. Splitting a tiered event needs the month's
cumulative quantity before it, which the export replays from the whole log in the order
it was applied (events outside [from, to) included); if the log was trimmed
(``log_retention_days``) inside a month, the split of that month's tiered events is an
estimate, though each event's rows still add up to its exact ledger cost.

Validated with the FinOps Foundation's ``focus-validator`` (rules for FOCUS 1.2) with the
applicability criteria in ``APPLICABILITY_CRITERIA``: see tests/integration/export/test_focus.py.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from costcore.money import format_money, format_quantity

from ..ledger.eventlog import LoggedEvent
from ..ratecards.model import PricedSku, RateCardVersion
from .pricing import Segment

FOCUS_VERSION = "1.2"
PROVIDER = "trainledger"

# The FOCUS 1.2 applicability criteria this export meets: the features of trainledger that
# make conditional columns mandatory. Anything not listed (regions, availability zones,
# commitment discounts, capacity reservations, sub-accounts, resources, virtual currencies,
# several pricing categories) is a concept trainledger does not have.
APPLICABILITY_CRITERIA: tuple[str, ...] = (
    "USAGE_MEASUREMENT_SUPPORTED",  # ConsumedQuantity, ConsumedUnit
    "PUBLIC_PRICE_LIST_SUPPORTED",  # ListUnitPrice: rate cards publish unit prices
    "UNIT_PRICING_SUPPORTED",  # SkuId, SkuPriceId, SkuMeter, SkuPriceDetails
    "NEGOTIATED_PRICING_SUPPORTED",  # ContractedUnitPrice
    "TAGGING_SUPPORTED",  # Tags
    "ACCOUNT_NAMING_SUPPORTED",  # BillingAccountName is never null
)

FOCUS_COLUMNS: tuple[str, ...] = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountStatus",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "Tags",
)
CUSTOM_COLUMNS: tuple[str, ...] = (
    "x_Project",
    "x_Stage",
    "x_Experiment",
    "x_Owner",
    "x_EventId",
    "x_EventTime",
    "x_CostCategory",
    "x_Fixed",
    "x_RateCard",
    "x_RateCardVersion",
    "x_Tags",
)
HEADER: tuple[str, ...] = FOCUS_COLUMNS + CUSTOM_COLUMNS
# The columns that hold numbers (decimal text) or the version number: written as they are.
# Every other cell is text, and is neutralised where it would start a spreadsheet formula
# (`service.export.csvsafe`); FOCUS's own values (enumerations, dates, currency codes, ids
# built from checked names) never start with one of its characters, so they are unchanged.
NUMERIC_COLUMNS: frozenset[str] = frozenset(
    {
        "BilledCost",
        "ConsumedQuantity",
        "ContractedCost",
        "ContractedUnitPrice",
        "EffectiveCost",
        "ListCost",
        "ListUnitPrice",
        "PricingCurrencyContractedUnitPrice",
        "PricingCurrencyEffectiveCost",
        "PricingCurrencyListUnitPrice",
        "PricingQuantity",
        "x_RateCardVersion",
    }
)
# trainledger category -> (ServiceCategory, ServiceSubcategory), values allowed by FOCUS 1.2.
SERVICE_CATEGORIES: dict[str, tuple[str, str]] = {
    "compute": ("Compute", "Other (Compute)"),
    "storage": ("Storage", "Other (Storage)"),
    "network": ("Networking", "Other (Networking)"),
    "logging": ("Management and Governance", "Observability"),
    "data": ("Other", "Other (Other)"),
    "ops": ("Other", "Other (Other)"),
    "hidden": ("Other", "Other (Other)"),
}
_OTHER = ("Other", "Other (Other)")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR_US = 3_600_000_000
_COST_SCALE = 10**15  # micro-units x nano-currency per unit
_tags_encoder = msgspec.json.Encoder(order="sorted")

Cell = str | None


def format_exact_cost(amount: int) -> str:
    """Exact decimal of ``amount`` micro-units × nano-currency (scale 10**15), written like
    ``format_money``: at least two decimals, no trailing zeros beyond, never an exponent."""
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), _COST_SCALE)
    frac_text = str(frac).rjust(15, "0").rstrip("0").ljust(2, "0")
    return f"{sign}{whole}.{frac_text}"


def format_instant(epoch_us: int) -> str:
    """FOCUS date/time: ``YYYY-MM-DDTHH:MM:SSZ`` (whole seconds, UTC)."""
    return (_EPOCH + timedelta(microseconds=epoch_us)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exact_instant(epoch_us: int) -> str:
    """RFC 3339 with microseconds, UTC (the hour's text is cached: rows come in runs)."""
    hour, rest = divmod(epoch_us, _HOUR_US)
    seconds, micros = divmod(rest, 1_000_000)
    minute, second = divmod(seconds, 60)
    return f"{_hour_prefix(hour)}{minute:02d}:{second:02d}.{micros:06d}Z"


@functools.lru_cache(maxsize=1024)
def _hour_prefix(hour: int) -> str:
    return (_EPOCH + timedelta(hours=hour)).strftime("%Y-%m-%dT%H:")


@functools.lru_cache(maxsize=4096)
def _price_text(nano: int) -> str:
    return format_money(nano)


def billing_period(epoch_us: int) -> tuple[str, str]:
    """The calendar month (UTC) holding the instant, as FOCUS start (inclusive), end (exclusive)."""
    return _billing_period(epoch_us // _HOUR_US)


@functools.lru_cache(maxsize=1024)
def _billing_period(hour: int) -> tuple[str, str]:
    when = _EPOCH + timedelta(hours=hour)
    start = datetime(when.year, when.month, 1, tzinfo=UTC)
    end = datetime(when.year + (when.month == 12), when.month % 12 + 1, 1, tzinfo=UTC)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")


def charge_period(epoch_us: int) -> tuple[str, str]:
    """The UTC hour holding the instant."""
    return _charge_period(epoch_us // _HOUR_US)


@functools.lru_cache(maxsize=1024)
def _charge_period(hour: int) -> tuple[str, str]:
    return format_instant(hour * _HOUR_US), format_instant((hour + 1) * _HOUR_US)


_TIME_UNITS = {
    name: singular
    for singular in ("Year", "Month", "Day", "Hour", "Minute", "Second")
    for name in (singular.lower(), singular.lower() + "s")
}
_COMPOUND_UNIT = re.compile(r"(?P<base>.*[^-_ /])\s*(?P<sep>[-_ /])\s*(?P<time>[A-Za-z]+)")


@functools.lru_cache(maxsize=256)
def focus_unit(unit: str) -> str:
    """A rate-card unit spelt in FOCUS UnitFormat where only the spelling differs.

    The time part is written as FOCUS writes it and the rest is kept: "hour" -> "Hours",
    "GB-day" and "GB_day" -> "GB-Days", "gpu_hour" -> "gpu-Hours", "GB/hour" -> "GB/Hour";
    "_" inside the base becomes a space. Any other unit is returned unchanged.
    """
    text = unit.strip()
    alone = _TIME_UNITS.get(text.lower())
    if alone is not None:
        return alone + "s"
    match = _COMPOUND_UNIT.fullmatch(text)
    if match is None:
        return unit
    time = _TIME_UNITS.get(match["time"].lower())
    if time is None:
        return unit
    base = " ".join(match["base"].replace("_", " ").split())
    if base.isdigit() and match["sep"] == " ":  # "5 hours": a number of units
        return f"{base} {time}s"
    return f"{base}/{time}" if match["sep"] == "/" else f"{base}-{time}s"


@dataclass(frozen=True)
class RowContext:
    """What every row of one export shares."""

    project: str
    rate_card: str
    provider: str = PROVIDER


def _price_terms(
    ctx: RowContext, sku: PricedSku, seg: Segment, description: str
) -> tuple[str, str | None, str]:
    """SkuPriceId, SkuPriceDetails and ChargeDescription: a tier's own price-list entry, its
    bounds, and the tier in words."""
    if seg.tier is None:
        return f"{ctx.rate_card}/{sku.code}", None, description
    price_id = f"{ctx.rate_card}/{sku.code}/tier-{seg.tier + 1}"
    bounds = {"x_Tier": str(seg.tier + 1), "x_TierFrom": format_quantity(seg.tier_from_micro)}
    span = f"from {bounds['x_TierFrom']}"
    if seg.tier_upto_micro is not None:
        bounds["x_TierUpTo"] = format_quantity(seg.tier_upto_micro)
        span += f" up to {bounds['x_TierUpTo']}"
    price_details = _tags_encoder.encode(bounds).decode()
    description += f" (tier {seg.tier + 1}: {span} {sku.unit} a month)"
    return price_id, price_details, description


def _custom_cells(ctx: RowContext, row: LoggedEvent, sku: PricedSku, tags: Cell) -> list[Cell]:
    """The ``x_`` cells, in ``CUSTOM_COLUMNS`` order."""
    return [
        ctx.project,  # x_Project
        row.stage,  # x_Stage
        row.experiment or None,  # x_Experiment
        row.owner or None,  # x_Owner
        row.id,  # x_EventId
        _exact_instant(row.epoch_us),  # x_EventTime
        row.category,  # x_CostCategory
        "true" if sku.fixed else "false",  # x_Fixed
        ctx.rate_card,  # x_RateCard
        str(row.version),  # x_RateCardVersion
        tags,  # x_Tags
    ]


def focus_row(
    ctx: RowContext,
    row: LoggedEvent,
    version: RateCardVersion,
    sku: PricedSku,
    seg: Segment,
) -> list[Cell]:
    """The CSV cells of one row, in ``HEADER`` order (None is an empty cell: FOCUS null)."""
    quantity = format_quantity(seg.quantity_micro)
    unit = focus_unit(sku.unit)
    unit_price = _price_text(seg.unit_price_nano)
    list_cost = format_exact_cost(seg.quantity_micro * seg.unit_price_nano)
    billed = format_money(seg.billed_nano)
    currency = version.currency
    bp_start, bp_end = billing_period(row.epoch_us)
    cp_start, cp_end = charge_period(row.epoch_us)
    service_category, service_subcategory = SERVICE_CATEGORIES.get(row.category, _OTHER)
    description = f"{quantity} {sku.unit} of {sku.code} at {unit_price} {currency} per {sku.unit}"
    price_id, price_details, description = _price_terms(ctx, sku, seg, description)
    tags = _tags_encoder.encode(row.tags).decode() if row.tags else None
    cells: list[Cell] = [
        billed,  # BilledCost
        ctx.project,  # BillingAccountId
        ctx.project,  # BillingAccountName
        currency,  # BillingCurrency
        bp_end,  # BillingPeriodEnd
        bp_start,  # BillingPeriodStart
        "Usage",  # ChargeCategory
        None,  # ChargeClass
        description,  # ChargeDescription
        "Recurring" if sku.fixed else "Usage-Based",  # ChargeFrequency
        cp_end,  # ChargePeriodEnd
        cp_start,  # ChargePeriodStart
        None,  # CommitmentDiscountStatus
        quantity,  # ConsumedQuantity
        unit,  # ConsumedUnit
        list_cost,  # ContractedCost
        unit_price,  # ContractedUnitPrice
        billed,  # EffectiveCost
        None,  # InvoiceId
        ctx.provider,  # InvoiceIssuerName
        list_cost,  # ListCost
        unit_price,  # ListUnitPrice
        "Standard",  # PricingCategory
        currency,  # PricingCurrency
        unit_price,  # PricingCurrencyContractedUnitPrice
        billed,  # PricingCurrencyEffectiveCost
        unit_price,  # PricingCurrencyListUnitPrice
        quantity,  # PricingQuantity
        unit,  # PricingUnit
        ctx.provider,  # ProviderName
        ctx.provider,  # PublisherName
        service_category,  # ServiceCategory
        f"{ctx.provider} {row.category}",  # ServiceName
        service_subcategory,  # ServiceSubcategory
        sku.code,  # SkuId
        sku.unit,  # SkuMeter
        price_details,  # SkuPriceDetails
        price_id,  # SkuPriceId
        tags,  # Tags
        *_custom_cells(ctx, row, sku, tags),
    ]
    return cells
