"""Waste findings from a project's accepted events: a pure computation, no I/O, no clock.

`find_waste(project, events, skus, policy, progress, now, window_from, window_to, currency)`
reads the project's accepted events (`LoggedEvent` rows of its log), the SKUs of its rate
card, its waste policy and its experiments' progress reports, and returns a `WasteReport`:
one `Finding` per piece of waste, each with its cost so far, its cost per day if left
alone, the evidence (keys, event ids, per-day lines) and a concrete action.

All money is exact integer nano-currency (quantities in micro-units) until it is formatted
as a decimal string. Every division of money is rounded half-even to the nano.

Days, window and reference time
-------------------------------
* A day is a UTC calendar day; an event belongs to the day of its own `time`.
* The report window is `window_from` .. `window_to`, both inclusive (UTC days). Defaults:
  `window_to` = the UTC day of `now`, `window_from` = `window_to` - 29 days (30 days).
* Only events whose day is in the window are counted as waste. Events before the window
  are history: they tell which transfer of a dataset came first and when an experiment
  started. Events after `window_to` are ignored. Pass the project's whole log.
* `as_of` = the earlier of `now` and the end of `window_to` (midnight after it). The
  experiment checks look back from `as_of`.
* A *full day* is a day that ended at or before `now`. The *rate day* is the last full day
  of the window (`min(window_to, day of now - 1)`; `window_to` if the window has no full
  day). "Cost per day if left alone" is, for waste that recurs every day (idle reservations,
  storage and logs past retention, checkpoint growth, log ingest over the cap), the waste
  cost on the rate day: it shows the state now, and drops to 0 the day after it is fixed.
  A trailing average would keep reporting a fixed problem for days.
* Fixed SKUs are committed spend: stopping work does not save them. Only the reserved
  capacity check looks at them; every other check skips fixed SKUs.
* No cost is counted twice: an event's cost already reported by one finding is left out
  of the others (storage past retention is left out of the checkpoint growth check, and
  experiments count their spend net of all other findings). `total_waste` is the sum of
  the findings' `cost_so_far`.
* A finding is reported only when its cost so far is above zero.

Reserved capacity (kind `reserved_idle`)
----------------------------------------
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

Experiments without progress (kinds `experiment_no_progress`, `experiment_stalled`)
-----------------------------------------------------------------------------------
* Progress is passed as `progress: {experiment: [ProgressPoint(time, metric, value,
  higher_is_better)]}`. A point improves its series (experiment, metric, direction) when
  it beats the series' best so far by more than `min_improvement_pct` % of |best|
  (default 0: any strict improvement); the first point of a series is an improvement.
* An experiment's spend = its events (label `experiment`, non-fixed SKUs), net of cost
  already reported by other findings. Events without an experiment label are not checked.
* *No progress reported*: its last progress point (any metric) is at least `idle_days`
  (default 2) before `as_of`, or it has none; it has been spending for at least
  `idle_days` (first event at or before `as_of - idle_days`); and it spent in the last
  `idle_days`. Experiments that never reported are checked unless `check_unreported` is
  false; `ignore_experiments` are never checked.
* *Stopped improving*: it still reports (a point in the last `idle_days`), but its last
  improvement (the latest over its series) is at least `stall_days` (default 3) before
  `as_of`, and it spent in the last `stall_days`. One finding per experiment at most.
* Cost so far = spend after the last improvement (stalled) or after the last progress
  point (no progress; all spend if there is none), counting events in the window before
  `as_of`. Per day if left alone = that cost x 1 day / the span from its start (the
  point, or the experiment's first event, but not before the window) to `as_of`.

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

Cross-region re-pulls (kind `cross_region_repull`)
--------------------------------------------------
* Events on SKUs whose code starts with `network.cross_region` carry the tag `dataset`
  (include the version in its value) and optionally `dest_region`. The first transfer of
  a (dataset, dest_region) pair, in time order over the whole log, is needed; every later
  one in the window is waste (its whole cost). Transfers without `dataset` are not checked.
* Per day if left alone: the repeats' cost over the last `rate_days` (default 7) days of
  the window up to today, divided by the number of those days.

Logs (kinds `log_ingest_over_cap`, `log_past_retention`)
--------------------------------------------------------
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, localcontext
from typing import Annotated, Final, Literal

import msgspec

from costcore.money import format_money, format_quantity, parse_quantity, round_half_even_div

from ..ledger.eventlog import LoggedEvent
from ..ratecards.model import DecimalString, PricedSku, SkuCode

__all__ = [
    "DATA_CLASSES",
    "DEFAULT_WINDOW_DAYS",
    "KINDS",
    "MAX_EVIDENCE_IDS",
    "CheckpointPolicy",
    "DayLine",
    "Evidence",
    "Finding",
    "FindingWindow",
    "LogPolicy",
    "ProgressPoint",
    "RetentionDays",
    "WastePolicy",
    "WasteReport",
    "find_waste",
    "usage_sku_of",
]

DAY_US: Final = 86_400_000_000
DEFAULT_WINDOW_DAYS: Final = 30
MAX_EVIDENCE_IDS: Final = 20
DATA_CLASSES: Final = ("raw", "intermediate", "checkpoint", "other")
CROSS_REGION_PREFIX: Final = "network.cross_region"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY: Final = date(1970, 1, 1)

Kind = Literal[
    "reserved_idle",
    "experiment_no_progress",
    "experiment_stalled",
    "storage_past_retention",
    "checkpoint_growth",
    "cross_region_repull",
    "log_ingest_over_cap",
    "log_past_retention",
]
KINDS: Final = (
    "reserved_idle",
    "experiment_no_progress",
    "experiment_stalled",
    "storage_past_retention",
    "checkpoint_growth",
    "cross_region_repull",
    "log_ingest_over_cap",
    "log_past_retention",
)

RetentionDaysValue = Annotated[int, msgspec.Meta(ge=0, le=36_500)] | None
PolicyDays = Annotated[int, msgspec.Meta(ge=1, le=3_650)]


def _check_quantity(value: str | None, what: str) -> None:
    if value is None:
        return
    try:
        parse_quantity(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what}: {exc}") from None


# --------------------------------------------------------------------------------------
# Policy and inputs
# --------------------------------------------------------------------------------------


class RetentionDays(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Days each data class is kept; `None` turns the check off for that class."""

    raw: RetentionDaysValue = 365
    intermediate: RetentionDaysValue = 30
    checkpoint: RetentionDaysValue = 14
    other: RetentionDaysValue = None


class CheckpointPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Expected checkpoint footprint: `size_gb` x `keep_last` GB-days per day."""

    size_gb: DecimalString | None = None  # None: growth check off
    keep_last: PolicyDays = 3
    tolerance_pct: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 20

    def __post_init__(self) -> None:
        _check_quantity(self.size_gb, "size_gb")


class LogPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    max_ingest_gb_per_day: DecimalString | None = None  # None: no cap
    retention_days: RetentionDaysValue = 30

    def __post_init__(self) -> None:
        _check_quantity(self.max_ingest_gb_per_day, "max_ingest_gb_per_day")


class WastePolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A project's waste policy. Every field has a documented default."""

    # fixed SKU -> the SKUs its use is posted on (default: `usage_sku_of(code)`)
    usage_skus: dict[SkuCode, list[SkuCode]] = {}
    idle_days: PolicyDays = 2
    stall_days: PolicyDays = 3
    min_improvement_pct: DecimalString = "0"
    check_unreported: bool = True
    ignore_experiments: list[str] = []
    retention_days: RetentionDays = msgspec.field(default_factory=RetentionDays)
    checkpoint: CheckpointPolicy = msgspec.field(default_factory=CheckpointPolicy)
    logs: LogPolicy = msgspec.field(default_factory=LogPolicy)
    rate_days: PolicyDays = 7

    def __post_init__(self) -> None:
        try:
            Decimal(self.min_improvement_pct)
        except ArithmeticError:
            raise ValueError("min_improvement_pct is not a decimal number") from None


class ProgressPoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One progress report of an experiment (e.g. eval loss at a time)."""

    time: Annotated[datetime, msgspec.Meta(tz=True)]
    metric: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    value: Decimal
    higher_is_better: bool = False

    def __post_init__(self) -> None:
        if self.time.tzinfo is None:
            raise ValueError("time must carry a UTC offset")
        if not self.value.is_finite():
            raise ValueError("value must be a finite number")


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------


class DayLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One day of a finding's evidence. `quantity` and `cost` are the waste of that day."""

    day: date
    cost: str
    quantity: str | None = None  # wasted quantity in the SKU's unit (absent for experiments)
    paid: str | None = None  # reserved: quantity paid
    used: str | None = None  # reserved: quantity used
    expected: str | None = None  # checkpoint: expected GB-days; log ingest: the cap
    actual: str | None = None  # checkpoint: GB-days stored; log ingest: GB ingested


class Evidence(msgspec.Struct, kw_only=True):
    keys: dict[str, str]
    event_ids: list[str]  # the first MAX_EVIDENCE_IDS, in time order
    event_count: int
    days: list[DayLine]


class FindingWindow(msgspec.Struct, kw_only=True):
    """First and last day with waste cost (for experiments: the span counted)."""

    start: date
    end: date


class Finding(msgspec.Struct, kw_only=True):
    kind: Kind
    title: str
    cost_so_far: str
    cost_per_day_if_left: str
    currency: str
    evidence: Evidence
    action: str
    window: FindingWindow


class WasteReport(msgspec.Struct, kw_only=True):
    project: str
    currency: str
    window_from: date
    window_to: date
    as_of: datetime
    total_waste: str
    total_per_day_if_left: str
    findings: list[Finding]  # by cost so far, largest first
    policy: WastePolicy


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def usage_sku_of(fixed_code: str) -> str:
    """The conventional usage SKU of a fixed SKU: `.used` before the last segment."""
    head, dot, last = fixed_code.rpartition(".")
    return f"{head}.used.{last}" if dot else f"{fixed_code}.used"


