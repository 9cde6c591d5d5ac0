"""The ordered lane: commands execute in submit order, many outstanding at once.

Against the embedded Valkey and the system Redis (each test's own keys, flushed per test),
plus a Valkey of this module's own for what touches the whole server (SCRIPT FLUSH, ACL
users, a restart).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError, NoScriptError, ResponseError
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.storage.lane import LaneNoScript, OrderedLane
from trainledger.stores import Stores

from tests.conftest import is_cluster_url

PUSH_LUA = "return redis.call('RPUSH', KEYS[1], ARGV[1])"
BLPOP_FOREVER = ("BLPOP", "gate", 0)  # holds every command behind it until "gate" gets one


@pytest.fixture
async def store(clean_redis: str) -> AsyncIterator[Stores]:
    if is_cluster_url(clean_redis):
        pytest.skip("the lane is for one server; a cluster gets none")
    s = Stores.from_url(clean_redis)
    yield s
    await s.close()


@pytest.fixture
async def lane(store: Stores) -> AsyncIterator[OrderedLane]:
    lane = OrderedLane.for_client(store.connection.client)
    assert lane is not None
    yield lane
    await lane.close()


def _client_info(line: bytes) -> dict[str, str]:
    return dict(field.split("=", 1) for field in line.decode().split() if "=" in field)


async def _server_view(store: Stores, client_id: int) -> dict[str, str]:
    """The server's CLIENT LIST line for one connection, as a dict."""
    return _client_info(
        await store.connection.client.execute_command("CLIENT", "LIST", "ID", client_id)
    )


async def _until(condition: Any, what: str) -> None:
    for _ in range(1000):  # a bound on waiting, never an assertion about speed
        if await condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def test_commands_from_many_tasks_execute_and_answer_in_submit_order(
    store: Stores, lane: OrderedLane
) -> None:
    push = store.connection.client.register_script(PUSH_LUA)
    order: list[str] = []  # tags in submit order: the list must end up in this order
    mismatches: list[tuple[str, int, Any]] = []

    async def producer(name: int) -> None:
        rng = random.Random(name)
        waiting: list[tuple[str, int, asyncio.Future[Any]]] = []
        for i in range(100):
            tag = f"{name}:{i}"
            # Both push onto the same list, so each reply (the list's new length) is the
            # command's position in execution order.
            if i % 5:
                future = lane.submit_script(push, ["list"], [tag])
            else:
                future = lane.submit("RPUSH", "list", tag)
            order.append(tag)
            waiting.append((tag, len(order), future))
            if rng.random() < 0.3:
                await asyncio.sleep(0)  # let the other producers submit in between
            if rng.random() < 0.2 or i == 99:
                for tag, position, done in waiting:
                    if (reply := await done) != position:
                        mismatches.append((tag, position, reply))
                waiting.clear()

    await asyncio.gather(*(producer(n) for n in range(20)))
    assert mismatches == []
    assert len(order) == 2000
    assert await store.connection.client.lrange("list", 0, -1) == [t.encode() for t in order]


