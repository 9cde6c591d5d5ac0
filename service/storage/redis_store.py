"""The store: async access to trainledger's data (the feature stores move out of it)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from costcore import group_positions, take

from . import scripts
from .connection import (
    _CONNECTION_CLASSES,
    DEFAULT_WAIT_TIMEOUT_MS,
    NODE_DOWN_ERRORS,
    RedisClient,
    ReplicationTimeout,
    _Cluster,
    cluster_options,
    cluster_request_timeout_ms,
)
from .keys import SEEN_SHARDS, Keys
from .lane import LaneNoScript, OrderedLane
from .limbs import (
    CAP_UNITS,
    LIMB,
    MAX_LO_DELTA,
    bound_units,
    combined_fields,
    split_delta,
    split_value,
)


@dataclass(frozen=True)
class IngestPlan:
    """A priced batch for one project, ready for the INGEST script."""

    project: str
    event_ids: Sequence[str]
    seen_shards: Sequence[int]
    expiry_days: Sequence[int]
    tier_checks: Sequence[tuple[str, str, int]]  # (month, sku, expected cumulative micro)
    increments: Sequence[tuple[str, str, int]]  # (live key, field, delta)
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


@dataclass(frozen=True)
class LimitCheck:
    mode: str  # "c": crossed from below to at/above; "a": ends strictly above
    limit: int
    alert_id: str
    alert_json: bytes


@dataclass(frozen=True)
class BudgetCounter:
    """Add `delta` to a budget counter and check its limits, inside the ingest script."""

    daily: bool  # the per-day counter (growth) rather than the per-period one
    field: str
    delta: int
    checks: Sequence[LimitCheck]


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


def _increment_args(
    ref: Callable[[str], int], increments: Iterable[tuple[str, str, int]]
) -> tuple[list[Any], list[Any]]:
    """`apply_increments`'s (inc, his) for (key, field, delta) increments: grouped by key,
    each key with its high limbs' key (0: none), the deltas split by `split_delta`."""
    by_key: dict[str, list[Any]] = {}
    his: list[Any] = []
    for key, field, delta in increments:
        flat = by_key.get(key)
        if flat is None:
            flat = by_key[key] = []
        if 0 <= delta <= MAX_LO_DELTA:
            flat += (field, str(delta))
        elif not Keys.has_high(key):  # one limb (tier counters, event counts): whole
            if not -(2**63) <= delta < 2**63:
                raise ValueError(f"{key} {field}: {delta} leaves int64 and the key has no limbs")
            flat += (field, str(delta))
        else:
            low, high = split_delta(delta)
            flat += (field, str(low))
            his += (ref(Keys.high(key)), field, str(high))
    inc: list[Any] = []
    for key, flat in by_key.items():
        inc += (ref(key), ref(Keys.high(key)) if Keys.has_high(key) else 0, len(flat) // 2)
        inc += flat
    return inc, his


def _fold_args(
    fixed_keys: list[str], head: Any, events: int, increments: Iterable[tuple[str, str, int]]
) -> tuple[list[str], bytes]:
    """KEYS and ARGV[1] of fold_log.lua (`head`: [cursor, new cursor])."""
    keys = list(fixed_keys)
    key_index: dict[str, int] = {}

    def ref(key: str) -> int:
        i = key_index.get(key)
        if i is None:
            keys.append(key)
            i = key_index[key] = len(keys)
        return i

    inc, his = _increment_args(ref, increments)
    return keys, msgspec.msgpack.encode([*head, str(events), inc, his])


async def _encoded(
    fixed_keys: list[str], head: list[Any], events: int, increments: Sequence[tuple[str, str, int]]
) -> tuple[list[str], bytes]:
    if len(increments) > 20_000:  # encoding is CPU work: off the event loop when large
        return await asyncio.to_thread(_fold_args, fixed_keys, head, events, increments)
    return _fold_args(fixed_keys, head, events, increments)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


_Encodable = bytes | bytearray | memoryview | str | int | float


def _unscoped_admin(record: dict[str, str]) -> bool:
    return record.get("role") == "admin" and record.get("projects") == "*"


def _mapping(fields: dict[str, str]) -> Mapping[_Encodable, _Encodable]:
    return cast(Mapping[_Encodable, _Encodable], fields)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _with_high(low: list[Any], high: list[Any]) -> list[Any]:
    """HMGET replies of a key and of its high limbs, combined (service/storage/limbs.py)."""
    if not any(h is not None for h in high):
        return low
    return [
        lo if hi is None or lo is None else str(int(hi) * LIMB + int(lo)).encode()
        for lo, hi in zip(low, high, strict=True)
    ]


# Answers of ingest.lua a client must not have before the write reached its replicas.
_NEEDS_REPLICAS = (IngestAnswer.APPLIED, IngestAnswer.DUPLICATES)


def _ingest_outcome(reply: Any, order: Sequence[int]) -> IngestOutcome:
    status = IngestAnswer(int(reply[0]))
    if status == IngestAnswer.APPLIED:
        return IngestOutcome(status, log_entry=_text(reply[1]))
    if status == IngestAnswer.DUPLICATES:
        return IngestOutcome(
            status, duplicate_positions=tuple(sorted(order[int(i) - 1] for i in reply[1:]))
        )
    if status == IngestAnswer.BUDGETS_CHANGED:
        return IngestOutcome(status, budgets_rev=_text(reply[1]))
    if status == IngestAnswer.PAST_BOUNDS:
        return IngestOutcome(status, bounds=(int(reply[1]), int(reply[2])))
    if status == IngestAnswer.INCREMENT_FAILED:
        raise ResponseError(f"the batch's increments could not be made (all undone): {reply[1]!r}")
    return IngestOutcome(status)


class LastUnscopedAdmin(Exception):
    """Revoking this token would leave no admin token for every project."""


# How long a worker trusts a rate card's revision it read (`Store.rate_card_revision`).
CARD_REVISION_SECONDS = 1.0
# A fold reads the log in pages of about this many bytes (see `Store.unfolded_entries`).
_READ_PAGE_BYTES = 256 << 10


class Store:
    """Async access to trainledger's data in one Redis (or Valkey, or Redis Cluster)."""

    def __init__(
        self,
        client: RedisClient,
        wait_replicas: int | None = None,
        wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
    ) -> None:
        self.client = client
        # Cluster only: replicas an ingest write must reach before it is acknowledged
        # (None: decided on first use, one if the cluster has replicas).
        self._wait_replicas = wait_replicas
        self._wait_timeout_ms = wait_timeout_ms
        self._ingest = client.register_script(scripts.INGEST)
        self._count_dups = client.register_script(scripts.COUNT_DUPLICATES)
        self._put_card = client.register_script(scripts.PUT_RATE_CARD)
        self._swap = client.register_script(scripts.SWAP_REBUILD)
        self._fold_log = client.register_script(scripts.FOLD_LOG)
        self._read_unfolded = client.register_script(scripts.READ_UNFOLDED)
        self._totals_state = client.register_script(scripts.TOTALS_STATE)
        self._init_budget = client.register_script(scripts.INIT_BUDGET)
        self._append_progress = client.register_script(scripts.APPEND_PROGRESS)
        self._rate_window = client.register_script(scripts.RATE_WINDOW)
        self._revoke_token = client.register_script(scripts.REVOKE_TOKEN)
        self._dispatch_alert = client.register_script(scripts.DISPATCH_ALERT)
        self._claim_deliveries = client.register_script(scripts.CLAIM_DELIVERIES)
        self._settle_delivery = client.register_script(scripts.SETTLE_DELIVERY)
        self._redeliver = client.register_script(scripts.REDELIVER)
        self._replace_field = client.register_script(scripts.REPLACE_FIELD)
        # One server only: ingest scripts go out on one pipelined connection of their own, in
        # call order, so a project's batches execute in the order they were priced without
        # each waiting for the answer to the one before (`submit_batch`).
        self._lane = OrderedLane.for_client(client)
        # Told of every command sent on the lane and its round trip (commands through the
        # client are observed by wrapping it: service/metrics.py).
        self.on_lane_command: Callable[[str, float], None] | None = None
        # Whether the server has HSETEX with FNX (ingest.lua marks new ids with it): asked once,
        # by `learn_features`, before the first batch.
        self._hsetex: bool | None = None
        # Cluster only: the longest a request may wait for the store before it is answered 503
        # (seconds; service/http/deadline.py). None: no bound beyond the socket timeouts.
        self.request_timeout: float | None = None
        # (node name, script sha) of the scripts `_replicated` has run on a node.
        self._scripts_on: set[tuple[str, str]] = set()
        # Rate card name -> (read at, revision), for `rate_card_revision(max_age=...)`.
        self._card_revisions: dict[str, tuple[float, int]] = {}

    @classmethod
    def from_url(cls, url: str, max_connections: int = 64) -> Store:
        if url.startswith(("redis+cluster://", "rediss+cluster://")):
            real, wait_replicas, wait_timeout_ms = cluster_options(url)
            cluster = _Cluster.from_url(
                real,
                decode_responses=False,
                # Per node. redis-py's cluster client cannot wait for a free connection (it
                # raises MaxConnectionsError, answered 503), so the cap is set well above the
                # concurrent requests one worker serves rather than at the pool size below.
                max_connections=max(16 * max_connections, 1024),
                # As for one server below: never time out a script the server then applies.
                socket_timeout=120,
                socket_connect_timeout=5,
            )
            store = cls(cluster, wait_replicas, wait_timeout_ms)
            store.request_timeout = cluster_request_timeout_ms(url) / 1000
            return store
        # A blocking pool: under a burst, a request waits for a free connection (up to
        # `timeout` seconds) instead of failing with "too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=20,
            decode_responses=False,
            health_check_interval=10,
            # A large batch's script may run for seconds on a busy machine; a client timeout
            # would report an error for a batch the server then applies (its retry would come
            # back as duplicates, so nothing is counted twice, but the caller is misled).
            socket_timeout=120,
            socket_connect_timeout=5,
        )
        pool.connection_class = _CONNECTION_CLASSES.get(
            pool.connection_class, pool.connection_class
        )
        return cls(aioredis.Redis.from_pool(pool))  # the client owns (and closes) the pool

    async def close(self) -> None:
        if self._lane is not None:
            await self._lane.close()
        if isinstance(self.client, _Cluster):
            await self.client.close_all()
            return
        await self.client.aclose()

    async def ping(self) -> bool:
        if isinstance(self.client, RedisCluster):
            # One node, not all: while one shard fails over, the others still serve, and a
            # worker that answered "not ready" would be taken out of the load balancer.
            return bool(await self.client.ping(target_nodes=RedisCluster.DEFAULT_NODE))
        return bool(await self.client.ping())

    async def wait_replicas(self) -> int:
        """How many replicas an ingest write must reach before it is acknowledged: 0 on a
        single server; on a cluster, as configured, else 1 if the cluster has replicas."""
        if not isinstance(self.client, RedisCluster):
            return 0
        if self._wait_replicas is None:
            await self.client.initialize()
            self._wait_replicas = 1 if self.client.get_replicas() else 0
        return self._wait_replicas

    async def _replicated(
        self,
        script: AsyncScript,
        keys: Sequence[str],
        args: Sequence[Any],
        needs_replicas: Callable[[Any], bool] = lambda reply: True,
    ) -> Any:
        """Run a write script; on a cluster with `wait_replicas`, also WAIT for the replicas,
        and raise `ReplicationTimeout` (answered 503) when `needs_replicas(reply)` and too few
        got it. Replication is asynchronous: without this, a master that dies just after
        answering takes the acknowledged write with it, and its promoted replica never had it.

        WAIT covers the writes of its own connection, so the script and the WAIT go to the
        slot's master as one pipeline on one connection (`ClusterNode.execute_pipeline`).
        """
        want = await self.wait_replicas()
        if not want:
            return await script(keys=keys, args=args)
        cluster = cast(RedisCluster, self.client)
        await cluster.initialize()  # a no-op unless a failed command asked for a refresh
        ask: ClusterNode | None = None  # the slot is migrating: this node, after ASKING
        for _ in range(4):
            node = ask or cluster.get_node_from_key(keys[0])
            if node is None:
                raise SlotNotCoveredError(f"no master serves {keys[0]!r} now; not applied")
            # A node this worker has not run the script on (a replica just promoted: the
            # script cache is not replicated) gets it loaded first, in the same pipeline:
            # a NOSCRIPT answer would still cost a full WAIT (no write to wait for, but no
            # replica either right after a failover) before the retry.
            commands = []
            if (node.name, script.sha) not in self._scripts_on:
                commands.append(PipelineCommand(0, "SCRIPT", "LOAD", script.script))
            if ask:  # right before the command it allows
                commands.append(PipelineCommand(len(commands), "ASKING"))
            commands += [
                PipelineCommand(len(commands), "EVALSHA", script.sha, len(keys), *keys, *args),
                PipelineCommand(len(commands) + 1, "WAIT", want, self._wait_timeout_ms),
            ]
            ask = None
            await node.execute_pipeline(commands)
            reply, acked = commands[-2].result, commands[-1].result
            if isinstance(reply, NoScriptError):  # a restarted master: load it there
                self._scripts_on.discard((node.name, script.sha))
                continue
            if len(self._scripts_on) > 10_000:
                self._scripts_on.clear()
            self._scripts_on.add((node.name, script.sha))
            if isinstance(reply, MovedError):  # the slot moved for good: follow it
                await cluster.nodes_manager.move_slot(reply)
                continue
            if isinstance(reply, AskError):  # the slot is moving: ask its new node once
                ask = cluster.get_node(host=reply.host, port=reply.port)
                continue
            if isinstance(reply, TryAgainError):  # a multi-key script mid-migration
                await asyncio.sleep(0.05)
                continue
            if isinstance(reply, Exception):
                raise reply
            if isinstance(acked, Exception):
                raise acked
            if needs_replicas(reply) and int(acked) < want:
                raise ReplicationTimeout(
                    f"the write reached {int(acked)} of {want} replicas in "
                    f"{self._wait_timeout_ms} ms"
                )
            return reply
        raise TryAgainError("the slot's master kept changing; not applied, retry")

    # --- rate cards ---------------------------------------------------------------------

    async def _at_master(self, key: str, *command: Any) -> Any:
        """One command on one global key, sent once to the key's master as this worker
        knows it: no redis-py retries, each of which reads the slot map (and the command
        table) again while every other command of the worker waits. A redirection (the slot
        moved) is left to redis-py. Raises NODE_DOWN_ERRORS when the master is down."""
        cluster = cast(RedisCluster, self.client)
        await cluster.initialize()  # a no-op unless a failed command asked for a refresh
        node = cluster.get_node_from_key(key)
        if node is None:
            raise SlotNotCoveredError(f"no master serves {key!r} now")
        try:
            return await node.execute_command(*command)
        except (MovedError, AskError, TryAgainError):
            return await cluster.execute_command(*command)

    async def _read_global(self, command: str, key: str) -> Any:
        """A read of one global key (a token record, a rate card), which every request of
        every project may need: on a cluster, when the key's master is down or failing over,
        it is read from that slot's replica instead (READONLY), so the projects of the other
        shards do not depend on that one master. The replica is the node that takes over:
        it answers what the master will answer after the failover (a write the master had not
        passed on yet is lost with it either way)."""
        if not isinstance(self.client, RedisCluster):
            return await cast(Any, self.client).execute_command(command, key)
        try:
            return await self._at_master(key, command, key)
        except NODE_DOWN_ERRORS:
            holders = self.client.nodes_manager.slots_cache.get(self.client.keyslot(key)) or []
            for replica in holders[1:]:
                commands = [PipelineCommand(0, "READONLY"), PipelineCommand(1, command, key)]
                try:
                    await replica.execute_pipeline(commands)
                except NODE_DOWN_ERRORS:
                    continue
                reply = commands[1].result
                if not isinstance(reply, Exception):
                    if command == "HGETALL" and isinstance(reply, list):  # raw RESP2 pairs
                        return dict(zip(reply[::2], reply[1::2], strict=True))
                    return reply
            raise

    async def put_rate_card_version(self, name: str, version_json: bytes) -> int:
        version = await self._put_card(keys=[Keys.rate_card(name)], args=[version_json])
        self._card_revisions.pop(name, None)  # this worker applies it at once
        await self.client.sadd(Keys.rate_card_names(), name)
        return int(version)

    async def rate_card_versions(self, name: str) -> list[tuple[int, bytes]]:
        """Every stored version as (version number, JSON), oldest number first."""
        raw = await self._read_global("HGETALL", Keys.rate_card(name))
        return sorted((int(k), _bytes(v)) for k, v in raw.items())

    async def rate_card_revision(self, name: str, max_age: float = 0.0) -> int:
        """The number of versions (0: no such card); it changes with every new version.
        With `max_age`, a revision this worker read less than `max_age` seconds ago."""
        now = time.monotonic()
        if max_age > 0:
            hit = self._card_revisions.get(name)
            if hit is not None and now - hit[0] < max_age:
                return hit[1]
        revision = int(await self._read_global("HLEN", Keys.rate_card(name)))
        if len(self._card_revisions) > 1000:
            self._card_revisions.clear()
        self._card_revisions[name] = (now, revision)
        return revision

    async def rate_card_names(self) -> list[str]:
        names = await self.client.smembers(Keys.rate_card_names())
        return sorted(_text(n) for n in names)

    # --- projects -----------------------------------------------------------------------

    async def project_meta(self, project: str) -> dict[str, str]:
        raw = await self.client.hgetall(Keys.meta(project))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def set_project_fields(self, project: str, fields: dict[str, str]) -> None:
        await self.client.hset(Keys.meta(project), mapping=_mapping(fields))
        await self.client.sadd(Keys.projects(), project)

    async def add_project(self, project: str) -> None:
        await self.client.sadd(Keys.projects(), project)

    async def projects(self) -> list[str]:
        names = await self.client.smembers(Keys.projects())
        return sorted(_text(n) for n in names)

    # --- tokens -------------------------------------------------------------------------

    async def put_token(self, digest: str, token_id: str, record: dict[str, str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(Keys.token(digest), mapping=_mapping(record))
        pipe.hset(Keys.token_index(), token_id, digest)
        if _unscoped_admin(record):
            pipe.sadd(Keys.unscoped_admins(), token_id)
        await pipe.execute()

    async def token_record(self, digest: str) -> dict[str, str] | None:
        raw = await self._read_global("HGETALL", Keys.token(digest))
        return {_text(k): _text(v) for k, v in raw.items()} if raw else None

    async def token_records(self) -> list[dict[str, str]]:
        index = await self.client.hgetall(Keys.token_index())
        records = []
        for digest in index.values():
            record = await self.token_record(_text(digest))
            if record:
                records.append(record)
        return records

    async def revoke_token(self, token_id: str) -> bool:
        """Revoke a token (False: no such token). Raises `LastUnscopedAdmin` rather than revoke
        the last admin token for every project: nobody could manage tokens afterwards."""
        # The script counts only ids still in the index, so one revoked meanwhile does not count.
        digest = await self._revoke_token(
            keys=[Keys.token_index(), Keys.unscoped_admins()], args=[token_id]
        )
        if digest is None:
            return False
        if digest == 0:
            raise LastUnscopedAdmin(token_id)
        await self.client.delete(Keys.token(_text(digest)))
        return True

    async def count_request(self, token_id: str, second: int, count: int = 1) -> int:
        """Requests of this token so far in this (epoch) second, these `count` included.
        On a cluster, one try at the window's master (its node down: NODE_DOWN_ERRORS at
        once, and the rate limiter fails open; service/http/ratelimit.py)."""
        key = Keys.rate_window(token_id, second)
        if not isinstance(self.client, RedisCluster):
            return int(await self._rate_window(keys=[key], args=[count]))
        script = self._rate_window
        try:
            return int(await self._at_master(key, "EVALSHA", script.sha, 1, key, count))
        except NoScriptError:
            await self._at_master(key, "SCRIPT", "LOAD", script.script)
            return int(await self._at_master(key, "EVALSHA", script.sha, 1, key, count))

    async def token_count(self) -> int:
        return int(await self.client.hlen(Keys.token_index()))

    # --- ingest -------------------------------------------------------------------------

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
        cluster = isinstance(self.client, RedisCluster)
        # On a cluster the card lives in another slot: checked just before, not inside, the
        # script.
        # Read at most once a second per worker (CARD_REVISION_SECONDS): the card's master
        # is not asked by every batch of every project, and while it fails over the other
        # shards' projects go on.
        if (
            cluster
            and plan.rate_card_revision
            and await self.rate_card_revision(plan.rate_card, CARD_REVISION_SECONDS)
            != plan.rate_card_revision
        ):
            return IngestOutcome(IngestAnswer.SETTINGS_CHANGED)
        keys, args, order = self._ingest_call(plan, card_in_script=not cluster)
        # An applied batch needs its replicas before it is acknowledged. So does a batch found
        # (partly) seen: its next step (the rest of the batch, or the
        # duplicate count) would wait for the same replicas again, and a shard without one
        # (right after a failover) would hold the request a second wait_timeout_ms.
        reply = await self._replicated(self._ingest, keys, args, lambda r: int(r[0]) in _NEEDS_REPLICAS)
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
        except ResponseError:
            self._hsetex = False
        else:
            self._hsetex = True
        finally:
            with contextlib.suppress(RedisError):
                await self.client.delete(probe)

    @property
    def ordered(self) -> bool:
        """Whether `submit_batch` sends at once, in call order (one server; not a cluster)."""
        return self._lane is not None

    def submit_batch(self, plan: IngestPlan) -> Awaitable[IngestOutcome]:
        """One server: the batch's script goes out now, behind every batch submitted before
        it, so batches execute in submit order whenever their answers are awaited. A cluster:
        `apply_batch`, which sends when awaited."""
        if self._lane is None:
            return self.apply_batch(plan)
        keys, args, order = self._ingest_call(plan, card_in_script=True)
        started = time.perf_counter()
        sent = self._lane.submit_script(self._ingest, keys, args)
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
            if self.on_lane_command is not None:
                self.on_lane_command("EVALSHA", time.perf_counter() - started)
        except (LaneNoScript, RedisConnectionError):
            # Not run (NOSCRIPT), or the lane's connection dropped, run or not: once more
            # through the pool, as redis-py retries a dropped command (a batch that did run
            # comes back as duplicates, IngestAnswer.DUPLICATES).
            reply = await self._ingest(keys=keys, args=args)
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

        # Events grouped by `seen` shard, increments by key: the script issues one command
        # per hash. `order` maps the script's event positions back to the plan's.
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
        for shard, count in enumerate(counts):
            if count:
                events += (ref(Keys.seen(p, shard)), count)
                events += pairs[2 * start : 2 * (start + count)]
                start += count
        order = positions.tolist()
        tiers: list[Any] = []
        for month, sku, expected in plan.tier_checks:
            tiers += (ref(Keys.tier(p, month)), sku, str(expected))
        card_key = 0
        if plan.rate_card_revision and card_in_script:
            card_key = ref(Keys.rate_card(plan.rate_card))
        counters: list[Any] = []
        moved = list(plan.increments)
        for counter in plan.counters:
            key = Keys.budget_daily(p) if counter.daily else Keys.budget_spend(p)
            checks = [
                [c.mode, str(c.limit), ref(Keys.budget_fired(p)), c.alert_id, c.alert_json.decode()]
                for c in counter.checks
            ]
            counters.append(
                [ref(key), ref(Keys.high(key)), counter.field, str(counter.delta), checks]
            )
            moved.append((key, counter.field, counter.delta))
        increments, his = _increment_args(ref, moved)
        cost_units = bound_units(plan.cost_nano)
        quantity_units = bound_units(plan.quantity_micro)
        bounds = [
            str(cost_units),
            str(CAP_UNITS - cost_units),
            str(quantity_units),
            str(CAP_UNITS - quantity_units),
        ]
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
                bounds,
            ]
        )
        return keys, [payload, plan.log_blob], order

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
        cursor, last = await self._read_unfolded(keys=[Keys.meta(project), log_key])
        cursor, last = _text(cursor), _text(last)
        entries: list[tuple[str, bytes]] = []
        size, page, after = 0, 16, cursor
        while cursor and len(entries) < limit and size < max_bytes:
            want = min(page, limit - len(entries))
            raw = await self.client.xrange(log_key, min="(" + after, max="+", count=want)
            for entry_id, fields in raw or []:
                if len(entries) >= limit or size >= max_bytes:
                    break
                blob = _bytes((fields or {})[b"b"])
                entries.append((_text(entry_id), blob))
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
        increments: Sequence[tuple[str, str, int]],
    ) -> bool:
        """Apply the summed increments of the log entries after `cursor` up to `new_cursor`
        and move the cursor there. False (nothing written) when another fold moved it first."""
        keys, payload = await _encoded(
            [Keys.meta(project)], [cursor, new_cursor], events, increments
        )
        return bool(await self._fold_log(keys=keys, args=[payload]))

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
            await self._replicated(self._count_dups, [Keys.meta(project)], [count])

    # --- budgets and alerts ------------------------------------------------------------

    async def put_budget(self, project: str, budget_id: str, budget_json: bytes) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(Keys.budgets(project), budget_id, budget_json)
        pipe.hincrby(Keys.meta(project), "budgets_rev", 1)
        await pipe.execute()
        await self.add_project(project)

    async def delete_budget(self, project: str, budget_id: str) -> bool:
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(Keys.budgets(project), budget_id)
        pipe.hincrby(Keys.meta(project), "budgets_rev", 1)
        removed, _ = await pipe.execute()
        return bool(removed)

    async def budgets(self, project: str) -> list[bytes]:
        raw = await self.client.hgetall(Keys.budgets(project))
        return [_bytes(v) for _, v in sorted(raw.items())]

    async def budget_counters(
        self, project: str, spend_fields: Sequence[str], day_fields: Sequence[str]
    ) -> tuple[list[int], list[int]]:
        pipe = self.client.pipeline(transaction=False)
        for key, fields in (
            (Keys.budget_spend(project), spend_fields),
            (Keys.budget_daily(project), day_fields),
        ):
            if fields:
                pipe.hmget(key, list(fields))
                pipe.hmget(Keys.high(key), list(fields))
        replies = await pipe.execute()
        out: list[list[int]] = []
        for fields in (spend_fields, day_fields):
            if fields:
                low, high = replies.pop(0), replies.pop(0)
                out.append([int(v or 0) for v in _with_high(low, high)])
            else:
                out.append([])
        return out[0], out[1]

    async def fired_alerts(self, project: str) -> dict[str, int]:
        raw = await self.client.hgetall(Keys.budget_fired(project))
        return {_text(k): int(v) for k, v in raw.items()}

    async def init_budget_counters(
        self,
        project: str,
        last_seen_entry: str,
        spend: dict[str, int],
        days: dict[str, int],
        checks: Sequence[tuple[str, int, str, bytes]],
    ) -> bool:
        def triples(values: dict[str, int]) -> list[str]:
            return [x for f, v in values.items() for x in (f, *map(str, split_value(v)))]

        payload = msgspec.msgpack.encode(
            [
                triples(spend),
                triples(days),
                [
                    [str(spend.get(f, 0)), str(limit), alert_id, body.decode()]
                    for f, limit, alert_id, body in checks
                ],
            ]
        )
        keys = [
            Keys.log(project),
            Keys.budget_spend(project),
            Keys.budget_daily(project),
            Keys.budget_fired(project),
            Keys.alerts(project),
            Keys.high(Keys.budget_spend(project)),
            Keys.high(Keys.budget_daily(project)),
        ]
        return bool(await self._init_budget(keys=keys, args=[last_seen_entry, payload]))

    async def alerts(
        self, project: str, start: str = "-", end: str = "+", count: int = 100
    ) -> list[tuple[str, dict[str, bytes]]]:
        raw = await self.client.xrange(Keys.alerts(project), min=start, max=end, count=count)
        return [
            (_text(entry_id), {_text(k): _bytes(v) for k, v in (fields or {}).items()})
            for entry_id, fields in raw or []
        ]

    # --- plans -------------------------------------------------------------------------

    async def put_plan(self, project: str, plan_id: str, plan_json: bytes) -> None:
        await self.client.hset(Keys.plans(project), plan_id, plan_json)
        await self.add_project(project)

    async def plan(self, project: str, plan_id: str) -> bytes | None:
        raw = await self.client.hget(Keys.plans(project), plan_id)
        return _bytes(raw) if raw is not None else None

    async def plans(self, project: str) -> list[bytes]:
        raw = await self.client.hgetall(Keys.plans(project))
        return [_bytes(v) for _, v in sorted(raw.items())]

    async def put_progress(self, project: str, fields: dict[str, bytes]) -> None:
        await self.client.hset(Keys.progress(project), mapping=cast(Any, fields))

    async def progress(self, project: str, plan_id: str) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.progress(project))
        prefix = plan_id + "|"
        return {_text(k): _bytes(v) for k, v in raw.items() if _text(k).startswith(prefix)}

    # --- experiment progress ----------------------------------------------------------

    async def add_experiment_progress(
        self, project: str, experiment: str, point_json: bytes, keep: int = 500
    ) -> None:
        """Append a progress point to the experiment's list, keeping the newest `keep`."""
        await self._append_progress(
            keys=[Keys.experiment_progress(project)], args=[experiment, point_json, keep]
        )
        await self.add_project(project)

    async def experiment_progress(self, project: str) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.experiment_progress(project))
        return {_text(k): _bytes(v) for k, v in raw.items()}

    # --- dead letters -------------------------------------------------------------------
    # put_rejected.lua stores them and trims the oldest.

    async def put_rejected(
        self, project: str, records: Sequence[tuple[str, bytes, int]], limit: int = 10_000
    ) -> int:
        """Store rejected events: (event id, JSON record, rejection time in ms), keeping at most
        `limit` of the project's (the oldest dropped). Returns how many were dropped, the
        records beyond the limit in `records` itself included (the newest are the last)."""
        if not records:
            return 0
        limit = max(limit, 1)
        dropped = max(len(records) - limit, 0)
        kept = records[dropped:]
        script = self.client.register_script(scripts.PUT_REJECTED)
        keys = [Keys.rejected(project), Keys.rejected_index(project)]
        for start in range(0, len(kept), 500):
            args: list[str | bytes | int] = [limit]
            for event_id, record, when_ms in kept[start : start + 500]:
                args += [event_id, record, when_ms]
            dropped += int(await script(keys=keys, args=args))
        await self.add_project(project)
        return dropped

    async def rejected_page(self, project: str, offset: int, limit: int) -> tuple[list[bytes], int]:
        total = int(await self.client.zcard(Keys.rejected_index(project)))
        ids = await self.client.zrange(Keys.rejected_index(project), offset, offset + limit - 1)
        if not ids:
            return [], total
        records = await self.client.hmget(Keys.rejected(project), [_bytes(i) for i in ids])
        return [_bytes(r) for r in records if r is not None], total

    async def rejected_listing(
        self, project: str, offset: int, limit: int, after: tuple[int, str] | None = None
    ) -> tuple[list[bytes], int, int, tuple[int, str] | None]:
        """A page of dead letters, oldest first: from `offset`, or just after the entry
        `after` (rejection time in ms, id), which holds its place when older ones are dropped
        meanwhile (gone itself, the page starts where it was). Returns (records, total, the
        page's position, the (time, id) cursor of its last entry)."""
        index = Keys.rejected_index(project)
        if after is not None:
            when_ms, event_id = after
            older = int(await self.client.zcount(index, "-inf", f"({when_ms}"))
            same = [_text(i) for i in await self.client.zrangebyscore(index, when_ms, when_ms)]
            offset = older + bisect.bisect_right(same, event_id)
        total = int(await self.client.zcard(index))
        entries = cast(
            list[tuple[Any, float]],
            await self.client.zrange(index, offset, offset + limit - 1, withscores=True),
        )
        if not entries:
            return [], total, offset, None
        ids = [_bytes(i) for i, _ in entries]
        records = await self.client.hmget(Keys.rejected(project), ids)
        last = entries[-1]
        cursor = (int(last[1]), _text(last[0]))
        return [_bytes(r) for r in records if r is not None], total, offset, cursor

    async def rejected_records(self, project: str, ids: Sequence[str]) -> list[bytes | None]:
        if not ids:
            return []
        return cast(
            list[bytes | None],
            await self.client.hmget(Keys.rejected(project), list(ids)),
        )

    async def delete_rejected(self, project: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(Keys.rejected(project), *ids)
        pipe.zrem(Keys.rejected_index(project), *ids)
        removed, _ = await pipe.execute()
        return int(removed)

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
        return {_text(k): int(v) for k, v in raw.items()}

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
        covered, accepted, pending, flat, high = await self._totals_state(
            keys=[Keys.rollup_count(project), Keys.meta(project), daily_key, Keys.high(daily_key)],
            args=[rollup_field],
        )
        daily = {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        for i in range(0, len(high), 2):
            day = _text(high[i])
            if day in daily:
                daily[day] += int(high[i + 1]) * LIMB
        return daily, int(accepted) - int(pending), int(covered)

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
        pipe = self.client.pipeline(transaction=False)
        match = f"[{kinds}]|*"
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
        return [_with_high(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]

    # --- log and rebuild ----------------------------------------------------------------

    async def log_entries(
        self, project: str, after: str = "-", count: int = 500
    ) -> list[tuple[str, bytes]]:
        start = after if after == "-" else "(" + after
        raw = await self.client.xrange(Keys.log(project), min=start, max="+", count=count)
        return [(_text(entry_id), _bytes((fields or {})[b"b"])) for entry_id, fields in raw or []]

    async def last_log_entry(self, project: str) -> str:
        raw = await self.client.xrevrange(Keys.log(project), max="+", min="-", count=1)
        return _text(raw[0][0]) if raw else ""

    async def first_log_entry(self, project: str) -> str:
        raw = await self.client.xrange(Keys.log(project), min="-", max="+", count=1)
        return _text(raw[0][0]) if raw else ""

    async def write_staging(self, project: str, hashes: dict[str, dict[str, int]]) -> None:
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
        """Every live key a rebuild replaces: per-day totals, the daily index, tier counters,
        budget counters."""
        days = await self.daily_costs(project)
        months = sorted({d[:6] for d in days})
        return (
            [Keys.totals(project, d) for d in sorted(days)]
            + [Keys.hourly(project, d) for d in sorted(days)]
            + [Keys.tier(project, m) for m in months]
            + [Keys.daily(project), Keys.budget_spend(project), Keys.budget_daily(project)]
        )

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
        done = await self._swap(keys=keys, args=args)
        if not done:
            with contextlib.suppress(Exception):
                await self.client.delete(*[Keys.staging(project, k) for k in replace])
        return bool(done)

    # --- webhooks and deliveries --------------------------------------------------------

    async def put_webhook(self, webhook_id: str, webhook_json: bytes) -> None:
        await self.client.hset(Keys.webhooks(), webhook_id, webhook_json)

    async def webhooks(self) -> dict[str, bytes]:
        raw = await self.client.hgetall(Keys.webhooks())
        return {_text(k): _bytes(v) for k, v in sorted(raw.items())}

    async def delete_webhook(self, webhook_id: str) -> bool:
        return bool(await self.client.hdel(Keys.webhooks(), webhook_id))

    async def replace_webhook(self, webhook_id: str, old: bytes, new: bytes) -> bool:
        """Store `new` for the webhook if it is still stored as `old` (re-sealing)."""
        return bool(await self._replace_field(keys=[Keys.webhooks()], args=[webhook_id, old, new]))

    async def sealing_check(self, candidate: str) -> bytes:
        """The stored check value of the secret key, storing `candidate` if there is none."""
        await self.client.hsetnx(Keys.sealing(), "check", candidate)
        return _bytes(await self.client.hget(Keys.sealing(), "check"))

    async def replace_sealing_check(self, old: bytes, new: str) -> bool:
        return bool(await self._replace_field(keys=[Keys.sealing()], args=["check", old, new]))

    async def alerts_to_dispatch(
        self, project: str, group: str, consumer: str, count: int, min_idle_ms: int
    ) -> list[tuple[str, dict[str, bytes] | None]]:
        """Alerts for the delivery dispatcher: first those another consumer read and left
        unacknowledged for `min_idle_ms` (it died), then new ones. Creates the consumer group
        (from the stream's start) the first time. Fields are None for an entry deleted while
        pending."""
        key = Keys.alerts(project)
        try:
            claimed = await self.client.xautoclaim(
                key, group, consumer, min_idle_ms, "0-0", count=count
            )
        except aioredis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            with contextlib.suppress(aioredis.ResponseError):  # BUSYGROUP: another worker made it
                await self.client.xgroup_create(key, group, id="0", mkstream=True)
            claimed = [b"0-0", [], []]
        entries: list[tuple[str, dict[str, bytes] | None]] = [
            (_text(entry_id), {_text(k): _bytes(v) for k, v in fields.items()} if fields else None)
            for entry_id, fields in (claimed[1] or [])
        ]
        entries += [
            (_text(entry_id), None) for entry_id in (claimed[2] if len(claimed) > 2 else [])
        ]
        raw: Any = await self.client.xreadgroup(group, consumer, {key: ">"}, count=count)
        streams: Any = raw.items() if isinstance(raw, dict) else (raw or [])
        for _, items in streams:
            for entry_id, fields in items or []:
                entries.append(
                    (
                        _text(entry_id),
                        {_text(k): _bytes(v) for k, v in fields.items()} if fields else None,
                    )
                )
        return entries

    async def dispatch_alert(
        self,
        project: str,
        group: str,
        entry_id: str,
        due_ms: int,
        deliveries: Sequence[tuple[str, bytes]],
    ) -> int:
        """Create the alert's deliveries (those not yet there) and acknowledge the entry."""
        args: list[Any] = [group, entry_id, due_ms]
        for delivery_id, record in deliveries:
            args += [delivery_id, record]
        keys = [Keys.alerts(project), Keys.deliveries(project), Keys.delivery_queue(project)]
        return int(await self._dispatch_alert(keys=keys, args=args))

    async def claim_deliveries(
        self, project: str, now_ms: int, lease_until_ms: int, count: int
    ) -> list[tuple[str, bytes]]:
        """Lease up to `count` due deliveries until `lease_until_ms` (the lease's token)."""
        keys = [Keys.delivery_queue(project), Keys.deliveries(project)]
        reply = await self._claim_deliveries(keys=keys, args=[now_ms, lease_until_ms, count])
        return [(_text(reply[i]), _bytes(reply[i + 1])) for i in range(0, len(reply), 2)]

    async def settle_delivery(
        self,
        project: str,
        delivery_id: str,
        token: int,
        claimed: bytes,
        record: bytes,
        outcome: str,
        score_ms: int,
    ) -> bool:
        """Store an attempt's outcome ('retry', 'delivered' or 'failed'); False when the lease
        was lost (another sender took the delivery, or it changed) and nothing was written."""
        keys = [
            Keys.delivery_queue(project),
            Keys.deliveries(project),
            Keys.delivery_done(project),
            Keys.delivery_dead(project),
        ]
        args: list[Any] = [delivery_id, token, claimed, record, outcome, score_ms]
        return bool(await self._settle_delivery(keys=keys, args=args))

    async def delivery_records(self, project: str, ids: Sequence[str]) -> list[bytes | None]:
        if not ids:
            return []
        raw = await self.client.hmget(Keys.deliveries(project), list(ids))
        return [_bytes(r) if r is not None else None for r in raw]

    async def delivery_page(
        self, project: str, statuses: Sequence[str], offset: int, limit: int
    ) -> tuple[list[bytes], int]:
        """Deliveries by status ('pending' by next attempt, 'failed' by failure time,
        'delivered' by delivery time), the statuses in the order given; and their total."""
        index = {
            "pending": Keys.delivery_queue(project),
            "failed": Keys.delivery_dead(project),
            "delivered": Keys.delivery_done(project),
        }
        pipe = self.client.pipeline(transaction=False)
        for status in statuses:
            pipe.zcard(index[status])
        sizes = [int(n) for n in await pipe.execute()]
        ids: list[str] = []
        start = offset
        for status, size in zip(statuses, sizes, strict=True):
            if start >= size:
                start -= size
                continue
            want = limit - len(ids)
            if want <= 0:
                break
            page = await self.client.zrange(index[status], start, start + want - 1)
            ids += [_text(i) for i in page]
            start = 0
        records = await self.delivery_records(project, ids)
        return [r for r in records if r is not None], sum(sizes)

    async def failed_delivery_ids(self, project: str, limit: int) -> list[str]:
        return [
            _text(i) for i in await self.client.zrange(Keys.delivery_dead(project), 0, limit - 1)
        ]

    async def redeliver(
        self, project: str, due_ms: int, items: Sequence[tuple[str, bytes, bytes]]
    ) -> list[str]:
        """Move dead letters back to the queue: (id, record as read, new record); the ids moved."""
        if not items:
            return []
        args: list[Any] = [due_ms]
        for delivery_id, old, new in items:
            args += [delivery_id, old, new]
        keys = [
            Keys.delivery_queue(project),
            Keys.deliveries(project),
            Keys.delivery_dead(project),
        ]
        return [_text(i) for i in await self._redeliver(keys=keys, args=args)]


