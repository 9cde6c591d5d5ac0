"""Cost queries: read the kept totals and group them by any set of dimensions.

Totals are kept at two grains, both exact integer sums of the events:

* per day × stage × experiment × category × SKU × owner × fixed/elastic × attributed tags —
  every coarser answer by day, week (ISO, Monday first) or month is a sum of these;
* per hour × stage × category × fixed/elastic — for hour granularity and hourly peaks;

plus roll-ups of the first onto a few dimensions, per day and per month (rollups.py). A
query reads the smallest roll-up holding its group_by and filters — whole months from the
month roll-ups, the other days from the day ones — and the finest totals only when none does
or when the roll-ups do not yet hold every accepted event (`plan_reads`).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from itertools import chain
from operator import itemgetter
from typing import Literal

import msgspec

from costcore.money import format_money, format_quantity

from ..ledger.folding import settle
from ..ledger.rollups import FINE_DIMS, ROLLUP_VERSION, covering
from ..ledger.store import dims_of, tags_of
from ..projects.service import project_settings
from ..stores import Stores

DIMENSIONS: tuple[str, ...] = ("day", "stage", "experiment", "category", "sku", "owner", "fixed")
HOURLY_DIMENSIONS: tuple[str, ...] = ("stage", "category", "fixed")
Granularity = Literal["hour", "day", "week", "month"]
REWORK_VALUES = frozenset({"1", "true", "yes"})
_HOURLY_POS = {"stage": 0, "category": 1, "fixed": 2}


class QueryError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class CostQuery:
    project: str
    from_day: date | None = None
    to_day: date | None = None
    group_by: Sequence[str] = ("category",)
    granularity: Granularity | None = None
    filters: dict[str, str] = field(default_factory=dict)  # dimension -> value
    tag_filters: dict[str, str] = field(default_factory=dict)  # tag key -> value
    sort: str = "-cost"
    top: int | None = None
    offset: int = 0
    limit: int = 100


class CostRow(msgspec.Struct, omit_defaults=False):
    key: dict[str, str]
    cost: str
    currency: str | None
    events: int
    # Quantity and unit only make sense when the rows are split by SKU.
    quantity: str | None = None
    unit: str | None = None


class CostReport(msgspec.Struct):
    project: str
    currency: str | None
    from_day: str | None
    to_day: str | None
    group_by: list[str]
    granularity: str | None
    total_cost: str
    total_events: int
    rows: list[CostRow]
    offset: int
    limit: int
    total_rows: int
    next_offset: int | None


class Breakdown(msgspec.Struct):
    name: str
    cost: str
    share: str  # of the total, as a decimal fraction with 4 places


class Peak(msgspec.Struct):
    """Peak against average spend per period (day or hour) over the range, zero periods included."""

    unit: str
    periods: int
    average: str
    peak: str
    peak_at: str | None
    headroom_ratio: str | None  # peak / average: what a budget must absorb above the average


class ReworkShare(msgspec.Struct):
    stage: str
    rework_cost: str
    stage_cost: str
    share: str


class CostSummary(msgspec.Struct):
    project: str
    currency: str | None
    from_day: str | None
    to_day: str | None
    total_cost: str
    total_events: int
    by_category: list[Breakdown]
    by_stage: list[Breakdown]
    fixed_cost: str
    elastic_cost: str
    fixed_share: str
    peak_daily: Peak
    peak_hourly: Peak
    rework_cost: str
    rework_share: str
    rework_by_stage: list[ReworkShare]


def day_key(d: date) -> str:
    return d.strftime("%Y%m%d")


def _iso(day: str) -> str:
    return f"{day[:4]}-{day[4:6]}-{day[6:]}"


def _period(day: str, granularity: str | None) -> str:
    if granularity == "week":
        year, week, _ = date(int(day[:4]), int(day[4:6]), int(day[6:])).isocalendar()
        return f"{year}-W{week:02d}"
    if granularity == "month":
        return f"{day[:4]}-{day[4:6]}"
    return _iso(day)


def _share(part: int, total: int) -> str:
    if total == 0:
        return "0.0000"
    scaled = (part * 10_000 * 2 + total) // (2 * total)  # rounded half up at 4 places
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


def validate(query: CostQuery) -> None:
    hourly = query.granularity == "hour"
    allowed = HOURLY_DIMENSIONS if hourly else DIMENSIONS
    for name in query.group_by:
        if name.startswith("tag.") and not hourly and len(name) > 4:
            continue
        if name not in allowed or (hourly and name == "day"):
            extra = " (hour granularity groups by stage, category and fixed only)" if hourly else ""
            raise QueryError("group_by", f"cannot group by {name!r}{extra}")
    if len(set(query.group_by)) != len(query.group_by):
        raise QueryError("group_by", "a dimension is named twice")
    for name in query.filters:
        if hourly and name not in HOURLY_DIMENSIONS:
            raise QueryError(name, "hour granularity filters by stage, category and fixed only")
    if hourly and query.tag_filters:
        raise QueryError("tag", "hour granularity cannot filter by tag")
    if query.from_day and query.to_day and query.to_day <= query.from_day:
        raise QueryError("to", "must be after 'from'")
    if query.sort.lstrip("-") not in ("cost", "key", "events"):
        raise QueryError("sort", "use cost, key or events, with '-' for descending")


def _in_range(daily: dict[str, int], query: CostQuery) -> list[str]:
    lo = day_key(query.from_day) if query.from_day else ""
    hi = day_key(query.to_day) if query.to_day else "99999999"
    return sorted(d for d in daily if lo <= d < hi)


def _wanted(value: str, name: str, filters: dict[str, str]) -> bool:
    want = filters.get(name)
    if want is None:
        return True
    if name == "fixed":
        return (value == "f") == (want == "fixed")
    return value == want


@dataclass(frozen=True)
class ReadPlan:
    """What a query reads: one source (a roll-up, or the finest totals `tot`), at day grain
    for `days` and at month grain for `months` (months the range covers whole)."""

    source: str
    dims: tuple[str, ...]  # the dimensions of the source's fields, in their order
    days: list[str]  # yyyymmdd
    months: list[str]  # yyyymm


def _needed(query: CostQuery) -> set[str]:
    needed = {"tags" if n.startswith("tag.") else n for n in query.group_by if n != "day"}
    needed.update(query.filters)
    if query.tag_filters:
        needed.add("tags")
    return needed


def _whole_month(month: str, query: CostQuery) -> bool:
    first = date(int(month[:4]), int(month[4:]), 1)
    nxt = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return (query.from_day is None or query.from_day <= first) and (
        query.to_day is None or query.to_day >= nxt
    )


def plan_reads(query: CostQuery, days: Sequence[str], rollups_complete: bool) -> ReadPlan:
    """The smallest source that covers the query's group_by and filters, and the periods to
    read from it: whole months from month roll-ups, the other days from day roll-ups."""
    rollup = covering(_needed(query), "sku" in query.group_by) if rollups_complete else None
    if rollup is None:
        return ReadPlan("tot", FINE_DIMS, list(days), [])
    if not rollup.monthly or "day" in query.group_by or query.granularity in ("day", "week"):
        return ReadPlan(rollup.name, rollup.dims, list(days), [])
    whole = {m for m in {d[:6] for d in days} if _whole_month(m, query)}
    return ReadPlan(
        rollup.name, rollup.dims, [d for d in days if d[:6] not in whole], sorted(whole)
    )


# Sources whose hashes hold thousands of cells a day: there, fields a query does not need are
# left on the server (HSCAN MATCH), and quantities (and event counts, when the rows are not
# ranked by them) are read for the rows of the page only.
_BIG = frozenset({"tot", "xsku"})
Quantities = Literal["all", "none", "later"]
Events = Literal["all", "later"]


@dataclass
class _Later:
    """Sums read after the rows are ranked, for one page's rows: quantities, and event counts
    when the ranking did not need them (`events_total` then holds all rows' total); which
    cells (by raw dims) of which buckets made each row, and the periods of a bucket."""

    source: str = ""
    events_later: bool = False
    events_total: int | None = None
    bucket_periods: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    origins: dict[tuple[str, ...], list[tuple[tuple[str, str], bytes]]] = field(
        default_factory=dict
    )

    async def fill(self, store: Stores, project: str, rows: Sequence[Row]) -> None:
        if not self.source:
            return  # quantities were read with everything else
        kinds = ((b"q|", 1), (b"n|", 2)) if self.events_later else ((b"q|", 1),)
        # Per bucket: the fields its page cells need, and the row sum each one adds to; the
        # same fields are read from each period of the bucket.
        wanted: dict[tuple[str, str], tuple[list[bytes], list[tuple[list[int], int]]]] = {}
        for key, sums in rows:
            for bucket_id, raw_dims in self.origins.get(key, ()):
                names, slots = wanted.setdefault(bucket_id, ([], []))
                for prefix, index in kinds:
                    names.append(prefix + raw_dims)
                    slots.append((sums, index))
        if not wanted:
            return
        reads = [
            (period, names)
            for bucket_id, (names, _) in wanted.items()
            for period in self.bucket_periods[bucket_id]
        ]
        values = iter(await store.ledger.totals_fields(project, self.source, reads))
        for bucket_id, (_, slots) in wanted.items():
            columns = [  # a field missing from a period adds 0
                _ints([b"0" if value is None else value for value in next(values)])
                for _ in self.bucket_periods[bucket_id]
            ]
            totals = map(sum, zip(*columns, strict=True))
            for (sums, index), total in zip(slots, totals, strict=True):
                sums[index] += total


async def _state(store: Stores, project: str) -> tuple[dict[str, int], bool]:
    # Every read of the totals starts here: fold the batches still queued, so the answer
    # holds every batch accepted before the request.
    await settle(store, project)
    daily, accepted, covered = await store.ledger.totals_state(project, ROLLUP_VERSION)
    if covered != accepted:  # maybe a batch landed between the two reads: look once more
        daily, accepted, covered = await store.ledger.totals_state(project, ROLLUP_VERSION)
    return daily, covered == accepted


async def grouped(store: Stores, query: CostQuery) -> dict[tuple[str, ...], list[int]]:
    """Sum cost, quantity and events per group (quantity: only with sku in group_by)."""
    validate(query)
    daily, complete = await _state(store, query.project)
    return await _grouped(store, query, _in_range(daily, query), complete)


async def _grouped(
    store: Stores,
    query: CostQuery,
    days: list[str],
    rollups_complete: bool,
    quantities: Quantities = "all",
    later: _Later | None = None,
    events: Events = "all",
) -> dict[tuple[str, ...], list[int]]:
    """Sums per group. `quantities`: "all" sums them with the rest; "none" and "later" leave
    them at 0 when the source is big ("later": `later` then knows how to read them for the
    rows of a page). `events` "later", with quantities "later": the event counts too, if a
    small roll-up gives their total (`later.events_total`)."""
    sums: dict[tuple[str, ...], list[int]] = {}
    if query.granularity == "hour":
        for day, fields in zip(
            days, await store.ledger.hour_totals(query.project, days), strict=True
        ):
            for raw_field, raw_value in fields.items():
                field_kind, hour, dims_text = raw_field.decode().split("|", 2)
                dims = dims_of(dims_text)
                if not all(_wanted(dims[_HOURLY_POS[n]], n, query.filters) for n in query.filters):
                    continue
                key = (f"{_iso(day)}T{hour}", *(dims[_HOURLY_POS[n]] for n in query.group_by))
                # c|: cost; n|: events (an hour whose events cost nothing has only this one).
                sums.setdefault(key, [0, 0, 0])[0 if field_kind == "c" else 2] += int(raw_value)
        return sums
    plan = plan_reads(query, days, rollups_complete)
    periods = [*plan.days, *plan.months]
    skip_q = quantities != "all" and plan.source in _BIG
    track = later if skip_q and quantities == "later" else None
    # Event counts left for the page's rows too (half the fields of a big read): their total
    # is then summed from the smallest roll-up holding the filters, over the same days (every
    # roll-up holds every event of each day once they are complete), read alongside.
    by_days = replace(query, group_by=(), granularity="day")
    skip_n = (
        track is not None
        and events == "later"
        and plan_reads(by_days, days, rollups_complete).source not in _BIG
    )
    wanted_kinds = "c" + ("" if skip_q else "q") + ("" if skip_n else "n")
    if skip_n and track is not None:
        hashes, by_day_sums = await asyncio.gather(
            store.ledger.totals_hashes(query.project, plan.source, periods, wanted_kinds),
            _grouped(store, by_days, days, rollups_complete, "none"),
        )
        track.events_later = True
        track.events_total = sum(v[2] for v in by_day_sums.values())
    else:
        hashes = await store.ledger.totals_hashes(query.project, plan.source, periods, wanted_kinds)
    if track is not None:
        track.source = plan.source
    by_day = "day" in query.group_by
    granularity = query.granularity
    # 1. Sum the raw fields per bucket (period and/or day): ints only, no parsing.
    in_bucket: dict[tuple[str, str], list[dict[bytes, bytes]]] = {}
    for period, fields in zip(periods, hashes, strict=True):
        if len(period) == 8:
            label = _period(period, granularity) if granularity else ""
            bucket_id = (label, period if by_day else "")
        else:  # a whole month: never with day grouping or day/week granularity
            bucket_id = (f"{period[:4]}-{period[4:]}" if granularity else "", "")
        if track is not None:
            track.bucket_periods.setdefault(bucket_id, []).append(period)
        in_bucket.setdefault(bucket_id, []).append(fields)
    buckets = {bucket_id: _sum_fields(group) for bucket_id, group in in_bucket.items()}
    # 2. Parse the dims of each distinct cell once (its c|, q| and n| fields share them): its
    #    group key, or None when the filters drop it.
    pos = {name: i for i, name in enumerate(plan.dims)}
    tags_at = pos.get("tags")
    filters = [(pos[n], n) for n in query.filters]
    tag_filters = list(query.tag_filters.items())
    names = list(query.group_by)
    plain = [pos[n] for n in names] if all(n in pos for n in names) else None
    parsed: dict[bytes, tuple[str, ...] | None] = {}

    def parse(raw_dims: bytes) -> tuple[str, ...] | None:
        dims = dims_of(raw_dims.decode())
        if filters and not all(_wanted(dims[i], n, query.filters) for i, n in filters):
            return None
        if plain is not None and not tag_filters:  # only dimensions of the source: no tags
            return tuple([dims[i] for i in plain])
        tags = tags_of(dims[tags_at]) if tags_at is not None and len(dims) > tags_at else {}
        if tag_filters and any(tags.get(k) != v for k, v in tag_filters):
            return None
        return tuple(
            ""  # the day: filled in per bucket
            if name == "day"
            else tags.get(name[4:], "")
            if name.startswith("tag.")
            else dims[pos[name]]
            for name in names
        )

    if plain is not None and not filters and not tag_filters:
        # Keys are picked straight from the split dims, in C loops (thousands of cells).
        pick = _picker(plain)

        def parse_all(many: Iterable[bytes]) -> Iterable[tuple[str, ...] | None]:
            return map(pick, map(dims_of, map(bytes.decode, many)))

    else:

        def parse_all(many: Iterable[bytes]) -> Iterable[tuple[str, ...] | None]:
            return map(parse, many)

    day_at = names.index("day") if by_day else -1
    kinds = {ord("c"): 0, ord("q"): 1, ord("n"): 2}
    for (label, day), (raws, totals) in buckets.items():
        unseen = list({raw[2:] for raw in raws}.difference(parsed))
        parsed.update(zip(unseen, parse_all(unseen), strict=True))
        for raw, total in zip(raws, totals, strict=True):
            raw_dims = raw[2:]
            hit = parsed[raw_dims]
            if hit is None:
                continue
            key = hit
            if day_at >= 0:
                key = (*key[:day_at], day, *key[day_at + 1 :])
            if granularity is not None:
                key = (label, *key)
            row = sums.get(key)
            if row is None:
                row = sums[key] = [0, 0, 0]
            kind = kinds[raw[0]]
            row[kind] += total
            if track is not None and kind == 0:  # one c| field per cell and bucket
                track.origins.setdefault(key, []).append(((label, day), raw_dims))
    return sums


def _picker(positions: Sequence[int]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    """A function returning the items at `positions` as a tuple (`itemgetter` returns a bare
    item for one position)."""
    if len(positions) > 1:
        return itemgetter(*positions)
    if len(positions) == 1:
        (at,) = positions
        return lambda items: (items[at],)
    return lambda items: ()


_INT_LIST = msgspec.json.Decoder(list[int])


def _ints(values: Sequence[bytes]) -> list[int]:
    """`int(v)` of each value, parsed in one C call: the values joined as a JSON array of
    integers (~2x faster than one `int()` each). Each value must then be exactly one JSON
    integer (a comma inside one would add an element, an empty one is malformed), which
    `int()` reads the same; anything else (never written by HINCRBY) falls back to `int()`."""
    try:
        out = _INT_LIST.decode(b"[" + b",".join(values) + b"]")
    except msgspec.DecodeError:
        out = []
    return out if len(out) == len(values) else [int(v) for v in values]


def _sum_fields(hashes: Sequence[dict[bytes, bytes]]) -> tuple[list[bytes], list[int]]:
    """Each field of `hashes` (first-seen order) and its total over them (0 where absent).

    Hot on the big sources (a week of `xsku` is 7 hashes of 4,000 fields): the values of
    every field are picked from all hashes at once (`itemgetter`, after filling in the
    fields a hash lacks), converted in bulk (`_ints`) and summed in C loops (`zip`, `sum`)
    rather than one Python step per field and hash.
    """
    present = [h for h in hashes if h]
    if len(present) == 1:
        return list(present[0]), _ints(list(present[0].values()))
    fields = list(dict.fromkeys(chain.from_iterable(present)))
    if not fields:
        return [], []
    if len(fields) == 1:  # every hash holds just it (itemgetter of one field returns no tuple)
        return fields, [sum(_ints([v for h in present for v in h.values()]))]
    pick = itemgetter(*fields)
    zeros = dict.fromkeys(fields, b"0")
    columns = [
        _ints(pick(h if len(h) == len(fields) else {**zeros, **h}))  # same length: same fields
        for h in present
    ]
    return fields, list(map(sum, zip(*columns, strict=True)))


Row = tuple[tuple[str, ...], list[int]]


def _order(
    sums: dict[tuple[str, ...], list[int]], sort: str, top: int | None, needed: int, width: int
) -> tuple[list[Row], int]:
    """The first `needed` rows in `sort` order (after the `top` cut and its '(other)' row),
    and how many rows there are in all. Only the rows shown are sorted fully."""
    by = sort.lstrip("-")
    descending = sort.startswith("-")
    index = {"cost": 0, "events": 2}.get(by)
    items = list(sums.items())

    def first(n: int) -> list[Row]:
        if index is None:
            pick = heapq.nlargest if descending else heapq.nsmallest
            return (
                pick(n, items, key=lambda kv: kv[0])
                if n < len(items)
                else sorted(items, key=lambda kv: kv[0], reverse=descending)
            )
        sign = -1 if descending else 1
        i = index
        if n < len(items):
            return heapq.nsmallest(n, items, key=lambda kv: (sign * kv[1][i], kv[0]))
        return sorted(items, key=lambda kv: (sign * kv[1][i], kv[0]))

    if top is not None and len(items) > top:
        head = first(top)
        other = [sum(v[k] for v in sums.values()) - sum(v[k] for _, v in head) for k in range(3)]
        ordered = [*head, (tuple("(other)" for _ in range(width)), other)]
        return ordered, len(ordered)
    return first(needed), len(items)


async def cost_report(
    store: Stores,
    project: str,
    from_day: date | None,
    to_day: date | None,
    group_by: Sequence[str],
    units: dict[str, str],
    offset: int = 0,
    limit: int = 100,
    *,
    granularity: Granularity | None = None,
    filters: dict[str, str] | None = None,
    tag_filters: dict[str, str] | None = None,
    sort: str = "-cost",
    top: int | None = None,
) -> CostReport:
    query = CostQuery(
        project,
        from_day,
        to_day,
        tuple(group_by),
        granularity,
        filters or {},
        tag_filters or {},
        sort,
        top,
        offset,
        limit,
    )
    settings = await project_settings(store, project)
    validate(query)
    daily, complete = await _state(store, project)
    split_by_sku = "sku" in group_by and granularity != "hour"
    # Quantities are shown per SKU row only: read them for the page's rows, unless the rows
    # left out are summed into '(other)'.
    quantities: Quantities = "none" if not split_by_sku else "later" if top is None else "all"
    # Ranked by cost or key, the rows' event counts are read for the page too.
    events_read: Events = "all" if query.sort.lstrip("-") == "events" else "later"
    later = _Later()
    sums = await _grouped(
        store, query, _in_range(daily, query), complete, quantities, later, events_read
    )
    names = (["period"] if granularity else []) + list(group_by)
    ordered, total_rows = _order(sums, query.sort, top, offset + limit, len(names))
    await later.fill(store, project, ordered[offset : offset + limit])
    rows = []
    for key, (cost, qty, events) in ordered[offset : offset + limit]:
        labels = dict(zip(names, key, strict=True))
        if "day" in labels and labels["day"] != "(other)":
            labels["day"] = _iso(labels["day"])
        if "fixed" in labels and labels["fixed"] in ("f", "e"):
            labels["fixed"] = "fixed" if labels["fixed"] == "f" else "elastic"
        sku = labels.get("sku")
        rows.append(
            CostRow(
                key=labels,
                cost=format_money(cost),
                currency=settings.currency,
                events=events,
                quantity=format_quantity(qty) if split_by_sku else None,
                unit=units.get(sku) if sku is not None else None,
            )
        )
    end = offset + limit
    return CostReport(
        project=project,
        currency=settings.currency,
        from_day=from_day.isoformat() if from_day else None,
        to_day=to_day.isoformat() if to_day else None,
        group_by=list(group_by),
        granularity=granularity,
        total_cost=format_money(sum(v[0] for v in sums.values())),
        total_events=(
            later.events_total
            if later.events_total is not None
            else sum(v[2] for v in sums.values())
        ),
        rows=rows,
        offset=offset,
        limit=limit,
        total_rows=total_rows,
        next_offset=end if end < total_rows else None,
    )


def _peak(values: dict[str, int], periods: int, unit: str) -> Peak:
    total = sum(values.values())
    if periods == 0:
        return Peak(unit, 0, "0.00", "0.00", None, None)
    at, peak = max(values.items(), key=lambda kv: (kv[1], kv[0])) if values else (None, 0)
    average_num = total  # average = total / periods, kept exact for the ratio
    ratio = _ratio(peak * periods, average_num) if average_num else None
    return Peak(
        unit=unit,
        periods=periods,
        average=format_money((total * 2 + periods) // (2 * periods)),
        peak=format_money(peak),
        peak_at=at,
        headroom_ratio=ratio,
    )


def _ratio(num: int, den: int) -> str:
    scaled = (num * 10_000 * 2 + den) // (2 * den)
    return f"{scaled // 10_000}.{scaled % 10_000:04d}"


async def cost_summary(
    store: Stores, project: str, from_day: date | None, to_day: date | None
) -> CostSummary:
    settings = await project_settings(store, project)
    base = CostQuery(project, from_day, to_day, ("category", "stage", "fixed", "tag.rework"))
    validate(base)
    daily_all, complete = await _state(store, project)
    days = _in_range(daily_all, base)
    sums = await _grouped(store, base, days, complete, "none")
    total = sum(v[0] for v in sums.values())
    by_category: dict[str, int] = {}
    by_stage: dict[str, int] = {}
    rework_stage: dict[str, int] = {}
    fixed = 0
    for (category, stage, kind, rework_tag), (cost, _, _) in sums.items():
        by_category[category] = by_category.get(category, 0) + cost
        by_stage[stage] = by_stage.get(stage, 0) + cost
        if kind == "f":
            fixed += cost
        if rework_tag.lower() in REWORK_VALUES:
            rework_stage[stage] = rework_stage.get(stage, 0) + cost

    def breakdown(parts: dict[str, int]) -> list[Breakdown]:
        return [
            Breakdown(name, format_money(cost), _share(cost, total))
            for name, cost in sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    # Peaks: over the requested range, or from the first to the last day with spend.
    daily = {_iso(d): daily_all[d] for d in days}
    first = from_day or (date.fromisoformat(_iso(days[0])) if days else None)
    last = (
        (to_day - timedelta(days=1))
        if to_day
        else (date.fromisoformat(_iso(days[-1])) if days else None)
    )
    n_days = (last - first).days + 1 if first and last and last >= first else 0
    hours: dict[str, int] = {}
    for day, fields in zip(days, await store.ledger.hour_totals(project, days), strict=True):
        for raw_field, raw_value in fields.items():
            field_kind, hour, _ = raw_field.decode().split("|", 2)
            if field_kind != "c":
                continue  # the hour's event count
            stamp = f"{_iso(day)}T{hour}:00Z"
            hours[stamp] = hours.get(stamp, 0) + int(raw_value)
    rework = sum(rework_stage.values())
    return CostSummary(
        project=project,
        currency=settings.currency,
        from_day=first.isoformat() if first else None,
        to_day=(last + timedelta(days=1)).isoformat() if last else None,
        total_cost=format_money(total),
        total_events=sum(v[2] for v in sums.values()),
        by_category=breakdown(by_category),
        by_stage=breakdown(by_stage),
        fixed_cost=format_money(fixed),
        elastic_cost=format_money(total - fixed),
        fixed_share=_share(fixed, total),
        peak_daily=_peak(daily, n_days, "day"),
        peak_hourly=_peak(hours, n_days * 24, "hour"),
        rework_cost=format_money(rework),
        rework_share=_share(rework, total),
        rework_by_stage=[
            ReworkShare(
                stage,
                format_money(cost),
                format_money(by_stage[stage]),
                _share(cost, by_stage[stage]),
            )
            for stage, cost in sorted(rework_stage.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    )
