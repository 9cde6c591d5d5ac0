"""Storage kept past its retention and checkpoint storage above the checkpoint policy.

Storage past retention (kind `storage_past_retention`)
------------------------------------------------------
* Storage events (category `storage`, non-fixed SKU, quantity in GB-days) carry tags
  `data_class` (`raw` | `intermediate` | `checkpoint` | `other`) and `created`
  (`YYYY-MM-DD`, when the data was written).
* An event is waste when its day - `created` > the class's `retention_days`; all its
  cost is waste. Findings are grouped by (SKU, data class, tag `dataset` if present).
* Missing or unknown `data_class`: class `other`. Missing or malformed `created`: the
  event cannot be aged and is not checked (it still counts for checkpoint growth).
* Defaults: `raw` 365 days (a corpus copy kept past a year of dataset versions should be
  read from its canonical or archived copy), `intermediate` 30 (tokenized shards, filter
  and dedup outputs are rebuilt from raw data and code; a month covers a run or ablation
  cycle), `checkpoint` 14 (resumes and rollbacks use recent checkpoints; tag checkpoints
  you keep for good, e.g. released weights, `data_class=other`), `other` none (never
  flagged). `null` turns a class's check off.


Checkpoint growth (kind `checkpoint_growth`)
--------------------------------------------
* With `checkpoint.size_gb` set (default unset: off), the expected checkpoint storage is
  `size_gb x keep_last` GB-days per day (`keep_last` default 3), for the whole project:
  with several concurrent runs, set `keep_last` to the total number kept.
* A day's checkpoint GB-days (storage events tagged `data_class=checkpoint`, except those
  already past retention) exceed the policy when actual > expected x (100 +
  `tolerance_pct`) / 100 (`tolerance_pct` default 20). Waste of such a day = its
  checkpoint storage cost x (actual - expected) / actual.
"""

from __future__ import annotations

from collections import defaultdict

from costcore.money import format_quantity, parse_quantity, quantity_for_people, round_half_even_div

from ..days import date_of, parse_day
from ..model import DATA_CLASSES, DayLine
from .scan import Found, Scan, claim_by_day, claim_share, is_storage, new_finding

__all__ = ["checkpoint_growth", "storage_past_retention"]


def storage_past_retention(ctx: Scan) -> list[Found]:
    """One finding per (SKU, data class, dataset) with storage kept past its retention."""
    retention = ctx.policy.retention_days
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if not ctx.in_window(i) or not is_storage(ctx, i):
            continue
        tags = row.tags or {}
        data_class = tags.get("data_class", "other")
        if data_class not in DATA_CLASSES:
            data_class = "other"
        keep: int | None = getattr(retention, data_class)
        created = parse_day(tags.get("created"))
        if keep is None or created is None or ctx.days[i] - created <= keep:
            continue
        groups[(row.sku, data_class, tags.get("dataset", ""))].append(i)
        ctx.past_retention.add(i)

    found: list[Found] = []
    for (sku, data_class, dataset), indexes in sorted(groups.items()):
        keep = getattr(retention, data_class)
        oldest = min(parse_day((ctx.rows[i].tags or {}).get("created")) or 0 for i in indexes)
        by_day_q, by_day_c, lines = claim_by_day(ctx, indexes)
        total = sum(by_day_c.values())
        if total <= 0:
            continue
        unit = ctx.unit(sku)
        what = f"{data_class} data" + (f" of dataset {dataset}" if dataset else "")
        keys = {"sku": sku, "data_class": data_class, "retention_days": str(keep)}
        if dataset:
            keys["dataset"] = dataset
        keys["oldest_created"] = date_of(oldest).isoformat()
        cutoff = date_of(ctx.rate_day - keep)
        found.append(
            new_finding(
                ctx,
                "storage_past_retention",
                f"{what.capitalize()} on {sku} kept past its {keep}-day retention: "
                f"{quantity_for_people(sum(by_day_q.values()))} {unit}",
                total,
                by_day_c.get(ctx.rate_day, 0),
                keys,
                indexes,
                lines,
                f"Delete the {what} on {sku} written before {cutoff.isoformat()} (the "
                f"{data_class} retention is {keep} days), or move what must stay to an archive "
                f"tier and tag it data_class=other.",
            )
        )
    return found


def checkpoint_growth(ctx: Scan) -> list[Found]:
    """One finding for the project's days of checkpoint storage above the policy."""
    policy = ctx.policy.checkpoint
    if policy.size_gb is None:
        return []
    expected = parse_quantity(policy.size_gb) * policy.keep_last
    actual: dict[int, int] = defaultdict(int)
    members: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if (
            ctx.in_window(i)
            and is_storage(ctx, i)
            and i not in ctx.past_retention
            and (row.tags or {}).get("data_class") == "checkpoint"
        ):
            actual[ctx.days[i]] += row.quantity_micro
            members[ctx.days[i]].append(i)
    lines: list[tuple[int, int, DayLine]] = []
    flagged: list[int] = []
    by_day: dict[int, int] = {}
    peak_day, peak = -1, 0
    for day in sorted(actual):
        stored = actual[day]
        if stored * 100 <= expected * (100 + policy.tolerance_pct):
            continue
        idx = members[day]
        day_cost = sum(ctx.net(i) for i in idx)
        excess = stored - expected
        waste = round_half_even_div(day_cost * excess, stored)
        lines.append(claim_share(ctx, idx, day, waste, excess, expected, stored))
        by_day[day] = waste
        flagged.extend(idx)
        if stored > peak:
            peak_day, peak = day, stored
    total = sum(by_day.values())
    if total <= 0:
        return []
    return [
        new_finding(
            ctx,
            "checkpoint_growth",
            f"Checkpoint storage above the checkpoint policy on {len(by_day)} day(s): "
            f"up to {format_quantity(peak)} GB-days a day against "
            f"{format_quantity(expected)} expected",
            total,
            by_day.get(ctx.rate_day, 0),
            {
                "data_class": "checkpoint",
                "size_gb": policy.size_gb,
                "keep_last": str(policy.keep_last),
                "expected_gb_days_per_day": format_quantity(expected),
                "tolerance_pct": str(policy.tolerance_pct),
            },
            flagged,
            lines,
            f"Prune checkpoints to the last {policy.keep_last} of each run (about "
            f"{format_quantity(expected)} GB-days a day); on {date_of(peak_day).isoformat()} "
            f"{format_quantity(peak)} GB-days were stored. Look for checkpoints of stopped "
            f"runs and for checkpoints larger than {policy.size_gb} GB, or update the "
            f"checkpoint policy if the model grew.",
        )
    ]
