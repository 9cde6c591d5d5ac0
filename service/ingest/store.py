"""The ingest script's Redis access: a priced batch applied in one step (ingest.lua).

Keep the per-batch work here as it is: one script call per batch, its arguments built once
(`_ingest_call`), on the ordered lane when the store is one server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, cast

import msgspec

from costcore import group_positions, take

from ..budgets.counters import BudgetCounter
from ..ratecards.store import CARD_REVISION_SECONDS, RateCardStore
from ..storage import scripts
from ..storage.connection import Connection, ConnectionLost, ServerError, StoreError
from ..storage.increments import increment_args
from ..storage.keys import SEEN_SHARDS as SEEN_SHARDS  # re-exported: ingest/service.py
from ..storage.keys import Keys
from ..storage.keys import seen_shard as seen_shard  # reckons each event's seen-id shard
from ..storage.lane import LaneNoScript
from ..storage.limbs import CAP_UNITS, bound_units
from ..storage.replies import as_text


@dataclass(frozen=True)
class IngestPlan:
    """A priced batch for one project, ready for the INGEST script."""

    project: str
    event_ids: Sequence[str]
    seen_shards: Sequence[int]
    expiry_days: Sequence[int]
    tier_checks: Sequence[tuple[str, str, int]]  # (month, sku, expected cumulative micro)
    increments: Sequence[tuple[str, str, int]]  # (live key, field, delta): others than tiers
    log_blob: bytes
    currency: str
    rate_card: str
    duplicates_seen: int
    log_min_id: str
    counters: Sequence[BudgetCounter] = ()
    budgets_rev: str = "0"
    # What the batch was priced with, when it came from a cache: the project's rate_card,
    # currency and attribution_tags (None: unset) and the rate card's revision (0: no check).
    expected_meta: Sequence[str | None] = ()
    rate_card_revision: int = 0
    # The batch's exact cost (nano) and quantity (micro): what it adds to the project's
    # lifetime bounds (meta bound_c/bound_q; service/storage/limbs.py).
    cost_nano: int = 0
    quantity_micro: int = 0
    # The graduated-tier counters' increments: (month, sku, delta micro), applied first.
    tier_increments: Sequence[tuple[str, str, int]] = ()


class IngestAnswer(IntEnum):
    """The first element of ingest.lua's answer: what became of the batch."""

    APPLIED = 0  # then the log entry's id
    DUPLICATES = 1  # then the (1-based) positions of the events already seen; nothing written
    TIER_MOVED = 2  # a tier counter moved since it was read: price again
    BUDGETS_CHANGED = 3  # then the budgets' revision: read them again
    SETTINGS_CHANGED = 4  # the project's settings or rate card moved since they were cached
    PAST_BOUNDS = 5  # then meta bound_c, bound_q: the batch would take the sums past them
    INCREMENT_FAILED = 6  # then the error; every write undone (raised, never returned)


@dataclass(frozen=True)
class IngestOutcome:
    status: IngestAnswer
    log_entry: str | None = None
    duplicate_positions: tuple[int, ...] = ()  # 0-based into event_ids
    budgets_rev: str = "0"  # with status 3: the current revision
    bounds: tuple[int, int] = (0, 0)


# Answers of ingest.lua a client must not have before the write reached its replicas.
_NEEDS_REPLICAS = (IngestAnswer.APPLIED, IngestAnswer.DUPLICATES)


def _ingest_outcome(reply: Any, order: Sequence[int]) -> IngestOutcome:
    status = IngestAnswer(int(reply[0]))
    if status == IngestAnswer.APPLIED:
        return IngestOutcome(status, log_entry=as_text(reply[1]))
    if status == IngestAnswer.DUPLICATES:
        return IngestOutcome(
            status, duplicate_positions=tuple(sorted(order[int(i) - 1] for i in reply[1:]))
        )
    if status == IngestAnswer.BUDGETS_CHANGED:
        return IngestOutcome(status, budgets_rev=as_text(reply[1]))
    if status == IngestAnswer.PAST_BOUNDS:
        return IngestOutcome(status, bounds=(int(reply[1]), int(reply[2])))
    if status == IngestAnswer.INCREMENT_FAILED:
        raise ServerError(f"the batch's increments could not be made (all undone): {reply[1]!r}")
    return IngestOutcome(status)


