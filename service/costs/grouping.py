"""Cost sums per group: the kept totals a query's plan names, read and summed by its group_by.

Every read of the totals starts at `read_state` (the batches still queued are folded first).
On the big sources (`plan.BIG_SOURCES`) a report leaves quantities, and often event counts,
on the server and reads them for the rows of its page only (`PageReads`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ..ledger.fields import dims_of, tags_of
from ..ledger.folding import settled_state
from .plan import BIG_SOURCES, ReadPlan, plan_reads
from .query import CostQuery, in_range, iso_day, kept_by_filters, period_label, validate
from .sums import ints, picker, sum_fields

if TYPE_CHECKING:
    from ..stores import Stores

Quantities = Literal["all", "none", "later"]
Events = Literal["all", "later"]
Row = tuple[tuple[str, ...], list[int]]
# A group key -> [cost, quantity, events]
Sums = dict[tuple[str, ...], list[int]]
# A bucket: (period label, day): the periods of one label (and one day, grouped by day).
BucketId = tuple[str, str]
_HOURLY_POS = {"stage": 0, "category": 1, "fixed": 2}
_KINDS = {ord("c"): 0, ord("q"): 1, ord("n"): 2}


@dataclass
class PageReads:
    """Sums read after the rows are ranked, for one page's rows: quantities, and event counts
    when the ranking did not need them (`events_total` then holds all rows' total); which
    cells (by raw dims) of which buckets made each row, and the periods of a bucket."""

    source: str = ""
    events_later: bool = False
    events_total: int | None = None
    bucket_periods: dict[BucketId, list[str]] = field(default_factory=dict)
    origins: dict[tuple[str, ...], list[tuple[BucketId, bytes]]] = field(default_factory=dict)

    async def fill(self, store: Stores, project: str, rows: Sequence[Row]) -> None:
        if not self.source:
            return  # quantities were read with everything else
        kinds = ((b"q|", 1), (b"n|", 2)) if self.events_later else ((b"q|", 1),)
        # Per bucket: the fields its page cells need, and the row sum each one adds to; the
        # same fields are read from each period of the bucket.
        wanted: dict[BucketId, tuple[list[bytes], list[tuple[list[int], int]]]] = {}
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
                ints([b"0" if value is None else value for value in next(values)])
                for _ in self.bucket_periods[bucket_id]
            ]
            totals = map(sum, zip(*columns, strict=True))
            for (sums, index), total in zip(slots, totals, strict=True):
                sums[index] += total


async def read_state(store: Stores, project: str) -> tuple[dict[str, int], bool]:
    """The days with totals (yyyymmdd -> cost) and whether the roll-ups hold every event,
    every batch accepted before the request folded in (`ledger.folding.settled_state`)."""
    return await settled_state(store, project)


async def grouped(store: Stores, query: CostQuery) -> Sums:
    """Sum cost, quantity and events per group (quantity: only with sku in group_by)."""
    validate(query)
    daily, complete = await read_state(store, query.project)
    return await group_sums(store, query, in_range(daily, query), complete)


async def group_sums(
    store: Stores,
    query: CostQuery,
    days: list[str],
    rollups_complete: bool,
    quantities: Quantities = "all",
    later: PageReads | None = None,
    events: Events = "all",
) -> Sums:
    """Sums per group. `quantities`: "all" sums them with the rest; "none" and "later" leave
    them at 0 when the source is big ("later": `later` then knows how to read them for the
    rows of a page). `events` "later", with quantities "later": the event counts too, if a
    small roll-up gives their total (`later.events_total`)."""
    if query.granularity == "hour":
        return await _hourly_sums(store, query, days)
    plan = plan_reads(query, days, rollups_complete)
    periods = [*plan.days, *plan.months]
    skip_q = quantities != "all" and plan.source in BIG_SOURCES
    track = later if skip_q and quantities == "later" else None
    hashes = await _read_hashes(store, query, plan, days, rollups_complete, skip_q, track, events)
    buckets = _buckets(query, periods, hashes, track)
    return _sum_cells(query, buckets, _cell_keys(query, plan), track)


async def _hourly_sums(store: Stores, query: CostQuery, days: list[str]) -> Sums:
    sums: Sums = {}
    for day, fields in zip(days, await store.ledger.hour_totals(query.project, days), strict=True):
        for raw_field, raw_value in fields.items():
            field_kind, hour, dims_text = raw_field.decode().split("|", 2)
            dims = dims_of(dims_text)
            if not all(
                kept_by_filters(dims[_HOURLY_POS[n]], n, query.filters) for n in query.filters
            ):
                continue
            key = (f"{iso_day(day)}T{hour}", *(dims[_HOURLY_POS[n]] for n in query.group_by))
            # c|: cost; n|: events (an hour whose events cost nothing has only this one).
            sums.setdefault(key, [0, 0, 0])[0 if field_kind == "c" else 2] += int(raw_value)
    return sums


async def _read_hashes(
    store: Stores,
    query: CostQuery,
    plan: ReadPlan,
    days: list[str],
    rollups_complete: bool,
    skip_q: bool,
    track: PageReads | None,
    events: Events,
) -> list[dict[bytes, bytes]]:
    """The hashes of the plan's periods (without `q|` fields when `skip_q`), and `track` told
    what was left for the page."""
    periods = [*plan.days, *plan.months]
    # Event counts left for the page's rows too (half the fields of a big read): their total
    # is then summed from the smallest roll-up holding the filters, over the same days (every
    # roll-up holds every event of each day once they are complete), read alongside.
    by_days = replace(query, group_by=(), granularity="day")
    skip_n = (
        track is not None
        and events == "later"
        and plan_reads(by_days, days, rollups_complete).source not in BIG_SOURCES
    )
    wanted_kinds = "c" + ("" if skip_q else "q") + ("" if skip_n else "n")
    if skip_n and track is not None:
        hashes, by_day_sums = await asyncio.gather(
            store.ledger.totals_hashes(query.project, plan.source, periods, wanted_kinds),
            group_sums(store, by_days, days, rollups_complete, "none"),
        )
        track.events_later = True
        track.events_total = sum(v[2] for v in by_day_sums.values())
    else:
        hashes = await store.ledger.totals_hashes(query.project, plan.source, periods, wanted_kinds)
    if track is not None:
        track.source = plan.source
    return hashes


def _buckets(
    query: CostQuery,
    periods: list[str],
    hashes: list[dict[bytes, bytes]],
    track: PageReads | None,
) -> dict[BucketId, tuple[list[bytes], list[int]]]:
    """The raw fields summed per bucket (period and/or day): ints only, no parsing."""
    by_day = "day" in query.group_by
    granularity = query.granularity
    in_bucket: dict[BucketId, list[dict[bytes, bytes]]] = {}
    for period, fields in zip(periods, hashes, strict=True):
        if len(period) == 8:
            label = period_label(period, granularity) if granularity else ""
            bucket_id = (label, period if by_day else "")
        else:  # a whole month: never with day grouping or day/week granularity
            bucket_id = (f"{period[:4]}-{period[4:]}" if granularity else "", "")
        if track is not None:
            track.bucket_periods.setdefault(bucket_id, []).append(period)
        in_bucket.setdefault(bucket_id, []).append(fields)
    return {bucket_id: sum_fields(group) for bucket_id, group in in_bucket.items()}


CellKeys = Callable[[Iterable[bytes]], Iterable[tuple[str, ...] | None]]


def _cell_keys(query: CostQuery, plan: ReadPlan) -> CellKeys:
    """What maps the raw dims of cells to their group keys (None when the filters drop the
    cell); a key's "day" is left empty, filled in per bucket."""
    pos = {name: i for i, name in enumerate(plan.dims)}
    tags_at = pos.get("tags")
    filters = [(pos[n], n) for n in query.filters]
    tag_filters = list(query.tag_filters.items())
    names = list(query.group_by)
    plain = [pos[n] for n in names] if all(n in pos for n in names) else None

    if plain is not None and not filters and not tag_filters:
        # Keys are picked straight from the split dims, in C loops (thousands of cells).
        pick = picker(plain)

        def parse_all(many: Iterable[bytes]) -> Iterable[tuple[str, ...] | None]:
            return map(pick, map(dims_of, map(bytes.decode, many)))

        return parse_all

    def parse(raw_dims: bytes) -> tuple[str, ...] | None:
        dims = dims_of(raw_dims.decode())
        if filters and not all(kept_by_filters(dims[i], n, query.filters) for i, n in filters):
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

    def parse_each(many: Iterable[bytes]) -> Iterable[tuple[str, ...] | None]:
        return map(parse, many)

    return parse_each


def _sum_cells(
    query: CostQuery,
    buckets: dict[BucketId, tuple[list[bytes], list[int]]],
    parse_all: CellKeys,
    track: PageReads | None,
) -> Sums:
    """The bucket totals added up per group key. The dims of each distinct cell are parsed
    once (its c|, q| and n| fields share them)."""
    sums: Sums = {}
    granularity = query.granularity
    day_at = list(query.group_by).index("day") if "day" in query.group_by else -1
    parsed: dict[bytes, tuple[str, ...] | None] = {}
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
            kind = _KINDS[raw[0]]
            row[kind] += total
            if track is not None and kind == 0:  # one c| field per cell and bucket
                track.origins.setdefault(key, []).append(((label, day), raw_dims))
    return sums