def _us(when: datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _datetime(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _date(day: int) -> date:
    return _EPOCH_DAY + timedelta(days=day)


def _day_of_date(d: date) -> int:
    return (d - _EPOCH_DAY).days


def _parse_day(text: str | None) -> int | None:
    """`YYYY-MM-DD` -> days since epoch; None if missing or malformed."""
    if text is None or len(text) != 10:
        return None
    try:
        return _day_of_date(date.fromisoformat(text))
    except ValueError:
        return None


def _allocate(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` over `weights` proportionally, exactly (largest remainder, ties first)."""
    whole = sum(weights)
    if whole <= 0 or total <= 0:
        return [0] * len(weights)
    shares = [total * w // whole for w in weights]
    rest = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda k: (-(total * weights[k] % whole), k))
    for k in order[:rest]:
        shares[k] += 1
    return shares


def _pct(part: int, whole: int) -> str:
    return str(round_half_even_div(part * 100, whole)) if whole else "0"


@dataclass
class _Ctx:
    rows: list[LoggedEvent]
    days: list[int]
    skus: Mapping[str, PricedSku]
    policy: WastePolicy
    currency: str
    first_day: int
    last_day: int
    today: int
    last_full_day: int  # last day of the window that is over at `now` (may be < first_day)
    rate_day: int
    as_of_us: int
    claimed: list[int] = field(default_factory=list)
    past_retention: set[int] = field(default_factory=set)

    def fixed(self, sku: str) -> bool:
        s = self.skus.get(sku)
        return s is not None and s.fixed

    def unit(self, sku: str) -> str:
        s = self.skus.get(sku)
        return s.unit if s is not None else "unit"

    def in_window(self, i: int) -> bool:
        return self.first_day <= self.days[i] <= self.last_day

    def net(self, i: int) -> int:
        return self.rows[i].cost_nano - self.claimed[i]

    def ids(self, indexes: Iterable[int]) -> tuple[list[str], int]:
        ordered = sorted(indexes)  # rows are in time order
        return [self.rows[i].id for i in ordered[:MAX_EVIDENCE_IDS]], len(ordered)


@dataclass
class _Found:
    cost: int
    per_day: int
    finding: Finding


def _claim_by_day(
    ctx: _Ctx, indexes: Sequence[int]
) -> tuple[dict[int, int], dict[int, int], list[tuple[int, int, DayLine]]]:
    """Claim the unclaimed cost of these events as waste: quantity and cost per day, and the
    per-day evidence lines."""
    by_day_q: dict[int, int] = defaultdict(int)
    by_day_c: dict[int, int] = defaultdict(int)
    for i in indexes:
        cost = ctx.net(i)
        ctx.claimed[i] += cost
        by_day_q[ctx.days[i]] += ctx.rows[i].quantity_micro
        by_day_c[ctx.days[i]] += cost
    lines = [
        (
            d,
            by_day_c[d],
            DayLine(
                day=_date(d), quantity=format_quantity(by_day_q[d]), cost=format_money(by_day_c[d])
            ),
        )
        for d in by_day_q
    ]
    return by_day_q, by_day_c, lines


def _claim_share(
    ctx: _Ctx,
    indexes: Sequence[int],
    day: int,
    waste: int,
    excess: int,
    expected: int,
    actual: int,
) -> tuple[int, int, DayLine]:
    """Claim `waste` of these events' cost (spread by their unclaimed cost), for a day whose
    quantity `actual` ran `excess` over `expected`; the evidence line of that day."""
    for i, share in zip(indexes, _allocate(waste, [ctx.net(i) for i in indexes]), strict=True):
        ctx.claimed[i] += share
    line = DayLine(
        day=_date(day),
        quantity=format_quantity(excess),
        cost=format_money(waste),
        expected=format_quantity(expected),
        actual=format_quantity(actual),
    )
    return day, waste, line


def _finding(
    ctx: _Ctx,
    kind: Kind,
    title: str,
    cost: int,
    per_day: int,
    keys: dict[str, str],
    indexes: Iterable[int],
    days: list[tuple[int, int, DayLine]],  # (day, waste cost, line)
    action: str,
    window: tuple[int, int] | None = None,
) -> _Found:
    event_ids, count = ctx.ids(indexes)
    if window is None:
        costly = [d for d, c, _ in days if c > 0]
        window = (min(costly), max(costly))
    return _Found(
        cost,
        per_day,
        Finding(
            kind=kind,
            title=title,
            cost_so_far=format_money(cost),
            cost_per_day_if_left=format_money(per_day),
            currency=ctx.currency,
            evidence=Evidence(
                keys=keys,
                event_ids=event_ids,
                event_count=count,
                days=[line for _, _, line in sorted(days, key=lambda x: x[0])],
            ),
            action=action,
            window=FindingWindow(start=_date(window[0]), end=_date(window[1])),
        ),
    )


def _is_storage(ctx: _Ctx, i: int) -> bool:
    row = ctx.rows[i]
    return (
        row.category == "storage"
        and not ctx.fixed(row.sku)
        and not row.sku.startswith(CROSS_REGION_PREFIX)
    )


def _is_logging(ctx: _Ctx, i: int) -> bool:
    row = ctx.rows[i]
    return (
        row.category == "logging"
        and not ctx.fixed(row.sku)
        and not row.sku.startswith(CROSS_REGION_PREFIX)
    )


# --------------------------------------------------------------------------------------
# Reserved capacity
# --------------------------------------------------------------------------------------


def _reserved(ctx: _Ctx) -> list[_Found]:
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
    if not usage:
        return []
    fixed_of_usage: dict[str, set[str]] = defaultdict(set)
    for code, usage_codes in usage.items():
        for u in usage_codes:
            if u != code:
                fixed_of_usage[u].add(code)

    paid_q: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    paid_c: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    paid_ids: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    used_q: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    last = min(ctx.last_day, ctx.last_full_day)
    for i, row in enumerate(ctx.rows):
        day = ctx.days[i]
        if not ctx.first_day <= day <= last:
            continue
        if row.sku in usage:
            paid_q[row.sku][day] += row.quantity_micro
            paid_c[row.sku][day] += row.cost_nano
            paid_ids[row.sku][day].append(i)
            continue
        targets = set(fixed_of_usage.get(row.sku, ()))
        reservation = (row.tags or {}).get("reservation")
        if reservation in usage:
            targets.add(reservation)
        for code in targets:
            used_q[code][day] += row.quantity_micro

    found: list[_Found] = []
    for code, usage_codes in usage.items():
        unit = ctx.unit(code)
        lines: list[tuple[int, int, DayLine]] = []
        total_cost = total_idle = total_paid = peak_used = 0
        idle_by_day: dict[int, int] = {}
        idle_ids: list[int] = []
        for day in sorted(set(paid_q[code]) | set(used_q[code])):
            paid, used, cost = paid_q[code][day], used_q[code][day], paid_c[code][day]
            idle = max(paid - used, 0) if paid > 0 else 0
            idle_cost = round_half_even_div(cost * idle, paid) if idle else 0
            idle_by_day[day] = idle_cost
            total_cost += idle_cost
            total_idle += idle
            total_paid += paid
            peak_used = max(peak_used, min(used, paid))
            if idle_cost:
                idle_ids.extend(paid_ids[code][day])
            lines.append(
                (
                    day,
                    idle_cost,
                    DayLine(
                        day=_date(day),
                        quantity=format_quantity(idle),
                        cost=format_money(idle_cost),
                        paid=format_quantity(paid),
                        used=format_quantity(used),
                    ),
                )
            )
        if total_cost <= 0:
            continue
        idle_days = sum(1 for c in idle_by_day.values() if c > 0)
        where_used = " or ".join(usage_codes) or "a usage SKU"
        found.append(
            _finding(
                ctx,
                "reserved_idle",
                f"Reserved {code} paid but idle: {format_quantity(total_idle)} of "
                f"{format_quantity(total_paid)} {unit} ({_pct(total_idle, total_paid)}%) "
                f"on {idle_days} day(s)",
                total_cost,
                idle_by_day.get(ctx.rate_day, 0),
                {"sku": code, "usage_skus": ",".join(usage_codes), "unit": unit},
                idle_ids,
                lines,
                f"Put queued work on the idle reservation or shrink it: {code} was used at "
                f"most {format_quantity(peak_used)} {unit} a day; release the unused part if "
                f"the provider allows it, and reserve about {format_quantity(peak_used)} "
                f"{unit} a day at renewal. Post its use on {where_used} or tag "
                f"jobs reservation={code}, so that used hours are not reported idle.",
            )
        )
    return found


# --------------------------------------------------------------------------------------
# Storage past retention and checkpoint growth
# --------------------------------------------------------------------------------------


def _storage_retention(ctx: _Ctx) -> list[_Found]:
    retention = ctx.policy.retention_days
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if not ctx.in_window(i) or not _is_storage(ctx, i):
            continue
        tags = row.tags or {}
        data_class = tags.get("data_class", "other")
        if data_class not in DATA_CLASSES:
            data_class = "other"
        keep: int | None = getattr(retention, data_class)
        created = _parse_day(tags.get("created"))
        if keep is None or created is None or ctx.days[i] - created <= keep:
            continue
        groups[(row.sku, data_class, tags.get("dataset", ""))].append(i)
        ctx.past_retention.add(i)

    found: list[_Found] = []
    for (sku, data_class, dataset), indexes in sorted(groups.items()):
        keep = getattr(retention, data_class)
        oldest = min(_parse_day((ctx.rows[i].tags or {}).get("created")) or 0 for i in indexes)
        by_day_q, by_day_c, lines = _claim_by_day(ctx, indexes)
        total = sum(by_day_c.values())
        if total <= 0:
            continue
        unit = ctx.unit(sku)
        what = f"{data_class} data" + (f" of dataset {dataset}" if dataset else "")
        keys = {"sku": sku, "data_class": data_class, "retention_days": str(keep)}
        if dataset:
            keys["dataset"] = dataset
        keys["oldest_created"] = _date(oldest).isoformat()
        cutoff = _date(ctx.rate_day - keep)
        found.append(
            _finding(
                ctx,
                "storage_past_retention",
                f"{what.capitalize()} on {sku} kept past its {keep}-day retention: "
                f"{format_quantity(sum(by_day_q.values()))} {unit}",
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


def _checkpoint_growth(ctx: _Ctx) -> list[_Found]:
    policy = ctx.policy.checkpoint
    if policy.size_gb is None:
        return []
    expected = parse_quantity(policy.size_gb) * policy.keep_last
    actual: dict[int, int] = defaultdict(int)
    members: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if (
            ctx.in_window(i)
            and _is_storage(ctx, i)
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
        lines.append(_claim_share(ctx, idx, day, waste, excess, expected, stored))
        by_day[day] = waste
        flagged.extend(idx)
        if stored > peak:
            peak_day, peak = day, stored
    total = sum(by_day.values())
    if total <= 0:
        return []
    return [
        _finding(
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
            f"{format_quantity(expected)} GB-days a day); on {_date(peak_day).isoformat()} "
            f"{format_quantity(peak)} GB-days were stored. Look for checkpoints of stopped "
            f"runs and for checkpoints larger than {policy.size_gb} GB, or update the "
            f"checkpoint policy if the model grew.",
        )
    ]


# --------------------------------------------------------------------------------------
# Cross-region re-pulls
# --------------------------------------------------------------------------------------


def _trailing_rate(ctx: _Ctx, by_day: Mapping[int, int]) -> int:
    end = min(ctx.last_day, ctx.today)
    if end < ctx.first_day:
        end = ctx.last_day
    start = max(ctx.first_day, end - ctx.policy.rate_days + 1)
    total = sum(c for d, c in by_day.items() if start <= d <= end)
    return round_half_even_div(total, end - start + 1)


def _cross_region(ctx: _Ctx) -> list[_Found]:
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

    found: list[_Found] = []
    for (dataset, region), indexes in sorted(repeats.items()):
        by_day_q: dict[int, int] = defaultdict(int)
        by_day_c: dict[int, int] = defaultdict(int)
        for i in indexes:
            cost = ctx.net(i)
            ctx.claimed[i] += cost
            by_day_q[ctx.days[i]] += ctx.rows[i].quantity_micro
            by_day_c[ctx.days[i]] += cost
        total = sum(by_day_c.values())
        if total <= 0:
            continue
        units = {ctx.unit(ctx.rows[i].sku) for i in indexes}
        unit = units.pop() if len(units) == 1 else "units"
        lines = [
            (
                d,
                by_day_c[d],
                DayLine(
                    day=_date(d),
                    quantity=format_quantity(by_day_q[d]),
                    cost=format_money(by_day_c[d]),
                ),
            )
            for d in by_day_q
        ]
        dest = region or "(no dest_region)"
        first_row = ctx.rows[first[(dataset, region)]]
        keys = {
            "dataset": dataset,
            "dest_region": region,
            "first_event_id": first_row.id,
            "first_day": _date(ctx.days[first[(dataset, region)]]).isoformat(),
        }
        found.append(
            _finding(
                ctx,
                "cross_region_repull",
                f"Dataset {dataset} pulled to {dest} again {len(indexes)} time(s) "
                f"({format_quantity(sum(by_day_q.values()))} {unit})",
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


# --------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------


def _log_ingest(ctx: _Ctx) -> list[_Found]:
    cap_text = ctx.policy.logs.max_ingest_gb_per_day
    if cap_text is None:
        return []
    cap = parse_quantity(cap_text)
    ingested: dict[int, int] = defaultdict(int)
    members: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if ctx.in_window(i) and _is_logging(ctx, i) and "ingest" in row.sku:
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
        lines.append(_claim_share(ctx, idx, day, waste, excess, cap, total_q))
        by_day[day] = waste
        flagged.extend(idx)
        peak = max(peak, total_q)
    total = sum(by_day.values())
    if total <= 0:
        return []
    skus = sorted({ctx.rows[i].sku for i in flagged})
    return [
        _finding(
            ctx,
            "log_ingest_over_cap",
            f"Log ingest above {format_quantity(cap)} GB a day on {len(by_day)} day(s), "
            f"up to {format_quantity(peak)} GB",
            total,
            by_day.get(ctx.rate_day, 0),
            {"skus": ",".join(skus), "max_ingest_gb_per_day": format_quantity(cap)},
            flagged,
            lines,
            f"Bring log ingest under {format_quantity(cap)} GB a day: lower log levels of "
            f"the noisiest jobs, sample per-step logs, and send metrics to the metrics "
            f"store instead of the log service ({', '.join(skus)}).",
        )
    ]


def _log_retention(ctx: _Ctx) -> list[_Found]:
    keep = ctx.policy.logs.retention_days
    if keep is None:
        return []
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if not ctx.in_window(i) or not _is_logging(ctx, i):
            continue
        if "retention" not in row.sku or "ingest" in row.sku:
            continue
        created = _parse_day((row.tags or {}).get("created"))
        if created is not None and ctx.days[i] - created > keep:
            groups[row.sku].append(i)
    found: list[_Found] = []
    for sku, indexes in sorted(groups.items()):
        by_day_q, by_day_c, lines = _claim_by_day(ctx, indexes)
        total = sum(by_day_c.values())
        if total <= 0:
            continue
        unit = ctx.unit(sku)
        cutoff = _date(ctx.rate_day - keep)
        found.append(
            _finding(
                ctx,
                "log_past_retention",
                f"Logs on {sku} kept past the {keep}-day log retention: "
                f"{format_quantity(sum(by_day_q.values()))} {unit}",
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


# --------------------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------------------


def _last_improvement(
    points: Sequence[ProgressPoint], min_pct: Decimal
) -> tuple[int, ProgressPoint] | None:
    """(time in µs, point) of the latest improvement over all of the experiment's series."""
    series: dict[tuple[str, bool], list[ProgressPoint]] = defaultdict(list)
    for p in points:
        series[(p.metric, p.higher_is_better)].append(p)
    latest: tuple[int, ProgressPoint] | None = None
    with localcontext() as dc:
        dc.prec = 200
        for (_, higher), pts in sorted(series.items()):
            best: Decimal | None = None
            for p in sorted(pts, key=lambda q: _us(q.time)):
                margin = abs(best) * min_pct / 100 if best is not None else Decimal(0)
                if best is None or (p.value > best + margin if higher else p.value < best - margin):
                    best = p.value
                    t = _us(p.time)
                    if latest is None or t >= latest[0]:
                        latest = (t, p)
    return latest


def _experiments(ctx: _Ctx, progress: Mapping[str, Sequence[ProgressPoint]]) -> list[_Found]:
    policy = ctx.policy
    as_of = ctx.as_of_us
    idle_us, stall_us = policy.idle_days * DAY_US, policy.stall_days * DAY_US
    window_start_us = ctx.first_day * DAY_US
    min_pct = Decimal(policy.min_improvement_pct)
    ignored = set(policy.ignore_experiments)
    by_experiment: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(ctx.rows):
        if row.experiment and row.epoch_us < as_of and not ctx.fixed(row.sku):
            by_experiment[row.experiment].append(i)

    found: list[_Found] = []
    for experiment, indexes in sorted(by_experiment.items()):
        if experiment in ignored:
            continue
        points = [p for p in progress.get(experiment, ()) if _us(p.time) <= as_of]
        if not points and not policy.check_unreported:
            continue
        first_us = ctx.rows[indexes[0]].epoch_us
        last_point = max((_us(p.time) for p in points), default=None)
        improvement = _last_improvement(points, min_pct)
        # Spend is counted from `since`: after the last improvement / progress point, or
        # from the experiment's first event (inclusive) when it never reported.
        # Reports stopped (or never came): "no progress reported". Reports still come but
        # show no improvement: "stopped improving". The two never apply at once.
        kind: Kind
        if last_point is None or last_point <= as_of - idle_us:
            if first_us > as_of - idle_us:
                continue  # not running long enough to expect a report
            kind, recent = "experiment_no_progress", idle_us
            since, after = (last_point, True) if last_point is not None else (first_us, False)
        elif improvement is not None and improvement[0] <= as_of - stall_us:
            kind, since, after, recent = "experiment_stalled", improvement[0], True, stall_us
        else:
            continue
        recent_spend = sum(ctx.net(i) for i in indexes if ctx.rows[i].epoch_us >= as_of - recent)
        if recent_spend <= 0:
            continue
        counted = [
            i
            for i in indexes
            if (ctx.rows[i].epoch_us > since if after else ctx.rows[i].epoch_us >= since)
            and ctx.days[i] >= ctx.first_day
            and ctx.net(i) > 0
        ]
        cost = sum(ctx.net(i) for i in counted)
        span_start = max(since, window_start_us)
        span = as_of - span_start
        if cost <= 0 or span <= 0:
            continue
        per_day = round_half_even_div(cost * DAY_US, span)
        by_day: dict[int, int] = defaultdict(int)
        for i in counted:
            by_day[ctx.days[i]] += ctx.net(i)
        lines = [
            (d, c, DayLine(day=_date(d), cost=format_money(c))) for d, c in sorted(by_day.items())
        ]
        as_of_day = (as_of - 1) // DAY_US
        window = (span_start // DAY_US, max(as_of_day, span_start // DAY_US))
        keys = {"experiment": experiment}
        if kind == "experiment_stalled":
            assert improvement is not None
            best = improvement[1]
            quiet_days = (as_of - improvement[0]) // DAY_US
            keys |= {
                "metric": best.metric,
                "best_value": str(best.value),
                "higher_is_better": "true" if best.higher_is_better else "false",
                "last_improvement": best.time.astimezone(UTC).isoformat(),
            }
            title = (
                f"Experiment {experiment} stopped improving: best {best.metric} "
                f"{best.value} set {quiet_days} day(s) ago, and it kept spending"
            )
            action = (
                f"Stop {experiment} or change its recipe: {best.metric} has not improved on "
                f"{best.value} since {best.time.astimezone(UTC).date().isoformat()}. Keep its "
                f"best checkpoint, release its GPUs, and restart from that checkpoint only with "
                f"a new learning-rate schedule or data mix."
            )
        else:
            if last_point is not None:
                keys["last_progress"] = _datetime(last_point).isoformat()
                quiet = f"for {(as_of - last_point) // DAY_US} day(s)"
            else:
                quiet = "ever"
            title = f"Experiment {experiment} spends without reporting progress {quiet}"
            action = (
                f"Check whether {experiment} still does useful work: if so, post its eval "
                f"metrics as progress at least every {policy.idle_days} day(s); if not (hung, "
                f"looping or forgotten jobs), stop its jobs and release their resources."
            )
        found.append(
            _finding(ctx, kind, title, cost, per_day, keys, counted, lines, action, window)
        )
    return found


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def find_waste(
    project: str,
    events: Iterable[LoggedEvent],
    skus: Mapping[str, PricedSku],
    policy: WastePolicy | None,
    progress: Mapping[str, Sequence[ProgressPoint]] | None,
    now: datetime,
    window_from: date | None = None,
    window_to: date | None = None,
    currency: str = "",
) -> WasteReport:
    """The waste findings of one project over a window of UTC days (see the module doc).

    `events`: the project's accepted events (any order; the whole log, history included);
    `skus`: its rate card's SKUs by code (for `fixed` and `unit`); `now`: tz-aware.
    Raises `ValueError` for a naive `now` or a window that ends before it starts.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    policy = policy if policy is not None else WastePolicy()
    now_us = _us(now)
    today = now_us // DAY_US
    last_day = _day_of_date(window_to) if window_to is not None else today
    first_day = (
        _day_of_date(window_from)
        if window_from is not None
        else last_day - (DEFAULT_WINDOW_DAYS - 1)
    )
    if first_day > last_day:
        raise ValueError("window_from is after window_to")
    last_full_day = min(last_day, today - 1)
    rate_day = last_full_day if last_full_day >= first_day else last_day
    as_of_us = min(now_us, (last_day + 1) * DAY_US)

    rows = sorted(events, key=lambda e: (e.epoch_us, e.id))
    ctx = _Ctx(
        rows=rows,
        days=[r.epoch_us // DAY_US for r in rows],
        skus=skus,
        policy=policy,
        currency=currency,
        first_day=first_day,
        last_day=last_day,
        today=today,
        last_full_day=last_full_day,
        rate_day=rate_day,
        as_of_us=as_of_us,
        claimed=[0] * len(rows),
    )
    found = _reserved(ctx)
    found += _storage_retention(ctx)
    found += _checkpoint_growth(ctx)
    found += _cross_region(ctx)
    found += _log_ingest(ctx)
    found += _log_retention(ctx)
    found += _experiments(ctx, progress or {})
    found.sort(key=lambda f: (-f.cost, -f.per_day, f.finding.kind, f.finding.title))
    return WasteReport(
        project=project,
        currency=currency,
        window_from=_date(first_day),
        window_to=_date(last_day),
        as_of=_datetime(as_of_us),
        total_waste=format_money(sum(f.cost for f in found)),
        total_per_day_if_left=format_money(sum(f.per_day for f in found)),
        findings=[f.finding for f in found],
        policy=policy,
    )
