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

from litestar import Request, Response
from litestar.exceptions import InternalServerException
from litestar.types import ReceiveMessage

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
    """Litestar's request, with JSON too deeply nested to decode answered as a 400, and a
    client gone mid-body as `ClientGone`."""

    async def json(self) -> Any:
        try:
            return await super().json()
        except RecursionError as exc:  # msgspec recurses once per nesting level
            raise invalid("$", "the body is nested too deeply", status=400) from exc

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
