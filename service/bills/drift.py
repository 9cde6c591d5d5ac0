"""The drift report: a project's ledger per SKU and day beside its bills (the rows its mapping
takes), each cell with its status; unattributed spend beside it for an unscoped token."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

import msgspec

from costcore.money import format_money, format_quantity

from ..costs.grouping import grouped
from ..costs.query import CostQuery, QueryError, day_key, iso_day
from ..projects.service import project_catalog
from ..ratecards.catalog import PricingCatalog, RateCards
from .model import (
    TOLERANCE_ABS_NANO,
    TOLERANCE_REL,
    BillKey,
    BillMapping,
    BillSums,
    Status,
    nano_text,
    owner_of,
    pending_from,
    sku_of,
    status_of,
    unit_price,
)
from .service import all_mappings, bill_imports

if TYPE_CHECKING:
    from ..stores import Stores

MICRO_TO_NANO = 1000


class DriftCell(msgspec.Struct):
    """One project x SKU x day: the ledger's quantity and cost beside the bill's consumed
    quantity (in the rate card's unit), BilledCost and EffectiveCost (null: none on that
    side), the bill's effective unit price beside the rate card's, and the status."""

    day: str
    sku: str
    status: Status
    ledger_quantity: str | None
    ledger_cost: str | None
    bill_quantity: str | None
    billed_cost: str | None
    effective_cost: str | None
    bill_unit_price: str | None
    card_unit_price: str | None
    bill_rows: int
    correction_rows: int


class UnattributedSpend(msgspec.Struct):
    """Bill rows of one day and service that no project's mapping takes."""

    day: str
    service_name: str
    sku_id: str
    billed_cost: str
    effective_cost: str
    rows: int


class Tolerance(msgspec.Struct):
    """Reconciled: |EffectiveCost - ledger cost| at most max(absolute, relative x
    |EffectiveCost|)."""

    absolute: str
    relative: str


class DriftReport(msgspec.Struct):
    """Answer of `GET /v1/bills/drift`: the project's cells, their totals, the first day the
    provider may still change (`pending_from`), and unattributed spend (an unscoped token
    only; null otherwise)."""

    project: str
    from_day: str | None
    to_day: str | None
    bill_currency: str | None
    tolerance: Tolerance
    newest_charge_period_end: str | None
    pending_from: str | None
    imports: int
    cells: list[DriftCell]
    ledger_cost: str
    billed_cost: str
    effective_cost: str
    unattributed: list[UnattributedSpend] | None


Cell = tuple[str, str]  # (yyyymmdd, sku)


def _bill_cells(
    project: str,
    mappings: Sequence[tuple[str, BillMapping]],
    hashes: Sequence[tuple[str, dict[bytes, bytes]]],
) -> tuple[dict[Cell, BillSums], dict[tuple[str, str, str], BillSums]]:
    """The project's bill sums per (day, sku), and the unattributed ones per (day, service,
    SkuId), from the rows hashes read (day, hash)."""
    mine = dict(mappings).get(project)
    cells: dict[Cell, BillSums] = {}
    loose: dict[tuple[str, str, str], BillSums] = {}
    # Per bill key: its owner, SKU and factor (mine), and where unattributed spend goes.
    owners: dict[str, tuple[str | None, str, Decimal, tuple[str, str]]] = {}
    for day, raw in hashes:
        for name, value in raw.items():
            kind, _, encoded = name.decode().partition("|")
            if encoded not in owners:
                key = BillKey.decode(encoded)
                owner = owner_of(key, mappings)
                sku, factor = sku_of(key, mine) if owner == project and mine else ("", Decimal(1))
                owners[encoded] = (owner, sku, factor, (key.service_name, key.sku_id))
            owner, sku, factor, loose_at = owners[encoded]
            if owner == project:
                sums = cells.setdefault((day, sku), BillSums())
            elif owner is None:
                sums = loose.setdefault((day, *loose_at), BillSums())
            else:
                continue
            _add_field(sums, kind, int(value), factor)
    return cells, loose


def _add_field(sums: BillSums, kind: str, amount: int, factor: Decimal) -> None:
    if kind == "b":
        sums.billed += amount
    elif kind == "e":
        sums.effective += amount
    elif kind == "q":
        sums.quantity += amount * factor
    elif kind == "n":
        sums.rows += amount
    elif kind == "k":
        sums.corrections += amount