async def test_many_commands_are_outstanding_at_once(store: Stores, lane: OrderedLane) -> None:
    client_id = int(await lane.submit("CLIENT", "ID"))
    before = await _server_view(store, client_id)
    blocker = lane.submit(*BLPOP_FOREVER)
    incrs = [lane.submit("INCR", "n") for _ in range(100)]
    sent = 100 * len(b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n")

    async def all_received() -> bool:
        # The server has every INCR's bytes (in its query buffer, or counted as received)
        # while the BLPOP ahead of them is still unanswered: they were all sent at once.
        now = await _server_view(store, client_id)
        received = int(now.get("tot-net-in", 0)) - int(before.get("tot-net-in", 0))
        return now["cmd"] == "blpop" and max(int(now["qbuf"]), received) >= sent

    await _until(all_received, "the INCRs reach the server")
    assert (
        await store.connection.client.get("n") is None
    )  # none has run: they wait behind the BLPOP
    assert not blocker.done() and not any(f.done() for f in incrs)
    await store.connection.client.lpush("gate", "open")
    assert await blocker == [b"gate", b"open"]
    assert await asyncio.gather(*incrs) == list(range(1, 101))


async def test_an_error_reply_fails_only_its_own_future(store: Stores, lane: OrderedLane) -> None:
    failing = store.connection.client.register_script("return redis.error_reply('ERR nope')")
    futures = [
        lane.submit("SET", "s", "text"),
        lane.submit("INCR", "s"),  # not an integer
        lane.submit("GET", "s"),
        lane.submit_script(failing, [], []),
        lane.submit("NOSUCHCOMMAND"),
        lane.submit("INCR", "n"),
    ]
    replies = await asyncio.gather(*futures, return_exceptions=True)
    assert replies[0] == b"OK" and replies[2] == b"text" and replies[5] == 1
    for i in (1, 3, 4):
        assert isinstance(replies[i], ResponseError), replies[i]
    assert "nope" in str(replies[3])
    assert await lane.submit("INCR", "n") == 2


async def test_a_lost_connection_fails_what_is_outstanding_and_the_lane_reconnects(
    store: Stores, lane: OrderedLane
) -> None:
    first_id = int(await lane.submit("CLIENT", "ID"))
    blocker = lane.submit(*BLPOP_FOREVER)
    outstanding = [lane.submit("INCR", "n") for _ in range(10)]

    async def blocked() -> bool:
        return (await _server_view(store, first_id)).get("cmd") == "blpop"

    await _until(blocked, "the lane's BLPOP blocks")
    assert await store.connection.client.execute_command("CLIENT", "KILL", "ID", first_id) == 1
    for future in [blocker, *outstanding]:
        with pytest.raises(ConnectionError):
            await future
    # Submitted in one go while the lane reconnects: queued, then written in this order.
    pushes = [lane.submit("RPUSH", "after", str(i)) for i in range(50)]
    assert await asyncio.gather(*pushes) == list(range(1, 51))
    assert await store.connection.client.lrange("after", 0, -1) == [
        str(i).encode() for i in range(50)
    ]
    assert int(await lane.submit("CLIENT", "ID")) != first_id
    assert await store.connection.client.get("n") is None  # the killed INCRs never ran


async def test_a_submit_on_a_connection_closed_under_it_fails_its_future_not_the_caller(
    store: Stores, lane: OrderedLane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transport closes before the reader has noticed: asyncio's drops the write, uvloop's
    (the server's loop) raises RuntimeError. Either way `submit` returns, its future fails
    with ConnectionError, and the lane reconnects."""
    assert int(await lane.submit("INCR", "n")) == 1
    session = lane._session
    assert session is not None
    session.writer.transport.abort()  # closed at once, no await for the reader to notice

    def closed(data: Any) -> None:  # what uvloop's transport does on a closed handle
        raise RuntimeError("unable to perform operation on <UnixTransport closed=True>")

    monkeypatch.setattr(session.writer, "writelines", closed)
    lost = lane.submit("INCR", "n")  # must not raise
    with pytest.raises(ConnectionError):
        await lost
    assert int(await lane.submit("INCR", "n")) == 2  # a new connection; the lost one never ran


async def test_a_cancelled_waiter_does_not_desync_later_replies(
    store: Stores, lane: OrderedLane
) -> None:
    blocker = lane.submit(*BLPOP_FOREVER)

    async def wait_for_incr() -> Any:
        return await lane.submit("INCR", "n")

    waiter = asyncio.create_task(wait_for_incr())
    await asyncio.sleep(0)  # the waiter submits and waits
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    later = [lane.submit("INCR", "n"), lane.submit("GET", "n"), lane.submit("ECHO", "x")]
    await store.connection.client.lpush("gate", "open")
    assert await blocker == [b"gate", b"open"]
    # The cancelled INCR ran (its reply was read and dropped): each later reply is its own.
    assert await asyncio.gather(*later) == [2, b"2", b"x"]


async def test_the_lane_connects_as_the_pool_does(store: Stores, lane: OrderedLane) -> None:
    assert isinstance(store.connection.client, aioredis.Redis)
    pool = store.connection.client.connection_pool
    info = _client_info(await lane.submit("CLIENT", "INFO"))
    kwargs = pool.connection_kwargs
    assert int(info["db"]) == int(kwargs.get("db", 0))
    await lane.submit("SET", "where", "lane")
    assert await store.connection.client.get("where") == b"lane"  # the pool's database
    # The same large send buffer as the store's pooled connections.
    pooled = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        assert lane._session is not None and pooled._writer is not None
        lane_sock = lane._session.writer.transport.get_extra_info("socket")
        pool_sock = pooled._writer.transport.get_extra_info("socket")
        option = (socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert lane_sock.getsockopt(*option) == pool_sock.getsockopt(*option)
    finally:
        await pool.release(pooled)


async def test_close_fails_what_is_outstanding(store: Stores) -> None:
    lane = OrderedLane.for_client(store.connection.client)
    assert lane is not None
    blocker = lane.submit(*BLPOP_FOREVER)
    await lane.close()
    with pytest.raises(ConnectionError):
        await blocker
    with pytest.raises(ConnectionError):
        lane.submit("PING")


def test_a_cluster_client_gets_no_lane() -> None:
    cluster = RedisCluster(host="127.0.0.1", port=1)  # never connects: nothing is sent
    assert OrderedLane.for_client(cluster) is None


# --- a server of this module's own ----------------------------------------------------------


@pytest.fixture
def data_dir() -> Iterator[Path]:
    short = Path(tempfile.mkdtemp(prefix="tl-lane-"))  # a unix socket path that fits
    try:
        yield short / "d"
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def own_valkey(data_dir: Path) -> Iterator[tuple[EmbeddedValkey, str]]:
    valkey = EmbeddedValkey(data_dir)
    url = valkey.start()
    try:
        yield valkey, url
    finally:
        valkey.stop()


async def test_noscript_after_a_flush_fails_once_then_the_lane_loads_again(
    own_valkey: tuple[EmbeddedValkey, str],
) -> None:
    store = Stores.from_url(own_valkey[1])
    lane = OrderedLane.for_client(store.connection.client)
    assert lane is not None
    push = store.connection.client.register_script(PUSH_LUA)
    try:
        assert await lane.submit_script(push, ["l"], ["a"]) == 1
        await store.connection.client.script_flush()
        # Both were on the wire before the first NOSCRIPT came back: both fail, neither runs.
        flushed = [lane.submit_script(push, ["l"], ["b"]), lane.submit_script(push, ["l"], ["c"])]
        for future in flushed:
            with pytest.raises(LaneNoScript) as caught:
                await future
            assert isinstance(caught.value, NoScriptError)  # what redis-py callers catch
        assert await lane.submit_script(push, ["l"], ["d"]) == 2  # loaded again first
        assert await store.connection.client.lrange("l", 0, -1) == [b"a", b"d"]
    finally:
        await lane.close()
        await store.close()


async def test_a_restarted_server_fails_outstanding_commands_then_serves_again(
    data_dir: Path,
) -> None:
    valkey = EmbeddedValkey(data_dir, appendfsync="always")
    url = valkey.start()
    store = Stores.from_url(url)
    lane = OrderedLane.for_client(store.connection.client)
    assert lane is not None
    push = store.connection.client.register_script(PUSH_LUA)
    again: EmbeddedValkey | None = None
    try:
        assert await lane.submit_script(push, ["l"], ["before"]) == 1
        blocker = lane.submit(*BLPOP_FOREVER)
        valkey.kill()
        with pytest.raises(ConnectionError):
            await blocker
        with pytest.raises(ConnectionError):  # down: the reconnect fails, and says so
            await lane.submit("PING")
        again = EmbeddedValkey(data_dir, appendfsync="always")
        assert again.start() == url
        # A new server process: the script is loaded on the new connection first.
        replies = [lane.submit_script(push, ["l"], [f"after{i}"]) for i in range(3)]
        assert await asyncio.gather(*replies) == [2, 3, 4]
    finally:
        await lane.close()
        await store.close()
        (again or valkey).stop()


async def test_auth_and_database_are_those_of_the_pool(
    own_valkey: tuple[EmbeddedValkey, str],
) -> None:
    valkey, url = own_valkey
    admin = redis.Redis.from_url(url)
    admin.acl_setuser("lane", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
    admin.acl_setuser("default", enabled=False)  # from here on, only "lane" gets in
    admin.close()
    path = valkey.socket_path  # the URL's own carries the embedded server's password
    store = Stores.from_url(f"unix://lane:s3cret@{path}?db=3")
    lane = OrderedLane.for_client(store.connection.client)
    assert lane is not None
    try:
        info = _client_info(await lane.submit("CLIENT", "INFO"))
        assert (info["user"], info["db"]) == ("lane", "3")
        await lane.submit("SET", "k", "lane")
        other = aioredis.Redis.from_url(f"unix://lane:s3cret@{path}?db=0")
        try:
            assert await other.get("k") is None
            assert await store.connection.client.get("k") == b"lane"
        finally:
            await other.aclose()
        wrong = OrderedLane.for_client(aioredis.Redis.from_url(f"unix://lane:nope@{path}"))
        assert wrong is not None
        with pytest.raises(ConnectionError):  # AUTH fails: the lane cannot connect
            await wrong.submit("PING")
        await wrong.close()
    finally:
        await lane.close()
        await store.close()


async def test_a_reply_later_than_the_socket_timeout_fails_but_idling_does_not(
    clean_redis: str,
) -> None:
    if is_cluster_url(clean_redis):
        pytest.skip("the lane is for one server")
    client = aioredis.Redis.from_url(clean_redis, socket_timeout=0.3)
    lane = OrderedLane.for_client(client)
    assert lane is not None
    try:
        client_id = await lane.submit("CLIENT", "ID")
        await asyncio.sleep(0.6)  # idle past the timeout: nothing is owed, nothing fails
        assert await lane.submit("CLIENT", "ID") == client_id
        with pytest.raises(ConnectionError, match="no reply in time"):
            await lane.submit(*BLPOP_FOREVER)
        assert await lane.submit("CLIENT", "ID") != client_id  # a new connection
    finally:
        await lane.close()
        await client.aclose()
