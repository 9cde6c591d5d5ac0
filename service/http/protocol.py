"""uvicorn's httptools protocol with read timeouts for the request head and body.

uvicorn bounds only the idle time between requests (``timeout_keep_alive``); a client that
opens a connection and sends nothing, or half a request line, or headers announcing a body
that never comes, holds its connection (and the memory of a request in progress) for as
long as it likes. Here:

* **Header timeout** (``TRAINLEDGER_HEADER_TIMEOUT_S``, default 10 s): a new connection must
  deliver a complete request head (request line and headers) within this time of being
  opened, and on a kept-alive connection a request's head must be complete within this time
  of its first byte. Otherwise the server answers 408 (if any of the request arrived) and
  closes the connection.
* **Body timeout** (``TRAINLEDGER_BODY_TIMEOUT_S``, default 30 s): the whole body must arrive
  within this time of the head. Otherwise the server answers 408 (unless an answer has
  started) and closes; the handler waiting for the body sees the client as gone.

The idle time between requests stays ``timeout_keep_alive`` (`trainledger.cli.serve_runtime`). Both
timeouts are settings (`trainledger.config`), the process's once (`process_settings`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..config.handoff import process_settings
from ..config.settings import variable_of
from .problems import PROBLEM_BASE

HEADER_TIMEOUT_ENV = variable_of("header_timeout_s")
BODY_TIMEOUT_ENV = variable_of("body_timeout_s")


def _timeout_answer(detail: str) -> bytes:
    body = json.dumps(
        {
            "type": PROBLEM_BASE + "request-timeout",
            "title": "Request Timeout",
            "status": 408,
            "detail": detail,
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that closes connections whose request head or body is too slow
    to arrive (module documentation)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn makes this object for each connection, without our settings: the
        # process's (`trainledger serve` hands its own to each worker).
        settings = process_settings()
        self.header_timeout_s = settings.header_timeout_s
        self.body_timeout_s = settings.body_timeout_s
        self._read_timer: asyncio.TimerHandle | None = None
        self._request_started = False  # a byte of the current request has arrived

    def _arm(self, seconds: float, handler: Any) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, handler)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    # The connection ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # The parser's callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_started = True
        if self._read_timer is None:  # a kept-alive connection's next request
            self._arm(self.header_timeout_s, self._head_too_slow)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        # The body (if any) must follow in time; on_message_complete disarms this.
        self._arm(self.body_timeout_s, self._body_too_slow)

    def on_message_complete(self) -> None:
        self._disarm()
        self._request_started = False
        super().on_message_complete()

    # Expiry ----------------------------------------------------------------------------

    def _head_too_slow(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self._request_started:
            self.transport.write(
                _timeout_answer(
                    f"the request's headers did not arrive within {self.header_timeout_s:g} s "
                    f"({HEADER_TIMEOUT_ENV})"
                )
            )
        self.transport.close()

    def _body_too_slow(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            self.transport.write(
                _timeout_answer(
                    f"the request's body did not arrive within {self.body_timeout_s:g} s "
                    f"({BODY_TIMEOUT_ENV})"
                )
            )
        if cycle is not None and not cycle.response_complete:
            # The handler's next receive() is a disconnect, and whatever it sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()