class IngestStore:
    """Batches in (the script), the event ids they marked (swept when expired), duplicates."""

    def __init__(self, conn: Connection, ratecards: RateCardStore) -> None:
        self.conn = conn
        self.client = conn.client
        self.ratecards = ratecards
        self._ingest = conn.client.register_script(scripts.INGEST)
        self._count_dups = conn.client.register_script(scripts.COUNT_DUPLICATES)
        # Whether the server has HSETEX with FNX (ingest.lua marks new ids with it): asked once,
        # by `learn_features`, before the first batch.
        self._hsetex: bool | None = None

    async def tier_cumulatives(self, project: str, slots: Sequence[tuple[str, str]]) -> list[int]:
        """Current cumulative quantity (micro) for each (month, sku)."""
        if not slots:
            return []
        # One HMGET per month (a batch's events are nearly always of one month), not a
        # pipeline: on a cluster, a pipeline to a dead master is retried with pauses for ~3 s
        # before it fails (a single command: ~0.2 s), and its retries reset the client.
        positions: dict[str, list[int]] = {}
        for i, (month, _sku) in enumerate(slots):
            positions.setdefault(month, []).append(i)
        months = list(positions)
        replies = await asyncio.gather(
            *(
                self.client.hmget(Keys.tier(project, m), [slots[i][1] for i in positions[m]])
                for m in months
            )
        )
        out = [0] * len(slots)
        for month, values in zip(months, replies, strict=True):
            for i, v in zip(positions[month], values, strict=True):
                out[i] = int(v) if v is not None else 0
        return out

    async def apply_batch(self, plan: IngestPlan) -> IngestOutcome:
        """Run the batch's script through the pool (on a cluster, with WAIT for replicas)."""
        cluster = self.conn.is_cluster
        # On a cluster the card lives in another slot: checked just before, not inside, the
        # script.
        # Read at most once a second per worker (CARD_REVISION_SECONDS): the card's master
        # is not asked by every batch of every project, and while it fails over the other
        # shards' projects go on.
        if (
            cluster
            and plan.rate_card_revision
            and await self.ratecards.rate_card_revision(plan.rate_card, CARD_REVISION_SECONDS)
            != plan.rate_card_revision
        ):
            return IngestOutcome(IngestAnswer.SETTINGS_CHANGED)
        keys, args, order = self._ingest_call(plan, card_in_script=not cluster)
        # An applied batch needs its replicas before it is acknowledged. So does a batch found
        # (partly) seen: its next step (the rest of the batch, or the
        # duplicate count) would wait for the same replicas again, and a shard without one
        # (right after a failover) would hold the request a second wait_timeout_ms.
        reply = await self.conn.replicated(
            self._ingest, keys, args, lambda r: int(r[0]) in _NEEDS_REPLICAS
        )
        return _ingest_outcome(reply, order)

    async def learn_features(self) -> None:
        """Ask the server, once, what ingest.lua may use (a probe, not a version number: forks
        and versions differ)."""
        if self._hsetex is not None:
            return
        probe = "tl:probe:hsetex"
        try:
            await self.client.eval(
                "return redis.call('HSETEX', KEYS[1], 'FNX', 'FIELDS', 1, 'f', '1')", 1, probe
            )
        except ServerError:
            self._hsetex = False
        else:
            self._hsetex = True
        finally:
            with contextlib.suppress(StoreError):
                await self.client.delete(probe)

    @property
    def ordered(self) -> bool:
        """Whether `submit_batch` sends at once, in call order (one server; not a cluster)."""
        return self.conn.lane is not None

    def submit_batch(self, plan: IngestPlan) -> Awaitable[IngestOutcome]:
        """One server: the batch's script goes out now, behind every batch submitted before
        it, so batches execute in submit order whenever their answers are awaited. A cluster:
        `apply_batch`, which sends when awaited."""
        if self.conn.lane is None:
            return self.apply_batch(plan)
        keys, args, order = self._ingest_call(plan, card_in_script=True)
        started = time.perf_counter()
        sent = self.conn.lane.submit_script(self._ingest, keys, args)
        return self._lane_answer(sent, keys, args, order, started)

    async def _lane_answer(
        self,
        sent: Awaitable[Any],
        keys: list[str],
        args: list[Any],
        order: list[int],
        started: float,
    ) -> IngestOutcome:
        try:
            reply = await sent
            if self.conn.on_lane_command is not None:
                self.conn.on_lane_command("EVALSHA", time.perf_counter() - started)
        except (LaneNoScript, ConnectionLost):
            # Not run (NOSCRIPT), or the lane's connection dropped, run or not: once more
            # through the pool, as redis-py retries a dropped command (a batch that did run
            # comes back as duplicates, IngestAnswer.DUPLICATES).
            reply = await self.conn.run_script(self._ingest, keys, args)
        return _ingest_outcome(reply, order)

    def _ingest_call(
        self, plan: IngestPlan, card_in_script: bool
    ) -> tuple[list[str], list[Any], list[int]]:
        """KEYS and ARGV of ingest.lua for the plan, and `order` (script event positions to
        the plan's)."""
        p = plan.project
        keys: list[str] = [
            Keys.meta(p),
            Keys.log(p),
            Keys.rejected(p),
            Keys.rejected_index(p),
        ]
        key_index: dict[str, int] = {}

        def ref(key: str) -> int:
            i = key_index.get(key)
            if i is None:
                keys.append(key)
                i = key_index[key] = len(keys)  # Lua KEYS are 1-based
            return i

        events, order = _seen_args(plan, ref)
        tiers: list[Any] = []
        for month, sku, expected in plan.tier_checks:
            tiers += (ref(Keys.tier(p, month)), sku, str(expected))
        card_key = 0
        if plan.rate_card_revision and card_in_script:
            card_key = ref(Keys.rate_card(plan.rate_card))
        counters, moved = _counter_args(plan, ref)
        increments, his = increment_args(ref, moved)
        payload = msgspec.msgpack.encode(
            [
                events,
                tiers,
                increments,
                plan.currency,
                plan.rate_card,
                str(plan.duplicates_seen),
                plan.log_min_id,
                counters,
                ref(Keys.alerts(p)),
                plan.budgets_rev,
                ["\0" if v is None else v for v in plan.expected_meta],
                card_key,
                plan.rate_card_revision,
                1 if self._hsetex else 0,
                his,
                _bounds_args(plan),
                ref(Keys.budget_hold(p)) if counters else 0,
            ]
        )
        return keys, [payload, plan.log_blob], order

    async def sweep_seen(self, project: str, today: int) -> int:
        """Forget event ids whose window has passed (expiry day < today). Returns how many.

        Safe against concurrent ingestion: an expired id can only belong to an event that
        would now be rejected as too old, and an id being added is never older than today.
        """
        removed = 0
        for shard in range(SEEN_SHARDS):
            key = Keys.seen(project, shard)
            cursor = 0
            while True:
                cursor, fields = await self.client.hscan(key, cursor, count=1000)
                entries = cast(dict[bytes, bytes], fields)
                expired = [f for f, v in entries.items() if int(v) < today]
                if expired:
                    removed += int(await self.client.hdel(key, *expired))
                if cursor == 0:
                    break
        return removed

    async def count_duplicates(self, project: str, count: int) -> None:
        if count:
            # Replicated before the duplicates are acknowledged: this write follows, on the
            # same master, any earlier write of these events whose answer was lost.
            await self.conn.replicated(self._count_dups, [Keys.meta(project)], [count])


