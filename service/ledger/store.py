"""The ledger's Redis access: the accepted-event log, the fold, the totals and roll-ups, and a
rebuild's staging keys."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from ..storage import scripts
from ..storage.connection import Connection
from ..storage.increments import increment_args
from ..storage.keys import Keys
from ..storage.limbs import LIMB, combined_fields, split_value
from ..storage.replies import as_bytes, as_text, with_high
from .hashes import (
    BUDGET_DAILY,
    BUDGET_SPEND,
    DAILY,
    HOURLY,
    LOG_INDEX,
    ROLLUP_EVENTS,
    TIER,
    TIER_INDEX,
    TOTALS,
    WASTE_CELLS,
    WASTE_FACTS,
    SumsHash,
    rollup_name,
)


@dataclass(frozen=True)
class KeptState:
    """What a read of a project's totals starts from (`LedgerStore.kept_states`)."""

    meta: dict[str, str]  # the project's meta hash (projects/model.py reads it)
    daily: dict[str, int]  # yyyymmdd -> cost nano of that day
    folded: int  # the events the totals hold: accepted less those pending a fold
    covered: int  # the events the roll-ups hold

    @property
    def rollups_complete(self) -> bool:
        return self.covered == self.folded


def _grouped(
    flat: list[dict[bytes, bytes]], groups: Sequence[Sequence[str]]
) -> list[list[dict[bytes, bytes]]]:
    out, at = [], 0
    for group in groups:
        out.append(flat[at : at + len(group)])
        at += len(group)
    return out


# A fold reads the log in pages of about this many bytes (see `LedgerStore.unfolded_entries`).
_READ_PAGE_BYTES = 256 << 10


def sums_key(project: str, address: SumsHash) -> str:
    """The key of one of the project's hashes of sums (service/ledger/hashes.py)."""
    kind, period = address
    if kind == TOTALS:
        return Keys.totals(project, period)
    if kind == HOURLY:
        return Keys.hourly(project, period)
    if kind == DAILY:
        return Keys.daily(project)
    if kind == ROLLUP_EVENTS:
        return Keys.rollup_count(project)
    if kind == TIER:
        return Keys.tier(project, period)
    if kind == BUDGET_SPEND:
        return Keys.budget_spend(project)
    if kind == BUDGET_DAILY:
        return Keys.budget_daily(project)
    if kind == LOG_INDEX:
        return Keys.log_index(project, period)
    if kind == TIER_INDEX:
        return Keys.tier_index(project, period)
    if kind == WASTE_CELLS:
        return Keys.waste_cells(project, period)
    if kind == WASTE_FACTS:
        return Keys.waste_facts(project)
    name = rollup_name(kind)
    if name is None:
        raise ValueError(f"no hash of sums is of kind {kind!r}")
    return Keys.rollup(project, name, period)


Merges = Sequence[tuple[SumsHash, str, int, list[int | str]]]


def _fold_args(
    project: str,
    head: Any,
    events: int,
    increments: Sequence[tuple[SumsHash, str, int]],
    merges: Merges = (),
) -> tuple[list[str], bytes]:
    """KEYS and ARGV[1] of fold_log.lua (`head`: [cursor, new cursor])."""
    keys = [Keys.meta(project)]
    key_index: dict[str, int] = {}

    def ref(key: str) -> int:
        i = key_index.get(key)
        if i is None:
            keys.append(key)
            i = key_index[key] = len(keys)
        return i

    # Each hash's key is spelled once: a fold addresses a few hundred hashes with many
    # thousand increments.
    inc, his = increment_args(ref, increments, lambda address: sums_key(project, address))
    flat: list[Any] = []
    for address, field, keep, pairs in merges:
        flat += (ref(sums_key(project, address)), field, keep, pairs)
    return keys, msgspec.msgpack.encode([*head, str(events), inc, his, flat])


async def _encoded(
    project: str,
    head: list[Any],
    events: int,
    increments: Sequence[tuple[SumsHash, str, int]],
    merges: Merges = (),
) -> tuple[list[str], bytes]:
    if len(increments) > 20_000:  # encoding is CPU work: off the event loop when large
        return await asyncio.to_thread(_fold_args, project, head, events, increments, merges)
    return _fold_args(project, head, events, increments, merges)


