"""The connection to Redis (one server, or a Redis Cluster) and the errors it raises.

Nothing above `service/storage/` and the feature stores imports `redis`: they catch the
names defined here (`StoreError`, `STORE_UNAVAILABLE`, `NODE_DOWN_ERRORS`,
`ReplicationTimeout`).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

RedisClient = aioredis.Redis | RedisCluster

# Any error of the store (the server answered an error, or could not be reached).
StoreError = RedisError


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
# a rate card's revision) is then asked of the slot's replica (`Store._read_global`).
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
    """redis-py's cluster client, except for how it resets itself after an error.

    After a failed pipeline, a CLUSTERDOWN answer or repeated MOVED answers, redis-py calls
    `aclose()`, which disconnects every connection to every node, *including those other
    requests are reading from at that moment*: they then fail with `RuntimeError` ("the
    handler is closed") or `AttributeError` (a writer that is None) instead of a storage
    error. Here that reset only asks for a fresh slot map and recycles the connections
    lazily (idle ones now, busy ones when their command is done), as redis-py does itself
    after a connection error. `close_all` closes for good (`Store.close`).
    """

    async def aclose(self) -> None:
        self._initialize = True  # the next command reads the slot map again
        for node in list(self.nodes_manager.nodes_cache.values()):
            node.update_active_connections_for_reconnect()
            await node.disconnect_free_connections()

    async def close_all(self) -> None:
        self._initialize = False  # whatever state it is in: redis-py's aclose closes all
        await super().aclose()


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