def _seen_args(plan: IngestPlan, ref: Callable[[str], int]) -> tuple[list[Any], list[int]]:
    """The script's events, grouped by `seen` shard (one command per hash): per shard its key,
    its count, then (id, expiry day) of each; and `order`, the script's event positions back
    to the plan's."""
    ids = plan.event_ids
    if len(set(ids)) != len(ids):
        raise ValueError("an ingest plan holds an event id twice")
    if not len(ids) == len(plan.seen_shards) == len(plan.expiry_days):
        raise ValueError("an ingest plan's columns differ in length")
    positions, counts = group_positions(plan.seen_shards, SEEN_SHARDS)
    pairs: list[Any] = [None] * (2 * len(ids))  # id1, expiry day1, id2, ...
    pairs[0::2] = take(ids, positions)
    pairs[1::2] = take(plan.expiry_days, positions)
    events: list[Any] = []
    start = 0
    p = plan.project
    for shard, count in enumerate(counts):
        if count:
            events += (ref(Keys.seen(p, shard)), count)
            events += pairs[2 * start : 2 * (start + count)]
            start += count
    return events, positions.tolist()


def _counter_args(
    plan: IngestPlan, ref: Callable[[str], int]
) -> tuple[list[Any], list[tuple[str, str, int]]]:
    """The budget counters' arguments (key, high key, field, delta, limit checks), and every
    increment the batch makes: tiers first, then the plan's others, then the budgets'."""
    p = plan.project
    counters: list[Any] = []
    moved = [(Keys.tier(p, month), sku, delta) for month, sku, delta in plan.tier_increments]
    moved += plan.increments
    for counter in plan.counters:
        key = Keys.budget_daily(p) if counter.daily else Keys.budget_spend(p)
        checks = [
            [c.mode, str(c.limit), ref(Keys.budget_fired(p)), c.alert_id, c.alert_json.decode()]
            for c in counter.checks
        ]
        counters.append([ref(key), ref(Keys.high(key)), counter.field, str(counter.delta), checks])
        moved.append((key, counter.field, counter.delta))
    return counters, moved


def _bounds_args(plan: IngestPlan) -> list[str]:
    """What the batch adds to the project's lifetime bounds, and the room it needs in each."""
    cost_units = bound_units(plan.cost_nano)
    quantity_units = bound_units(plan.quantity_micro)
    return [
        str(cost_units),
        str(CAP_UNITS - cost_units),
        str(quantity_units),
        str(CAP_UNITS - quantity_units),
    ]
