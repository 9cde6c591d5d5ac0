"""Logs ingested over the daily cap or kept past the log retention.

* Events of category `logging` on non-fixed SKUs.
* Ingest SKUs (code contains `ingest`): with `logs.max_ingest_gb_per_day` set (default
  unset: off), a day whose ingested GB (all ingest SKUs together) exceed the cap wastes
  that day's ingest cost x (ingested - cap) / ingested. One finding for the project.
* Retention SKUs (code contains `retention`, not `ingest`; quantity in GB-days) tagged
  `created` (`YYYY-MM-DD`): waste when the event's day - `created` >
  `logs.retention_days` (default 30; `null`: off). Grouped by SKU. Missing or malformed
  `created`: not checked.
"""

from __future__ import annotations

from collections import defaultdict

from costcore.money import (
    format_quantity,
    parse_quantity,
    quantity_for_people,
    round_half_even_div,
)

from ..days import date_of, parse_day
from ..model import DayLine
from .scan import Found, Scan, claim_by_day, claim_share, is_logging, new_finding

__all__ = ["log_ingest_over_cap", "log_past_retention"]


def log_ingest_over_cap(ctx: Scan) -> list[Found]:
    """One finding for the project's days of log ingest over the daily cap."""
    cap_text = ctx.policy.logs.max_ingest_gb_per_day
    if cap_text is None:
        return []
    cap = parse_quantity(cap_text)
    ingested: dict[int, int] = defaultdict(int)
    members: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if ctx.in_window(i) and is_logging(ctx, i) and "ingest" in row.sku:
            ingested[ctx.days[i]] += row.quantity_micro
            members[ctx.days[i]].append(i)
    lines: list[tuple[int, int, DayLine]] = []
    by_day: dict[int, int] = {}
    flagged: list[int] = []
    peak = 0
    for day in sorted(ingested):
        total_q = ingested[day]
        if total_q <= cap:
            continue
        idx = members[day]
        excess = total_q - cap
        waste = round_half_even_div(sum(ctx.net(i) for i in idx) * excess, total_q)
        lines.append(claim_share(ctx, idx, day, waste, excess, cap, total_q))
        by_day[day] = waste
        flagged.extend(idx)
        peak = max(peak, total_q)
    total = sum(by_day.values())
    if total <= 0:
        return []
    skus = sorted({ctx.rows[i].sku for i in flagged})
    return [
        new_finding(
            ctx,
            "log_ingest_over_cap",
            f"Log ingest above {quantity_for_people(cap)} GB a day on {len(by_day)} day(s), "
            f"up to {quantity_for_people(peak)} GB",
            total,
            by_day.get(ctx.rate_day, 0),
            {"skus": ",".join(skus), "max_ingest_gb_per_day": format_quantity(cap)},
            flagged,
            lines,
            f"Bring log ingest under {quantity_for_people(cap)} GB a day: lower log levels of "
            f"the noisiest jobs, sample per-step logs, and send metrics to the metrics "
            f"store instead of the log service ({', '.join(skus)}).",
        )
    ]


def log_past_retention(ctx: Scan) -> list[Found]:
    """One finding per log retention SKU with logs kept past the log retention."""
    keep = ctx.policy.logs.retention_days
    if keep is None:
        return []
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if not ctx.in_window(i) or not is_logging(ctx, i):
            continue
        if "retention" not in row.sku or "ingest" in row.sku:
            continue
        created = parse_day((row.tags or {}).get("created"))
        if created is not None and ctx.days[i] - created > keep:
            groups[row.sku].append(i)
    found: list[Found] = []
    for sku, indexes in sorted(groups.items()):
        by_day_q, by_day_c, lines = claim_by_day(ctx, indexes)
        total = sum(by_day_c.values())
        if total <= 0:
            continue
        unit = ctx.unit(sku)
        cutoff = date_of(ctx.rate_day - keep)
        found.append(
            new_finding(
                ctx,
                "log_past_retention",
                f"Logs on {sku} kept past the {keep}-day log retention: "
                f"{quantity_for_people(sum(by_day_q.values()))} {unit}",
                total,
                by_day_c.get(ctx.rate_day, 0),
                {"sku": sku, "retention_days": str(keep)},
                indexes,
                lines,
                f"Set the retention of the log groups on {sku} to {keep} days and delete logs "
                f"written before {cutoff.isoformat()}; export what an audit needs to archive "
                f"storage first.",
            )
        )
    return found
