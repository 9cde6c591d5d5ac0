"""FOCUS 1.2 export: the accepted-event log as a FinOps cost-and-usage CSV.

FOCUS is the FinOps Foundation's Open Cost and Usage Specification. This module maps
trainledger's ledger onto its CostAndUsage dataset, version 1.2, and streams it as CSV
straight from the log, one log page at a time, so an export never holds more than one page
of the log and one chunk of output in memory.

Grain: one row per accepted event, for auditability (``x_EventId`` names the event). The one
exception follows the pricing itself: an event whose quantity crosses a graduated-tier
boundary is priced in parts (see README, "graduated tiers"), so it becomes one row per tier
it touches, each with that tier's own unit price and ``SkuPriceId``; its rows' ``BilledCost``
add up to exactly the event's ledger cost.

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
ChargePeriodStart/End     the UTC hour that contains the event's time
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

import csv
import functools
import io
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from costcore.money import INT64_MAX, format_money, format_quantity, round_half_even_div

from ..ledger.eventlog import LoggedEvent, read_log
from ..projects.service import project_catalog
from ..ratecards.catalog import PricingCatalog, RateCards
from ..ratecards.model import PricedSku, RateCardVersion
from ..stores import Stores
from .csvsafe import neutralise

FOCUS_VERSION = "1.2"
PROVIDER = "trainledger"
DEFAULT_CHUNK_BYTES = 64 * 1024

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
_TEXT_POSITIONS: tuple[int, ...] = tuple(
    i for i, name in enumerate(HEADER) if name not in NUMERIC_COLUMNS
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


class ExportError(Exception):
    """The log cannot be exported as it stands (e.g. its rate card is gone)."""


@dataclass(frozen=True)
class Segment:
    """The part of one event priced at one unit price (the whole event for a flat price)."""

    quantity_micro: int
    unit_price_nano: int
    billed_nano: int
    tier: int | None = None  # 0-based tier index for a graduated price
    tier_from_micro: int = 0
    tier_upto_micro: int | None = None  # None: unbounded


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


def month_of(epoch_us: int) -> str:
    """``YYYYMM`` (UTC), the key graduated tiers accumulate under, as ingestion computes it."""
    return (_EPOCH + timedelta(microseconds=epoch_us)).strftime("%Y%m")


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


def segments(sku: PricedSku, quantity_micro: int, cost_nano: int, cum_before: int) -> list[Segment]:
    """Split one event as the pricing kernel does, and share its ledger cost among the parts.

    ``cum_before`` is the project's cumulative quantity of the SKU that month before the
    event (ignored for a flat price). Each part's billed cost is its share of ``cost_nano``
    in proportion to its exact list amount, rounded half-to-even cumulatively so the parts
    add up to ``cost_nano`` exactly.
    """
    if not sku.tiers:
        return [Segment(quantity_micro, sku.unit_price_nano, cost_nano)]
    cum_after = cum_before + quantity_micro
    parts: list[tuple[int, int, int | None, int, int]] = []  # tier, from, upto, qty, price
    lower = 0
    for k, (upto, price) in enumerate(sku.tiers):
        upper = INT64_MAX if upto is None else upto
        portion = max(0, min(cum_after, upper) - max(cum_before, lower))
        if portion or (quantity_micro == 0 and lower <= cum_before < upper):
            parts.append((k, lower, upto, portion, price))
        lower = upper
    if not parts:  # only past INT64_MAX, which ingestion never accepts
        raise ExportError(f"SKU {sku.code!r}: quantity beyond the last tier")
    amounts = [qty * price for _, _, _, qty, price in parts]
    total = sum(amounts)
    billed: list[int] = []
    running = shared = 0
    for i, amount in enumerate(amounts):
        running += amount
        if total:
            upto_here = round_half_even_div(cost_nano * running, total)
        else:  # nothing to share by: the last part carries the cost
            upto_here = cost_nano if i == len(amounts) - 1 else 0
        billed.append(upto_here - shared)
        shared = upto_here
    return [
        Segment(qty, price, b, k, lo, upto)
        for (k, lo, upto, qty, price), b in zip(parts, billed, strict=True)
    ]


@dataclass(frozen=True)
class RowContext:
    """What every row of one export shares."""

    project: str
    rate_card: str
    provider: str = PROVIDER


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
    if seg.tier is None:
        price_id = f"{ctx.rate_card}/{sku.code}"
        price_details = None
    else:
        price_id = f"{ctx.rate_card}/{sku.code}/tier-{seg.tier + 1}"
        bounds = {"x_Tier": str(seg.tier + 1), "x_TierFrom": format_quantity(seg.tier_from_micro)}
        span = f"from {bounds['x_TierFrom']}"
        if seg.tier_upto_micro is not None:
            bounds["x_TierUpTo"] = format_quantity(seg.tier_upto_micro)
            span += f" up to {bounds['x_TierUpTo']}"
        price_details = _tags_encoder.encode(bounds).decode()
        description += f" (tier {seg.tier + 1}: {span} {sku.unit} a month)"
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
    return cells


class _Pricing:
    """Finds the priced SKU of a logged event and replays the graduated-tier counters."""

    def __init__(self, catalog: PricingCatalog | None) -> None:
        self.catalog = catalog
        self._index: dict[int, int] = {}
        if catalog is not None:
            for i, v in enumerate(catalog.history.versions):
                self._index[v.version] = i
        self._cumulative: dict[tuple[str, str], int] = {}

    def sku_of(self, row: LoggedEvent) -> tuple[RateCardVersion, PricedSku]:
        if self.catalog is None:
            raise ExportError("the project's rate card no longer exists")
        history = self.catalog.history
        vi = self._index.get(row.version)
        if vi is None:  # not expected: versions are never deleted
            vi = history.index_at(_EPOCH + timedelta(microseconds=row.epoch_us))
        sku = history.priced(vi).get(row.sku) if vi >= 0 else None
        if sku is None:
            raise ExportError(
                f"event {row.id!r}: SKU {row.sku!r} is not in rate card "
                f"{self.catalog.name!r} version {row.version}"
            )
        return history.versions[vi], sku

    def segments(self, row: LoggedEvent, sku: PricedSku) -> list[Segment]:
        """The event's priced parts; advances the tier counter exactly as ingestion did."""
        if not sku.tiers:
            return segments(sku, row.quantity_micro, row.cost_nano, 0)
        key = (month_of(row.epoch_us), row.sku)
        before = self._cumulative.get(key, 0)
        self._cumulative[key] = before + row.quantity_micro
        return segments(sku, row.quantity_micro, row.cost_nano, before)


