"""Reserved capacity paid but idle (kind `reserved_idle`).

* A fixed SKU (`fixed: true`, e.g. `gpu.h100.reserved.hour`) is posted as what is PAID:
  post the reservation bill every day (e.g. `quantity` 8 = 8 GPU-hours paid that day).
* Its USE is posted in the same unit, either on a usage SKU, or on any SKU with the tag
  `reservation=<fixed sku code>` (simpler for schedulers). The usage SKUs of a fixed SKU
  are `policy.usage_skus[<fixed sku>]` when given, else by convention the fixed code with
  `.used` inserted before its last segment: `gpu.h100.reserved.hour` ->
  `gpu.h100.reserved.used.hour` (usually priced 0). An event counts once even if it
  is both on a usage SKU and tagged.
* A fixed SKU is checked only if its use can be known: it is a key of `usage_skus` (keys
  that are not fixed SKUs of the rate card are ignored; `[]` = tags only), its
  conventional usage SKU is in the rate card or in the events, or some event is tagged
  `reservation=<code>`. Other fixed SKUs (salaried hours, licences) are never reported.
* Per full day of the window: idle = paid - used when positive, else 0; idle cost =
  paid cost x idle / paid (the paid events' average unit cost that day). A day with no
  paid quantity has no idle cost. Today (not yet over) is left out: its use is still
  being posted.
* One finding per fixed SKU. Evidence `days` lists every analysed day with `paid`,
  `used`, `quantity` (idle) and `cost`. Per day if left alone: the idle cost of the rate day
  (0 once the reservation is no longer billed or is fully used).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from costcore.money import (
    format_money,
    format_quantity,
    quantity_for_people,
    round_half_even_div,
)

from ..days import date_of
from ..model import DayLine
from .scan import Found, Scan, new_finding

__all__ = ["reserved_idle", "usage_sku_of"]


def usage_sku_of(fixed_code: str) -> str:
    """The conventional usage SKU of a fixed SKU: `.used` before the last segment."""
    head, dot, last = fixed_code.rpartition(".")
    return f"{head}.used.{last}" if dot else f"{fixed_code}.used"


def _pct(part: int, whole: int) -> str:
    return str(round_half_even_div(part * 100, whole)) if whole else "0"


def _usage_skus(ctx: Scan) -> dict[str, list[str]]:
    """Each checked fixed SKU -> the SKUs its use is posted on (see the module doc)."""
    policy = ctx.policy
    fixed = {code for code, s in ctx.skus.items() if s.fixed}
    seen_skus = {r.sku for r in ctx.rows}
    tagged = {(r.tags or {}).get("reservation") for r in ctx.rows} - {None}
    usage: dict[str, list[str]] = {}
    for code in sorted(fixed):
        listed = policy.usage_skus.get(code)
        conventional = usage_sku_of(code)
        if listed is not None:
            usage[code] = list(listed)
        elif conventional in ctx.skus or conventional in seen_skus or code in tagged:
            usage[code] = [conventional]
    return usage


@dataclass
class _Tally:
    """Per fixed SKU and full day of the window: quantity and cost paid, quantity used."""

    paid_q: dict[str, dict[int, int]]
    paid_c: dict[str, dict[int, int]]
    paid_ids: dict[str, dict[int, list[int]]]  # the paid events
    used_q: dict[str, dict[int, int]]


def _tally(ctx: Scan, usage: dict[str, list[str]]) -> _Tally:
    fixed_of_usage: dict[str, set[str]] = defaultdict(set)
    for code, usage_codes in usage.items():
        for u in usage_codes:
            if u != code:
                fixed_of_usage[u].add(code)

    tally = _Tally(
        paid_q=defaultdict(lambda: defaultdict(int)),
        paid_c=defaultdict(lambda: defaultdict(int)),
        paid_ids=defaultdict(lambda: defaultdict(list)),
        used_q=defaultdict(lambda: defaultdict(int)),
    )
    last = min(ctx.last_day, ctx.last_full_day)
    for i, row in enumerate(ctx.rows):
        day = ctx.days[i]
        if not ctx.first_day <= day <= last:
            continue
        if row.sku in usage:
            tally.paid_q[row.sku][day] += row.quantity_micro
            tally.paid_c[row.sku][day] += row.cost_nano
            tally.paid_ids[row.sku][day].append(i)
            continue
        targets = set(fixed_of_usage.get(row.sku, ()))
        reservation = (row.tags or {}).get("reservation")
        if reservation in usage:
            targets.add(reservation)
        for code in targets:
            tally.used_q[code][day] += row.quantity_micro
    return tally


def _idle_finding(ctx: Scan, code: str, usage_codes: list[str], tally: _Tally) -> Found | None:
    """The finding of one fixed SKU, or None when it was never idle."""
    unit = ctx.unit(code)
    lines: list[tuple[int, int, DayLine]] = []
    total_cost = total_idle = total_paid = peak_used = 0
    idle_by_day: dict[int, int] = {}
    idle_ids: list[int] = []
    paid_q, paid_c, used_q = tally.paid_q[code], tally.paid_c[code], tally.used_q[code]
    for day in sorted(set(paid_q) | set(used_q)):
        paid, used, cost = paid_q[day], used_q[day], paid_c[day]
        idle = max(paid - used, 0) if paid > 0 else 0
        idle_cost = round_half_even_div(cost * idle, paid) if idle else 0
        idle_by_day[day] = idle_cost
        total_cost += idle_cost
        total_idle += idle
        total_paid += paid
        peak_used = max(peak_used, min(used, paid))
        if idle_cost:
            idle_ids.extend(tally.paid_ids[code][day])
        line = DayLine(
            day=date_of(day),
            quantity=format_quantity(idle),
            cost=format_money(idle_cost),
            paid=format_quantity(paid),
            used=format_quantity(used),
        )
        lines.append((day, idle_cost, line))
    if total_cost <= 0:
        return None
    idle_days = sum(1 for c in idle_by_day.values() if c > 0)
    where_used = " or ".join(usage_codes) or "a usage SKU"
    return new_finding(
        ctx,
        "reserved_idle",
        f"Reserved {code} paid but idle: {quantity_for_people(total_idle)} of "
        f"{quantity_for_people(total_paid)} {unit} ({_pct(total_idle, total_paid)}%) "
        f"on {idle_days} day(s)",
        total_cost,
        idle_by_day.get(ctx.rate_day, 0),
        {"sku": code, "usage_skus": ",".join(usage_codes), "unit": unit},
        idle_ids,
        lines,
        f"Put queued work on the idle reservation or shrink it: {code} was used at "
        f"most {quantity_for_people(peak_used)} {unit} a day; release the unused part if "
        f"the provider allows it, and reserve about {quantity_for_people(peak_used)} "
        f"{unit} a day at renewal. Post its use on {where_used} or tag "
        f"jobs reservation={code}, so that used hours are not reported idle.",
    )


def reserved_idle(ctx: Scan) -> list[Found]:
    """One finding per fixed SKU whose use can be known and that was paid but idle."""
    usage = _usage_skus(ctx)
    if not usage:
        return []
    tally = _tally(ctx, usage)
    found: list[Found] = []
    for code, usage_codes in usage.items():
        finding = _idle_finding(ctx, code, usage_codes, tally)
        if finding is not None:
            found.append(finding)
    return found
