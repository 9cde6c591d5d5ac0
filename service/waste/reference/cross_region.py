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
from collections.abc import Mapping

from costcore.money import quantity_for_people, round_half_even_div

from ..days import date_of
from ..model import CROSS_REGION_PREFIX
from .scan import Found, Scan, claim_by_day, new_finding

__all__ = ["cross_region_repulls"]


def _trailing_rate(ctx: Scan, by_day: Mapping[int, int]) -> int:
    """Average daily cost over the last `rate_days` days of the window up to today."""
    end = min(ctx.last_day, ctx.today)
    if end < ctx.first_day:
        end = ctx.last_day
    start = max(ctx.first_day, end - ctx.policy.rate_days + 1)
    total = sum(c for d, c in by_day.items() if start <= d <= end)
    return round_half_even_div(total, end - start + 1)


def cross_region_repulls(ctx: Scan) -> list[Found]:
    """One finding per (dataset, dest_region) transferred again in the window."""
    first: dict[tuple[str, str], int] = {}
    repeats: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if ctx.days[i] > ctx.last_day:
            break
        if not row.sku.startswith(CROSS_REGION_PREFIX) or ctx.fixed(row.sku):
            continue
        tags = row.tags or {}
        dataset = tags.get("dataset")
        if not dataset:
            continue
        key = (dataset, tags.get("dest_region", ""))
        if key not in first:
            first[key] = i
        elif ctx.days[i] >= ctx.first_day:
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
        first_row = ctx.rows[first[(dataset, region)]]
        keys = {
            "dataset": dataset,
            "dest_region": region,
            "first_event_id": first_row.id,
            "first_day": date_of(ctx.days[first[(dataset, region)]]).isoformat(),
        }
        found.append(
            new_finding(
                ctx,
                "cross_region_repull",
                f"Dataset {dataset} pulled to {dest} again {len(indexes)} time(s) "
                f"({quantity_for_people(sum(by_day_q.values()))} {unit})",
                total,
                _trailing_rate(ctx, by_day_c),
                keys,
                indexes,
                lines,
                f"Keep one copy of {dataset} in {dest} (pulled once, on "
                f"{keys['first_day']}, event {first_row.id}) and have jobs read that copy or "
                f"a cache, instead of transferring it across regions for every run.",
            )
        )
    return found