def _card_prices(
    days: list[str], skus: set[str], catalog: PricingCatalog | None
) -> dict[Cell, int]:
    """The rate card's unit price (nano) of each SKU on each day (the version in effect at
    the day's start)."""
    prices: dict[Cell, int] = {}
    if catalog is None:
        return prices
    history = catalog.history
    for day in days:
        when = datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC)
        index = history.index_at(when)
        if index < 0:
            continue
        priced = history.priced(index)
        for sku in skus:
            if sku in priced:
                prices[(day, sku)] = priced[sku].unit_price_nano
    return prices


def _in_range(day: str, from_day: date | None, to_day: date | None) -> bool:
    return (from_day is None or day >= day_key(from_day)) and (
        to_day is None or day < day_key(to_day)
    )


async def drift_report(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    from_day: date | None,
    to_day: date | None,
    show_unattributed: bool,
) -> DriftReport:
    if from_day and to_day and to_day <= from_day:
        raise QueryError("to", "must be after 'from'")
    imports = await bill_imports(store)
    mappings = await all_mappings(store)
    reads = [(i.id, d) for i in imports for d in i.days if _in_range(d, from_day, to_day)]
    hashes = await store.bills.day_rows(reads)
    bill, loose = _bill_cells(
        project, mappings, [(day, h) for (_, day), h in zip(reads, hashes, strict=True)]
    )
    ledger = await grouped(store, CostQuery(project, from_day, to_day, ("day", "sku")))
    ends = [i.newest_charge_period_end for i in imports if i.newest_charge_period_end]
    newest = max((datetime.fromisoformat(e) for e in ends), default=None)
    first_pending = pending_from(newest)
    keys = sorted(set(bill) | {(k[0], k[1]) for k in ledger})
    _, catalog = await project_catalog(store, rate_cards, project)
    prices = _card_prices(sorted({d for d, _ in keys}), {s for _, s in keys}, catalog)
    cells = [_cell(k, ledger.get(k), bill.get(k), prices.get(k), first_pending) for k in keys]
    currencies = sorted({i.currency for i in imports})
    return DriftReport(
        project=project,
        from_day=from_day.isoformat() if from_day else None,
        to_day=to_day.isoformat() if to_day else None,
        bill_currency=", ".join(currencies) if currencies else None,
        tolerance=Tolerance(format_money(TOLERANCE_ABS_NANO), str(TOLERANCE_REL)),
        newest_charge_period_end=newest.isoformat().replace("+00:00", "Z") if newest else None,
        pending_from=first_pending.isoformat() if first_pending else None,
        imports=len(imports),
        cells=cells,
        ledger_cost=format_money(sum(v[0] for v in ledger.values())),
        billed_cost=format_money(sum(b.billed for b in bill.values())),
        effective_cost=format_money(sum(b.effective for b in bill.values())),
        unattributed=_unattributed(loose) if show_unattributed else None,
    )


def _cell(
    key: Cell,
    ledger: list[int] | None,
    bill: BillSums | None,
    card_price: int | None,
    first_pending: date | None,
) -> DriftCell:
    day, sku = key
    status = status_of(
        date.fromisoformat(iso_day(day)), ledger[0] if ledger else None, bill, first_pending
    )
    return DriftCell(
        day=iso_day(day),
        sku=sku,
        status=status,
        ledger_quantity=format_quantity(ledger[1]) if ledger else None,
        ledger_cost=format_money(ledger[0]) if ledger else None,
        bill_quantity=nano_text(bill.quantity) if bill else None,
        billed_cost=format_money(bill.billed) if bill else None,
        effective_cost=format_money(bill.effective) if bill else None,
        bill_unit_price=unit_price(bill.effective, bill.quantity) if bill else None,
        card_unit_price=nano_text(card_price) if card_price is not None else None,
        bill_rows=bill.rows if bill else 0,
        correction_rows=bill.corrections if bill else 0,
    )


def _unattributed(loose: dict[tuple[str, str, str], BillSums]) -> list[UnattributedSpend]:
    return [
        UnattributedSpend(
            day=iso_day(day),
            service_name=service,
            sku_id=sku_id,
            billed_cost=format_money(sums.billed),
            effective_cost=format_money(sums.effective),
            rows=sums.rows,
        )
        for (day, service, sku_id), sums in sorted(loose.items())
    ]
