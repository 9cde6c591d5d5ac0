"""Request bodies read within bounds: the size limit of each route, and JSON nesting.

Every route but `POST /v1/events` takes a JSON body that Litestar decodes into plain Python
objects before converting it to the route's type, so a body's decoding costs what its size
allows: those routes share a small limit (`Settings.max_json_body_bytes`, the app's
`request_max_body_size`), and a body nested deeper than the interpreter's recursion limit is
a 400 problem, not a 500. The ingest route has a limit of its own (`Settings.max_body_bytes`)
and reads its body with `read_body` (it decodes it itself, counting events first).
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from .problems import invalid, problem


class BoundedRequest(Request[Any, Any, Any]):
    """Litestar's request, with JSON too deeply nested to decode answered as a 400."""

    async def json(self) -> Any:
        try:
            return await super().json()
        except RecursionError as exc:  # msgspec recurses once per nesting level
            raise invalid("$", "the body is nested too deeply", status=400) from exc


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