class LedgerStore:
    """The log a fold reads, the totals it writes, and what a query or a rebuild reads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.client = conn.client
        self._swap = conn.client.register_script(scripts.SWAP_REBUILD)
        self._fold_log = conn.client.register_script(scripts.FOLD_LOG)
        self._read_unfolded = conn.client.register_script(scripts.READ_UNFOLDED)
        self._totals_state = conn.client.register_script(scripts.TOTALS_STATE)

    # --- the fold -----------------------------------------------------------------------

    async def unfolded_entries(
        self, project: str, limit: int, max_bytes: int
    ) -> tuple[str, str, list[tuple[str, bytes]]]:
        """The fold's cursor ("" when the project has none yet), the log's last entry id ("" if
        empty), and the log entries after the cursor (at most `limit`, and no more once they
        hold `max_bytes`).

        The entries are read in pages of about `_READ_PAGE_BYTES`, one command each, so a
        fold never holds the server for long (one script reading them all held it for
        milliseconds, and every request waited); a fold that another moved the cursor under
        writes nothing (`fold_log`)."""
        log_key = Keys.log(project)
        cursor, last = await self.conn.run_script(
            self._read_unfolded, [Keys.meta(project), log_key], []
        )
        cursor, last = as_text(cursor), as_text(last)
        entries: list[tuple[str, bytes]] = []
        size, page, after = 0, 16, cursor
        while cursor and len(entries) < limit and size < max_bytes:
            want = min(page, limit - len(entries))
            raw = await self.client.xrange(log_key, min="(" + after, max="+", count=want)
            for entry_id, fields in raw or []:
                if len(entries) >= limit or size >= max_bytes:
                    break
                blob = as_bytes((fields or {})[b"b"])
                entries.append((as_text(entry_id), blob))
                size += len(blob)
            if len(raw or []) < want:
                break
            after = entries[-1][0]
            page = max(1, min(256, _READ_PAGE_BYTES * len(entries) // max(size, 1)))
        return cursor, last, entries

    async def fold_log(
        self,
        project: str,
        cursor: str,
        new_cursor: str,
        events: int,
        increments: Sequence[tuple[SumsHash, str, int]],
        merges: Merges = (),
    ) -> bool:
        """Apply the summed increments of the log entries after `cursor` up to `new_cursor`
        (and merge the waste cells' samples) and move the cursor there. False (nothing
        written) when another fold moved it first."""
        keys, payload = await _encoded(project, [cursor, new_cursor], events, increments, merges)
        if not await self.conn.run_script(self._fold_log, keys, [payload]):
            return False
        # The /metrics ranking of projects by spend (keys.py `spend_rank`): the fold's cost is
        # the sum of its daily-index increments. A separate command (the key is global, the
        # fold's are the project's slot): a crash between them leaves the ranking short, which
        # only moves the cut of projects shown; a rebuild sets it from the exact total.
        cost = sum(delta for address, _, delta in increments if address.kind == DAILY)
        await self.client.zincrby(Keys.spend_rank(), cost, project)
        return True

    # --- totals -------------------------------------------------------------------------

    async def _hashes(self, keys: Sequence[str]) -> list[dict[bytes, bytes]]:
        """HGETALL of each key, the high limbs of its sums folded in (service/storage/limbs.py)."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
            pipe.hgetall(Keys.high(key))
        replies = await pipe.execute()
        return [
            combined_fields(replies[i], replies[i + 1]) if replies[i + 1] else replies[i]
            for i in range(0, len(replies), 2)
        ]

    async def daily_costs(self, project: str) -> dict[str, int]:
        (raw,) = await self._hashes([Keys.daily(project)])
        return {as_text(k): int(v) for k, v in raw.items()}

    async def spends_to_date(self, projects: Sequence[str]) -> list[int]:
        """Each project's exact spend to date (nano): its daily index summed, in one pipeline."""
        hashes = await self._hashes([Keys.daily(p) for p in projects])
        return [sum(int(v) for v in fields.values()) for fields in hashes]

    async def hour_totals(self, project: str, days: Sequence[str]) -> list[dict[bytes, bytes]]:
        return await self._hashes([Keys.hourly(project, day) for day in days])

    async def day_totals(self, project: str, days: Sequence[str]) -> list[dict[bytes, bytes]]:
        return await self._hashes([Keys.totals(project, day) for day in days])

    async def totals_state(
        self, project: str, rollup_field: str
    ) -> tuple[dict[str, int], int, int]:
        """The daily index, the accepted counter and the events the roll-ups hold.

        `accepted` counts the events the totals hold: accepted, less those still pending a fold.
        Read in one script, so a fold or a batch landing meanwhile cannot make them differ.
        """
        daily_key = Keys.daily(project)
        covered, accepted, pending, flat, high = await self.conn.run_script(
            self._totals_state,
            [Keys.rollup_count(project), Keys.meta(project), daily_key, Keys.high(daily_key)],
            [rollup_field],
        )
        daily = {as_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        for i in range(0, len(high), 2):
            day = as_text(high[i])
            if day in daily:
                daily[day] += int(high[i + 1]) * LIMB
        return daily, int(accepted) - int(pending), int(covered)

    async def kept_states(self, projects: Sequence[str], rollup_field: str) -> list[KeptState]:
        """`totals_state` of many projects at once, in one pipeline of plain reads (the scrape
        of the spend metrics reads every project): each project's meta, daily index and the
        events its roll-ups hold. Not one atomic read: a fold landing between them makes the
        roll-ups look incomplete (`KeptState.rollups_complete` False), never wrongly complete."""
        pipe = self.client.pipeline(transaction=False)
        for project in projects:
            daily_key = Keys.daily(project)
            pipe.hgetall(Keys.meta(project))
            pipe.hget(Keys.rollup_count(project), rollup_field)
            pipe.hgetall(daily_key)
            pipe.hgetall(Keys.high(daily_key))
        replies = await pipe.execute()
        states = []
        for i in range(0, len(replies), 4):
            meta_raw, covered, flat, high = replies[i : i + 4]
            meta = {as_text(k): as_text(v) for k, v in meta_raw.items()}
            daily = combined_fields(flat, high) if high else flat
            states.append(
                KeptState(
                    meta=meta,
                    daily={as_text(k): int(v) for k, v in daily.items()},
                    folded=int(meta.get("accepted", 0)) - int(meta.get("pend_events", 0)),
                    covered=int(covered or 0),
                )
            )
        return states

    async def many_totals_hashes(
        self, reads: Sequence[tuple[str, str, Sequence[str]]]
    ) -> list[list[dict[bytes, bytes]]]:
        """`totals_hashes` (every kind) of many (project, source, periods) in one pipeline."""
        keys = [
            [self._totals_key(p, source, period) for period in periods]
            for p, source, periods in reads
        ]
        return _grouped(await self._hashes([k for group in keys for k in group]), keys)

    def _totals_key(self, project: str, source: str, period: str) -> str:
        if source == "tot":
            return Keys.totals(project, period)
        return Keys.rollup(project, source, period)

    async def totals_hashes(
        self, project: str, source: str, periods: Sequence[str], kinds: str = "cqn"
    ) -> list[dict[bytes, bytes]]:
        """The hashes of the finest totals (`source` "tot", days) or of roll-up `source` (days
        yyyymmdd or months yyyymm). With `kinds` short of "cqn", only the fields of those kinds
        (``c|``, ``q|``, ``n|``): HSCAN with MATCH, one call per hash as a rule; should a scan
        take several calls, a field returned twice is taken once."""
        keys = [self._totals_key(project, source, p) for p in periods]
        if kinds == "cqn":
            return await self._hashes(keys)
        return await self._scanned(keys, f"[{kinds}]|*")

    async def matching_fields(
        self, project: str, source: str, periods: Sequence[str], match: str
    ) -> list[dict[bytes, bytes]]:
        """The fields matching the glob `match` of each hash of `source` (as `totals_hashes`),
        the others left on the server (HSCAN with MATCH)."""
        return await self._scanned([self._totals_key(project, source, p) for p in periods], match)

    async def _scanned(self, keys: Sequence[str], match: str) -> list[dict[bytes, bytes]]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hscan(key, 0, match=match, count=1_000_000)
        for key in keys:
            pipe.hgetall(Keys.high(key))
        replies = await pipe.execute()
        out: list[dict[bytes, bytes]] = []
        scans, highs = replies[: len(keys)], replies[len(keys) :]
        for key, (cursor, fields), high in zip(keys, scans, highs, strict=True):
            while int(cursor):
                cursor, more = await self.client.hscan(key, cursor, match=match, count=1_000_000)
                fields.update(more)
            fields = cast(dict[bytes, bytes], fields)
            out.append(combined_fields(fields, high) if high else fields)
        return out

    async def totals_sizes(self, project: str, days: Sequence[str]) -> list[int]:
        """The fields of each day's finest totals (HLEN: three per cell)."""
        pipe = self.client.pipeline(transaction=False)
        for day in days:
            pipe.hlen(Keys.totals(project, day))
        return [int(n) for n in await pipe.execute()]

    async def totals_fields(
        self, project: str, source: str, reads: Sequence[tuple[str, Sequence[bytes]]]
    ) -> list[list[bytes | None]]:
        """HMGET of the given fields, per (period, fields) of `source` (as `totals_hashes`)."""
        pipe = self.client.pipeline(transaction=False)
        for period, fields in reads:
            key = self._totals_key(project, source, period)
            pipe.hmget(key, list(fields))
            pipe.hmget(Keys.high(key), list(fields))
        replies = await pipe.execute()
        return [with_high(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]

    # --- log and rebuild ----------------------------------------------------------------

    async def log_entries(
        self, project: str, after: str = "-", count: int = 500
    ) -> list[tuple[str, bytes]]:
        start = after if after == "-" else "(" + after
        raw = await self.client.xrange(Keys.log(project), min=start, max="+", count=count)
        return [
            (as_text(entry_id), as_bytes((fields or {})[b"b"])) for entry_id, fields in raw or []
        ]

    async def log_index_state(self, project: str) -> tuple[bool, str]:
        """Whether the log index covers every entry up to the fold's cursor (meta ``logix``),
        and that cursor ("" when the project has no batch yet)."""
        complete, cursor = await self.client.hmget(Keys.meta(project), ["logix", "fold_cursor"])
        return as_text(complete or b"") == "1", as_text(cursor or b"")

    async def log_index(self, project: str, days: Sequence[str]) -> list[dict[bytes, bytes]]:
        """The log index of each day: ``HH|<entry id>`` -> events (service/ledger/ranges.py)."""
        pipe = self.client.pipeline(transaction=False)
        for day in days:
            pipe.hgetall(Keys.log_index(project, day))
        return list(await pipe.execute())

    async def tier_index(self, project: str, months: Sequence[str]) -> list[dict[bytes, bytes]]:
        """Each month's ``<entry id>|<version>|<sku>`` -> quantity micro (ranges.py)."""
        pipe = self.client.pipeline(transaction=False)
        for month in months:
            pipe.hgetall(Keys.tier_index(project, month))
        return list(await pipe.execute())

    async def entries_by_id(self, project: str, ids: Sequence[str]) -> list[tuple[str, bytes]]:
        """The log entries of these ids, in the order given (an id trimmed away is left out)."""
        pipe = self.client.pipeline(transaction=False)
        key = Keys.log(project)
        for entry_id in ids:
            pipe.xrange(key, min=entry_id, max=entry_id, count=1)
        out = []
        for raw in await pipe.execute():
            for entry_id, fields in raw or []:
                out.append((as_text(entry_id), as_bytes((fields or {})[b"b"])))
        return out

    async def last_log_entry(self, project: str) -> str:
        raw = await self.client.xrevrange(Keys.log(project), max="+", min="-", count=1)
        return as_text(raw[0][0]) if raw else ""

    async def first_log_entry(self, project: str) -> str:
        raw = await self.client.xrange(Keys.log(project), min="-", max="+", count=1)
        return as_text(raw[0][0]) if raw else ""

    async def write_staging(
        self, project: str, hashes: Mapping[str, Mapping[str, int | bytes]]
    ) -> None:
        """Write a rebuild's totals into staging copies of the given live keys."""
        pipe = self.client.pipeline(transaction=False)
        for live_key, mapping in hashes.items():
            staging = Keys.staging(project, live_key)
            pipe.delete(staging)
            items = list(mapping.items())
            for start in range(0, len(items), 1000):
                pipe.hset(staging, mapping=dict(items[start : start + 1000]))
        await pipe.execute()

    async def live_total_keys(self, project: str) -> list[str]:
        """Every live key a rebuild replaces: per-day totals, hours, log index and waste cells,
        the daily index, tier counters, budget counters, the waste facts."""
        days = await self.daily_costs(project)
        months = sorted({d[:6] for d in days})
        return (
            [Keys.totals(project, d) for d in sorted(days)]
            + [Keys.hourly(project, d) for d in sorted(days)]
            + [Keys.log_index(project, d) for d in sorted(days)]
            + [Keys.tier(project, m) for m in months]
            + [Keys.tier_index(project, m) for m in months]
            + [Keys.waste_cells(project, d) for d in sorted(days)]
            + [Keys.daily(project), Keys.budget_spend(project), Keys.budget_daily(project)]
            + [Keys.waste_facts(project)]
        )

    async def replace_sums(
        self,
        project: str,
        last_seen_entry: str,
        hashes: dict[SumsHash, dict[str, int]],
        rollups: Sequence[SumsHash],
        bounds: tuple[int, int],
        samples: Mapping[SumsHash, dict[str, bytes]] | None = None,
    ) -> bool:
        """A rebuild's last step: its sums (whole values) and the waste cells' `samples`
        become the project's, in place of every live hash of sums (`live_total_keys` and the
        given roll-ups), unless a batch was logged after `last_seen_entry` (False: nothing
        changed)."""
        by_key: dict[str, dict[str, int | bytes]] = {
            sums_key(project, address): dict(fields) for address, fields in hashes.items()
        }
        # Sums past int64 in two limbs (service/storage/limbs.py): the high ones in their own keys.
        for key in [k for k in by_key if Keys.has_high(k)]:
            high = {f: split_value(int(v))[1] for f, v in by_key[key].items()}
            if any(high.values()):
                by_key[key] = {f: split_value(int(v))[0] for f, v in by_key[key].items()}
                by_key[Keys.high(key)] = {f: h for f, h in high.items() if h}
        for address, fields in (samples or {}).items():
            by_key.setdefault(sums_key(project, address), {}).update(fields)
        live = await self.live_total_keys(project) + [sums_key(project, h) for h in rollups]
        live += [Keys.high(k) for k in live if Keys.has_high(k)]
        replace = [k for k, v in by_key.items() if v]
        drop = [k for k in live if k not in by_key]
        await self.write_staging(project, {k: by_key[k] for k in replace})
        if not await self.swap_rebuild(project, last_seen_entry, replace, drop, bounds):
            return False
        await self.set_spend_rank(project, sum(hashes.get(SumsHash(DAILY), {}).values()))
        return True

    async def set_spend_rank(self, project: str, cost: int) -> None:
        """The project's place in the /metrics ranking: its exact spend to date `cost` (nano)
        as the nearest float."""
        await self.client.zadd(Keys.spend_rank(), {project: float(cost)})

    async def swap_rebuild(
        self,
        project: str,
        last_seen_entry: str,
        replace: Sequence[str],
        drop: Sequence[str],
        bounds: tuple[int, int] = (0, 0),
    ) -> bool:
        """Swap the staging keys in; `bounds` become meta bound_c and bound_q (the lifetime
        cost and quantity of the rebuilt totals in LIMBs, rounded up)."""
        keys = [Keys.log(project), Keys.meta(project)]
        for live in replace:
            keys += [Keys.staging(project, live), live]
        keys += list(drop)
        args: list[str | int] = [last_seen_entry, len(replace), str(bounds[0]), str(bounds[1])]
        done = await self.conn.run_script(self._swap, keys, args)
        if not done:
            with contextlib.suppress(Exception):
                await self.client.delete(*[Keys.staging(project, k) for k in replace])
        return bool(done)
