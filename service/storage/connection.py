"""The connection to Redis (one server, or a Redis Cluster) and the errors it raises.

Nothing outside `service/storage/` imports `redis`: the feature stores and the code above
them catch the names defined here (`StoreError`, `STORE_UNAVAILABLE`, `NODE_DOWN_ERRORS`,
`ReplicationTimeout`, `ServerError`, `ScriptNotLoaded`, `ConnectionLost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Sequence
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .lane import OrderedLane

RedisClient = aioredis.Redis | RedisCluster

# Any error of the store (the server answered an error, or could not be reached).
StoreError = RedisError
# The ones the feature stores tell apart, under the storage package's names (no module above
# `service/storage/` imports redis): the server answered an error (a script's, a command's);
# a script the server does not hold (EVALSHA before SCRIPT LOAD); the connection dropped.
ServerError = ResponseError
ScriptNotLoaded = NoScriptError
ConnectionLost = RedisConnectionError


class ReplicationTimeout(RedisTimeoutError):
    """A write reached its master, but not the replicas it must reach before it is
    acknowledged, in time. It is not acknowledged: the client retries, and the retry finds
    the events already seen (or, if the master has died meanwhile, applies them again)."""


# Query parameters of a `redis+cluster://` URL that trainledger reads itself.
CLUSTER_WAIT_REPLICAS = "wait_replicas"  # replicas a write must reach before its answer
CLUSTER_WAIT_TIMEOUT_MS = "wait_timeout_ms"  # how long to wait for them
DEFAULT_WAIT_TIMEOUT_MS = 2000
# The longest a request may wait for the store before it is answered 503
# (service/http/deadline.py); default: wait_timeout_ms + 3,000.
CLUSTER_REQUEST_TIMEOUT_MS = "request_timeout_ms"


# Storage errors of a node that is down or failing over: a read of a global key (a token,
# a rate card's revision) is then asked of the slot's replica (`Connection.read_global`).
NODE_DOWN_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, SlotNotCoveredError)


def cluster_request_timeout_ms(url: str) -> int:
    """`request_timeout_ms` of a `redis+cluster://` URL (default: wait_timeout_ms + 3,000):
    the longest a request may wait for the store before it is answered 503."""
    _, _, wait_timeout_ms = cluster_options(url)
    query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    try:
        timeout_ms = int(query.get(CLUSTER_REQUEST_TIMEOUT_MS, wait_timeout_ms + 3000))
    except ValueError as exc:
        raise ValueError(f"{CLUSTER_REQUEST_TIMEOUT_MS}: an integer") from exc
    if timeout_ms <= wait_timeout_ms:
        raise ValueError(f"{CLUSTER_REQUEST_TIMEOUT_MS} > {CLUSTER_WAIT_TIMEOUT_MS}")
    return timeout_ms


class _Cluster(RedisCluster):
    """redis-py's cluster client, except for how it resets itself after an error, and that
    it learns the slot map before its first command is routed.

    After a failed pipeline, a CLUSTERDOWN answer or repeated MOVED answers, redis-py calls
    `aclose()`, which disconnects every connection to every node, *including those other
    requests are reading from at that moment*: they then fail with `RuntimeError` ("the
    handler is closed") or `AttributeError` (a writer that is None) instead of a storage
    error. Here that reset only asks for a fresh slot map and marks every connection to be
    recycled by whoever takes it next (`disconnect_if_needed`, on a connection that task
    alone holds). Not `disconnect_free_connections`: it closes idle connections *while they
    stay in the free queue*, so a request that takes one meanwhile writes on a closing socket
    (`'NoneType' object has no attribute 'writelines'`). `close_all` closes for good.

    redis-py 8.1 picks a command's route before its lazy `initialize()`: a keyed command
    sent before the client knows any node goes to a random master. The first concurrent
    commands of a fresh worker then drew MOVED answers, whose count (`reinitialize_steps`)
    reset the client under the others (redis/redis-py#3935); `execute_command` initializes
    first.
    """

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize and self.get_default_node() is None:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)

    async def aclose(self) -> None:
        self._initialize = True  # the next command reads the slot map again
        for node in list(self.nodes_manager.nodes_cache.values()):
            recycle_connections(node)

    async def close_all(self) -> None:
        self._initialize = False  # whatever state it is in: redis-py's aclose closes all
        await super().aclose()


def recycle_connections(node: ClusterNode) -> None:
    """Mark every connection to `node`, busy or idle, to be reconnected by the next task that
    takes it (redis-py's `disconnect_if_needed`): nothing closes a socket another task holds."""
    node.update_active_connections_for_reconnect()
    for connection in list(node._free):
        cast(Any, connection).mark_for_reconnect()


def cluster_options(url: str) -> tuple[str, int | None, int]:
    """Split a `redis+cluster://` (or `rediss+cluster://`) URL into the URL redis-py reads,
    `wait_replicas` (None: one if the cluster has replicas, else none) and the timeout."""
    parts = urlsplit(url.replace("+cluster", "", 1))
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {
        k: v
        for k, v in query
        if k in (CLUSTER_WAIT_REPLICAS, CLUSTER_WAIT_TIMEOUT_MS, CLUSTER_REQUEST_TIMEOUT_MS)
    }
    rest = [(k, v) for k, v in query if k not in own]
    try:
        replicas = int(own[CLUSTER_WAIT_REPLICAS]) if CLUSTER_WAIT_REPLICAS in own else None
        timeout_ms = int(own.get(CLUSTER_WAIT_TIMEOUT_MS, DEFAULT_WAIT_TIMEOUT_MS))
    except ValueError as exc:
        raise ValueError(f"{CLUSTER_WAIT_REPLICAS}, {CLUSTER_WAIT_TIMEOUT_MS}: integers") from exc
    if (replicas is not None and replicas < 0) or timeout_ms <= 0:
        raise ValueError(f"{CLUSTER_WAIT_REPLICAS} >= 0 and {CLUSTER_WAIT_TIMEOUT_MS} > 0")
    return urlunsplit(parts._replace(query=urlencode(rest))), replicas, timeout_ms


# An ingest script's arguments are ~0.7 MB for a 5,000-event batch. With the default socket
# send buffer (~200 kB) the event loop writes them in several turns, each waiting until the
# loop is free again (pricing the next batch holds it for milliseconds), so the server sits
# idle between the pieces: measured, ingest over HTTP went 103 k -> 124 k events/s with a
# 4 MB buffer. The kernel caps the request at net.core.wmem_max (silently).
SEND_BUFFER_BYTES = 4 << 20


class _LargeSendBuffer:
    """Mixin for redis-py's asyncio connections: a large socket send buffer."""

    async def _connect(self) -> None:
        await super()._connect()  # type: ignore[misc]
        sock = self._writer.transport.get_extra_info("socket")  # type: ignore[attr-defined]
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


class _TcpConnection(_LargeSendBuffer, aioredis.Connection):
    pass


class _UnixConnection(_LargeSendBuffer, aioredis.UnixDomainSocketConnection):
    pass


class _SslConnection(_LargeSendBuffer, aioredis.SSLConnection):
    pass


_CONNECTION_CLASSES: dict[type[Any], type[Any]] = {
    aioredis.Connection: _TcpConnection,
    aioredis.UnixDomainSocketConnection: _UnixConnection,
    aioredis.SSLConnection: _SslConnection,
}


# The errors answered 503 (storage unavailable, retry: service/http/problems.py): the
# server cannot be reached, or a cluster shard is failing over, so the outcome is unknown.
STORE_UNAVAILABLE: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
)


class Connection:
    """The one connection (a pool, or a cluster client) every feature store shares, and what
    they need of it beyond plain commands: replicated writes on a cluster (`replicated`), one
    try at a global key's master (`at_master`), a global key read from its replica while its
    master is down (`read_global`), and the ordered lane of ingest scripts."""

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
        # One server only: ingest scripts go out on one pipelined connection of their own, in
        # call order, so a project's batches execute in the order they were priced without
        # each waiting for the answer to the one before (`IngestStore.submit_batch`).
        self.lane = OrderedLane.for_client(client)
        # Told of every command sent on the lane and its round trip (commands through the
        # client are observed by wrapping it: service/metrics.py).
        self.on_lane_command: Callable[[str, float], None] | None = None
        # Cluster only: the longest a request may wait for the store before it is answered 503
        # (seconds; service/http/deadline.py). None: no bound beyond the socket timeouts.
        self.request_timeout: float | None = None
        # Cluster only: (node name, script sha) of the scripts run on a node (`run_script`,
        # `replicated`); a node not in it gets the script loaded before it runs there.
        self._scripts_on: set[tuple[str, str]] = set()

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    @classmethod
    def from_url(cls, url: str, max_connections: int = 64) -> Connection:
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
            conn = cls(cluster, wait_replicas, wait_timeout_ms)
            conn.request_timeout = cluster_request_timeout_ms(url) / 1000
            return conn
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
        if self.lane is not None:
            await self.lane.close()
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

    async def run_script(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run a registered script: every store runs its scripts through here, never by calling
        the script itself. On one server, redis-py's EVALSHA (NOSCRIPT: SCRIPT LOAD, again).
        On a cluster, at the master of `keys[0]`'s slot, loading the script there first in the
        same round trip when this worker has not run it on that node (`_on_key_node`); a node
        down raises NODE_DOWN_ERRORS (answered 503) and the next call reads the slot map again.
        """
        if not isinstance(self.client, RedisCluster):
            return await script(keys=keys, args=args)
        reply, _ = await self._on_key_node(script, keys, args, wait=0)
        return reply

    async def replicated(
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
            return await self.run_script(script, keys, args)
        reply, acked = await self._on_key_node(script, keys, args, wait=want)
        if needs_replicas(reply) and int(acked) < want:
            raise ReplicationTimeout(
                f"the write reached {int(acked)} of {want} replicas in {self._wait_timeout_ms} ms"
            )
        return reply

    async def _on_key_node(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any], wait: int
    ) -> tuple[Any, Any]:
        """EVALSHA at the master of `keys[0]`'s slot, as one pipeline on one connection, and
        with `wait`, WAIT for that many replicas after it: (the script's reply, WAIT's reply or
        None). MOVED, ASK, TRYAGAIN and NOSCRIPT are dealt with here, not by redis-py, whose
        own handling resets the client under every other request (`_Cluster`)."""
        cluster = cast(RedisCluster, self.client)
        await cluster.initialize()  # a no-op unless a failed command asked for a refresh
        ask: ClusterNode | None = None  # the slot is migrating: this node, after ASKING
        for _ in range(4):
            node = ask or cluster.get_node_from_key(keys[0])
            if node is None:
                raise SlotNotCoveredError(f"no master serves {keys[0]!r} now; not applied")
            # A node this worker has not run the script on (a replica just promoted: the
            # script cache is not replicated) gets it loaded first, in the same pipeline:
            # a NOSCRIPT answer would cost a round trip (with WAIT, a full WAIT: no write to
            # wait for, but no replica either right after a failover) before the retry.
            commands = []
            if (node.name, script.sha) not in self._scripts_on:
                commands.append(PipelineCommand(0, "SCRIPT", "LOAD", script.script))
            if ask:  # right before the command it allows
                commands.append(PipelineCommand(len(commands), "ASKING"))
            commands.append(
                PipelineCommand(len(commands), "EVALSHA", script.sha, len(keys), *keys, *args)
            )
            if wait:
                commands.append(PipelineCommand(len(commands), "WAIT", wait, self._wait_timeout_ms))
            ask = None
            try:
                await node.execute_pipeline(commands)
            except NODE_DOWN_ERRORS:
                # Run or not, unknown: not retried. As redis-py does after a connection error:
                # the next call reads the slot map again (asking that node last), and the
                # node's connections are recycled.
                recycle_connections(node)
                cluster.nodes_manager.move_node_to_end_of_cached_nodes(node.name)
                cluster._initialize = True
                raise
            reply = commands[-2 if wait else -1].result
            acked = commands[-1].result if wait else None
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
            return reply, acked
        raise TryAgainError("the slot's master kept changing; not applied, retry")

    async def at_master(self, key: str, *command: Any) -> Any:
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

    async def read_global(self, command: str, key: str) -> Any:
        """A read of one global key (a token record, a rate card), which every request of
        every project may need: on a cluster, when the key's master is down or failing over,
        it is read from that slot's replica instead (READONLY), so the projects of the other
        shards do not depend on that one master. The replica is the node that takes over:
        it answers what the master will answer after the failover (a write the master had not
        passed on yet is lost with it either way)."""
        if not isinstance(self.client, RedisCluster):
            return await cast(Any, self.client).execute_command(command, key)
        try:
            return await self.at_master(key, command, key)
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
