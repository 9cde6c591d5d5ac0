"""Datasets transferred across regions more than once (kind `cross_region_repull`).

* Events on SKUs whose code starts with `network.cross_region` carry the tag `dataset`
  (include the version in its value) and optionally `dest_region`. The first transfer of
  a (dataset, dest_region) pair, in time order over the whole log, is needed; every later
  one in the window is waste (its whole cost). Transfers without `dataset` are not checked.
* Per day if left alone: the repeats' cost over the last `rate_days` (default 7) days of
  the window up to today, divided by the number of those days.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

from costcore.money import quantity_for_people, round_half_even_div

from .cells import WasteFacts
from .days import DAY_US, date_of
from .model import CROSS_REGION_PREFIX
from .scan import Found, Scan, claim_by_day, new_finding

__all__ = ["cross_region_repulls", "first_transfers"]


def _trailing_rate(ctx: Scan, by_day: Mapping[int, int]) -> int:
    """Average daily cost over the last `rate_days` days of the window up to today."""
    end = min(ctx.last_day, ctx.today)
    if end < ctx.first_day:
        end = ctx.last_day
    start = max(ctx.first_day, end - ctx.policy.rate_days + 1)
    total = sum(c for d, c in by_day.items() if start <= d <= end)
    return round_half_even_div(total, end - start + 1)


def first_transfers(
    facts: WasteFacts, fixed: Callable[[str], bool], last_day: int
) -> dict[tuple[str, str], tuple[int, str]]:
    """(dataset, dest_region) -> (time, id) of its first transfer (non-fixed SKUs, up to the
    window's last day), from the facts kept over the whole log."""
    first: dict[tuple[str, str], tuple[int, str]] = {}
    for (dataset, region, sku), at in facts.transfer_first.items():
        if fixed(sku) or at[0] // DAY_US > last_day:
            continue
        have = first.get((dataset, region))
        if have is None or at < have:
            first[(dataset, region)] = at
    return first


def cross_region_repulls(ctx: Scan) -> list[Found]:
    """One finding per (dataset, dest_region) transferred again in the window."""
    first = first_transfers(ctx.facts, ctx.fixed, ctx.last_day)
    repeats: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if not ctx.first_day <= ctx.days[i] <= ctx.last_day:
            continue
        if not row.sku.startswith(CROSS_REGION_PREFIX) or ctx.fixed(row.sku):
            continue
        tags = row.tags or {}
        dataset = tags.get("dataset")
        if not dataset:
            continue
        key = (dataset, tags.get("dest_region", ""))
        if key in first and (row.epoch_us, row.id) != first[key]:  # the first is a row unit
            repeats[key].append(i)

    found: list[Found] = []
    for (dataset, region), indexes in sorted(repeats.items()):
        by_day_q, by_day_c, lines = claim_by_day(ctx, indexes)
        total = sum(by_day_c.values())
        if total <= 0:
            continue
        units = {ctx.unit(ctx.rows[i].sku) for i in indexes}
        unit = units.pop() if len(units) == 1 else "units"
        dest = region or "(no dest_region)"
        pulls = sum(ctx.rows[i].events for i in indexes)
        first_us, first_id = first[(dataset, region)]
        keys = {
            "dataset": dataset,
            "dest_region": region,
            "first_event_id": first_id,
            "first_day": date_of(first_us // DAY_US).isoformat(),
        }
        found.append(
            new_finding(
                ctx,
                "cross_region_repull",
                f"Dataset {dataset} pulled to {dest} again {pulls} time(s) "
                f"({quantity_for_people(sum(by_day_q.values()))} {unit})",
                total,
                _trailing_rate(ctx, by_day_c),
                keys,
                indexes,
                lines,
                f"Keep one copy of {dataset} in {dest} (pulled once, on "
                f"{keys['first_day']}, event {first_id}) and have jobs read that copy or "
                f"a cache, instead of transferring it across regions for every run.",
            )
        )
    return found
