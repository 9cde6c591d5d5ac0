"""Request bodies read within bounds: the size limit of each route, and JSON nesting.

Every route but `POST /v1/events` takes a JSON body that Litestar decodes into plain Python
objects before converting it to the route's type, so a body's decoding costs what its size
allows: those routes share a small limit (`Settings.max_json_body_bytes`, the app's
`request_max_body_size`), and a body nested deeper than the interpreter's recursion limit is
a 400 problem, not a 500. The ingest route has a limit of its own (`Settings.max_body_bytes`)
and reads its body with `read_body` (it decodes it itself, counting events first).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import InternalServerException
from litestar.types import Empty, ReceiveMessage

from ..events.decoding import repeated_key
from .problems import invalid, problem

# nginx's "client closed request": the status the access line and the request metrics show
# for a request whose client left (or was cut off by the body timeout, which answered 408)
# before its body arrived. Nobody receives it.
CLIENT_CLOSED_REQUEST = 499


class ClientGone(Exception):
    """The client went away before its whole body arrived: the client's doing, not a server
    error (Litestar calls it a 500 and logs a traceback)."""

    status_code = CLIENT_CLOSED_REQUEST


def client_gone_answer(request: Request[Any, Any, Any], exc: ClientGone) -> Response[bytes]:
    """The answer to a request whose client left: nobody reads it; the access line and the
    request metrics show its status."""
    return Response(b"", status_code=CLIENT_CLOSED_REQUEST)


class BoundedRequest(Request[Any, Any, Any]):
    """Litestar's request, with JSON too deeply nested to decode answered as a 400, a body
    that names a key twice in one object, or that holds a value only a lax reading takes
    (`strictly_problem`), answered as a 400 naming it, and a client gone mid-body as
    `ClientGone`."""

    async def json(self) -> Any:
        fresh = self._json is Empty and self._connection_state.json is Empty
        try:
            value = await super().json()
        except RecursionError as exc:  # msgspec recurses once per nesting level
            raise invalid("$", "the body is nested too deeply", status=400) from exc
        if fresh:  # checked once, by whichever reads it first (a guard or the handler)
            body = await self.body()
            key = repeated_key(body)
            if key is not None:
                raise invalid(key, "this key is given twice in one object", status=400)
            problem_at = strictly_problem(value, _body_type(self.route_handler))
            if problem_at is not None:
                raise invalid(problem_at[0], problem_at[1], status=400)
        return value

    async def stream(self) -> AsyncGenerator[bytes, None]:
        # Litestar raises the same exception for a disconnect as for its own misuse; which
        # one it was is told by what `receive` gave.
        receive = self.receive
        gone = False

        async def noting_disconnect() -> ReceiveMessage:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        self.receive = noting_disconnect
        try:
            async for chunk in super().stream():
                yield chunk
        except InternalServerException as exc:
            if gone:
                raise ClientGone("the client left before its body arrived") from exc
            raise
        finally:
            self.receive = receive


def _body_type(handler: Any) -> Any:
    data = handler.parsed_fn_signature.parameters.get("data")
    return None if data is None else data.annotation


def strictly_problem(value: Any, kind: Any) -> tuple[str, str] | None:
    """(field, reason) when the decoded body reads as `kind` only by Litestar's lax
    conversion (`strict=False`, which its parameters from the query string need): `0` as a
    boolean false, `0` as the time 1970-01-01, `"1"` as a number. None when it reads strictly
    (or there is no body type to read it as)."""
    if kind is None:
        return None
    try:
        msgspec.convert(value, kind, strict=True, str_keys=True)
    except msgspec.ValidationError as exc:
        try:  # refused either way: Litestar answers for it, after the guards' own checks
            msgspec.convert(value, kind, strict=False, str_keys=True)
        except msgspec.ValidationError:
            return None
        reason, sep, where = str(exc).rpartition(" - at `")
        return (where.rstrip("`"), reason) if sep else ("$", str(exc))
    except TypeError:  # a body type msgspec does not convert to: Litestar answers for it
        return None
    return None


def too_large() -> Exception:
    return problem(413, "Body too large", "the body exceeds the size limit", kind="too-large")


async def read_body(request: Request[Any, Any, Any], limit: int) -> bytes:
    """The whole body, or a 413 problem as soon as it is known to exceed `limit` bytes (by its
    Content-Length, or by what arrived): a route whose handler has no limit of Litestar's."""
    announced = request.content_length
    if announced is not None and announced > limit:
        raise too_large()
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)
