"""An ordered, pipelined lane to one Redis/Valkey server: call order = execution order.

redis-py runs one command per pooled connection at a time, so two calls on two pooled
connections may execute in either order, and a caller that needs order must wait for each
answer before sending the next command. The lane has one connection of its own: `submit`
writes the command on it before returning (call order = wire order = execution order) and
hands back a future; one reader task resolves the futures FIFO as the replies come in, so
any number of commands can be outstanding at once.

Not for a cluster (`OrderedLane.for_client` returns None there): a cluster's commands go to
many masters, with no order between them.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, NoScriptError, ResponseError

__all__ = ["LaneNoScript", "OrderedLane"]


class LaneNoScript(NoScriptError):
    """The server did not know the script (someone ran SCRIPT FLUSH): not run. The lane loads
    it again before its next EVALSHA; the caller runs this one some other way."""


# A queued command: its arguments, the script an EVALSHA needs, and the caller's future.
_Command = tuple[tuple[Any, ...], AsyncScript | None, "asyncio.Future[Any]"]


class _Session:
    """One open connection and the replies still owed on it, oldest first (None: a reply
    the lane itself asked for, such as SCRIPT LOAD's, dropped when it comes)."""

    def __init__(self, conn: AbstractConnection) -> None:
        self.conn = conn
        self.writer: asyncio.StreamWriter = conn._writer  # type: ignore[assignment]
        self.pending: deque[asyncio.Future[Any] | None] = deque()
        self.loaded: set[str] = set()  # script SHAs loaded (or being loaded) on it
        self.deadline: asyncio.Timeout | None = None  # of the reader's current read
        self.reader: asyncio.Task[None] | None = None


class OrderedLane:
    """A dedicated, pipelined connection whose commands execute in submit order."""

    def __init__(self, make_connection: Callable[[], AbstractConnection]) -> None:
        self._make_connection = make_connection
        self._session: _Session | None = None
        self._opening: asyncio.Task[None] | None = None
        self._backlog: list[_Command] = []  # submitted while (re)connecting, in order
        self._closed = False

    @classmethod
    def for_client(cls, client: aioredis.Redis | RedisCluster) -> OrderedLane | None:
        """A lane connecting as `client`'s pool does (address, TLS, AUTH, db, timeouts, and
        the store's large send buffer: `Connection.from_url` sets the pool's connection_class);
        None for a cluster client."""
        if isinstance(client, RedisCluster):
            return None
        pool = client.connection_pool
        connection_class, kwargs = pool.connection_class, dict(pool.connection_kwargs)
        return cls(lambda: connection_class(**kwargs))

    def submit(self, *args: Any) -> asyncio.Future[Any]:
        """Send one command (`submit("INCR", "k")`) now, behind every command submitted
        before it; the future gets its raw reply (no redis-py response callbacks: SET gives
        b"OK"), or the server's error reply as redis-py's exception for it.

        The future fails with ConnectionError if the connection is lost before the reply
        comes (the command may or may not have run); the next submit reconnects."""
        return self._submit(args, None)

    def submit_script(
        self,
        script: AsyncScript,
        keys: list[Any] | tuple[Any, ...],
        args: list[Any] | tuple[Any, ...],
    ) -> asyncio.Future[Any]:
        """EVALSHA `script`, as `submit`. The lane loads the script on its connection first
        (once per connection); if the server answers NOSCRIPT anyway, the future fails with
        `LaneNoScript` and the script is loaded again before the next EVALSHA."""
        return self._submit(("EVALSHA", script.sha, len(keys), *keys, *args), script)

    async def close(self) -> None:
        self._closed = True
        opening, self._opening = self._opening, None
        if opening is not None:
            opening.cancel()
            await asyncio.wait([opening])
        self._fail_backlog("the lane was closed")
        session, self._session = self._session, None
        if session is not None:
            if session.reader is not None:
                session.reader.cancel()
                await asyncio.wait([session.reader])
            _fail_pending(session, "the lane was closed")
            await session.conn.disconnect(nowait=True)

    def _submit(self, args: tuple[Any, ...], script: AsyncScript | None) -> asyncio.Future[Any]:
        if self._closed:
            raise ConnectionError("the lane is closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        command: _Command = (args, script, future)
        if self._session is not None:
            self._write(self._session, [command])
        else:
            self._backlog.append(command)
            if self._opening is None:
                self._opening = asyncio.create_task(self._open())
        return future

    def _write(self, session: _Session, commands: list[_Command]) -> None:
        """Put the commands on the transport (no await: nothing can come between them)."""
        conn = session.conn
        chunks: list[bytes] = []
        for args, script, future in commands:
            if script is not None and script.sha not in session.loaded:
                # Pipelined just ahead of the EVALSHA: it runs first, so no round trip.
                chunks += conn.pack_command("SCRIPT", "LOAD", script.script)
                session.pending.append(None)
                session.loaded.add(script.sha)
            chunks += conn.pack_command(*args)
            session.pending.append(future)
        # The transport queues what the socket does not take at once. There is no drain
        # (submit cannot await): callers bound what they leave outstanding.
        try:
            session.writer.writelines(chunks)
        except (RuntimeError, OSError) as exc:
            # The connection closed before the reader noticed (uvloop refuses to write on a
            # closed transport): these commands and those owed fail as for a lost connection,
            # so that a submit never raises, and the next submit reconnects.
            if self._session is session:
                self._session = None
            _fail_pending(session, f"the lane's connection was lost: {exc}")
            return
        if session.deadline is not None and session.deadline.when() is None:
            self._arm(session)  # the reader waits with no deadline while nothing is owed

    async def _open(self) -> None:
        conn = self._make_connection()
        try:
            # TCP, unix or TLS, then HELLO/AUTH/SELECT/CLIENT SETNAME as for the pool.
            await conn.connect()  # type: ignore[no-untyped-call]
        except asyncio.CancelledError:
            await conn.disconnect(nowait=True)  # close() while connecting
            raise
        except Exception as exc:
            self._opening = None
            self._fail_backlog(f"the lane could not connect: {exc}")
            return
        self._opening = None
        session = self._session = _Session(conn)
        session.reader = asyncio.create_task(self._read(session))
        backlog, self._backlog = self._backlog, []
        self._write(session, backlog)

    def _arm(self, session: _Session) -> None:
        """Bound the wait for the oldest owed reply by the pool's socket_timeout."""
        timeout = session.conn.socket_timeout
        if session.deadline is not None and timeout is not None:
            session.deadline.reschedule(asyncio.get_running_loop().time() + timeout)

    async def _read(self, session: _Session) -> None:
        pending = session.pending
        try:
            while True:
                # Read even when nothing is owed, so a closed connection is noticed at once
                # (the next submit then reconnects) rather than by the next command.
                async with asyncio.timeout(None) as session.deadline:
                    if pending:
                        self._arm(session)
                    try:
                        reply: Any = await session.conn.read_response(
                            timeout=math.inf, disconnect_on_error=False
                        )
                    except ResponseError as error:
                        reply = error
                    finally:
                        session.deadline = None  # no rescheduling a timeout once left
                if not pending:
                    raise ConnectionError(f"a reply nothing was waiting for: {reply!r}")
                future = pending.popleft()
                if isinstance(reply, NoScriptError):
                    session.loaded.clear()  # flushed: load again before the next EVALSHA
                    reply = LaneNoScript(*reply.args)
                # Done: its caller was cancelled. The reply is read and dropped all the same.
                if future is None or future.done():
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except asyncio.CancelledError:
            raise  # close()
        except Exception as exc:
            if self._session is session:
                self._session = None  # the next submit reconnects
            reason = "no reply in time" if isinstance(exc, TimeoutError) else str(exc)
            _fail_pending(session, f"the lane's connection was lost: {reason}")
            await session.conn.disconnect(nowait=True)

    def _fail_backlog(self, message: str) -> None:
        backlog, self._backlog = self._backlog, []
        for _, _, future in backlog:
            if not future.done():
                future.set_exception(ConnectionError(message))


def _fail_pending(session: _Session, message: str) -> None:
    while session.pending:
        future = session.pending.popleft()
        if future is not None and not future.done():
            # One instance each: a raised exception collects its raiser's traceback.
            future.set_exception(ConnectionError(message))