def _window_us(when: datetime | None) -> int | None:
    if when is None:
        return None
    delta = when.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def rows_of_batch(
    ctx: RowContext,
    pricing: _Pricing,
    batch: Sequence[LoggedEvent],
    start_us: int | None,
    end_us: int | None,
) -> Iterator[list[Cell]]:
    """Rows of one logged batch whose event time is in ``[start, end)``.

    Events outside the window still advance the tier counters: they shaped the prices.
    """
    for row in batch:
        inside = (start_us is None or row.epoch_us >= start_us) and (
            end_us is None or row.epoch_us < end_us
        )
        try:
            version, sku = pricing.sku_of(row)
        except ExportError:
            if inside:
                raise
            continue
        if not inside and not sku.tiers:
            continue
        parts = pricing.segments(row, sku)
        if inside:
            for seg in parts:
                yield focus_row(ctx, row, version, sku, seg)


@dataclass
class FocusExport:
    """One export of a project, its rate card and log position read before streaming."""

    store: Stores
    context: RowContext
    catalog: PricingCatalog | None
    last_entry: str  # the log entry the export stops at: later batches are not included

    def rows(
        self, start: datetime | None = None, end: datetime | None = None
    ) -> AsyncIterator[list[Cell]]:
        return self._rows(_window_us(start), _window_us(end))

    async def _rows(self, start_us: int | None, end_us: int | None) -> AsyncIterator[list[Cell]]:
        pricing = _Pricing(self.catalog)
        async for _, batch in read_log(self.store, self.context.project, self.last_entry):
            for cells in rows_of_batch(self.context, pricing, batch, start_us, end_us):
                yield cells

    async def csv_chunks(
        self,
        start: datetime | None = None,
        end: datetime | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> AsyncIterator[bytes]:
        """The CSV (header first) in chunks of about ``chunk_bytes`` (UTF-8)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(HEADER)
        async for cells in self.rows(start, end):
            for i in _TEXT_POSITIONS:
                cells[i] = neutralise(cells[i])
            writer.writerow(cells)
            if buffer.tell() >= chunk_bytes:
                yield buffer.getvalue().encode()
                buffer.seek(0)
                buffer.truncate()
        if buffer.tell():
            yield buffer.getvalue().encode()


async def prepare_export(store: Stores, rate_cards: RateCards, project: str) -> FocusExport:
    """Read what the export needs before the first byte is sent, so that a problem is an
    error answer rather than a truncated file."""
    settings, catalog = await project_catalog(store, rate_cards, project)
    card = settings.rate_card
    last = await store.ledger.last_log_entry(project)
    if last and catalog is None:
        raise ExportError(f"the project's rate card {card!r} no longer exists")
    return FocusExport(store, RowContext(project, card), catalog, last)


def export_filename(project: str, start: datetime | None, end: datetime | None) -> str:
    def part(when: datetime | None, default: str) -> str:
        return when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ") if when else default

    return f"focus-{project}-{part(start, 'start')}-{part(end, 'now')}.csv"
