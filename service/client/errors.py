"""The client's errors: every one is a `ClientError`. An answer the service refused
(`ApiError`), no answer after the retries (`ServiceUnreachable`), and a batcher's own."""

from __future__ import annotations

from typing import Any

import httpx

# Statuses that refuse a body as a whole: sending it again would be refused again.
REFUSED_BATCH = frozenset({400, 403, 413, 415, 422})


class ClientError(Exception):
    """Whatever `trainledger.client` raises about the service or its own state."""


class ApiError(ClientError):
    """The service answered with an error; ``problem`` is its RFC 9457 document when it sent
    one (``text`` otherwise)."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.problem: dict[str, Any] | None = None
        self.text = ""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            self.problem = body
        else:
            self.text = response.text[:2000]
        detail = (self.problem or {}).get("detail") or self.text
        super().__init__(f"HTTP {self.status}" + (f": {detail}" if detail else ""))

    @property
    def refused_batch(self) -> bool:
        """Whether the service refused the request's body itself (not the moment)."""
        return self.status in REFUSED_BATCH


class ServiceUnreachable(ClientError, httpx.TransportError):
    """No answer from the service after the retries (connection refused or reset, a timeout,
    a broken answer). The last httpx error is ``error`` (and ``__cause__``). Also an
    `httpx.TransportError`, so code that caught httpx's errors still catches it."""

    def __init__(self, url: str, error: httpx.TransportError, attempts: int) -> None:
        self.url = url
        self.error = error
        self.attempts = attempts
        tries = "1 try" if attempts == 1 else f"{attempts} tries"
        httpx.TransportError.__init__(
            self, f"no answer from {url} after {tries}: {str(error) or type(error).__name__}"
        )


class BatcherError(ClientError):
    """`close` could not send these events (JSON lines) and had no spool to keep them."""

    def __init__(self, lines: list[bytes], cause: Exception) -> None:
        super().__init__(f"{len(lines)} events not sent: {cause}")
        self.lines = lines


class BatcherFull(ClientError):
    """`add` found the batcher's queue at its bound (the service away for long, and no spool
    to take more): the event was not kept, `line` is it as JSON. Nothing is dropped silently."""

    def __init__(self, line: bytes, bound: int, cause: Exception | None) -> None:
        why = f" (last error: {cause})" if cause is not None else ""
        super().__init__(f"batcher full: {bound} events queued{why}")
        self.line = line
        self.bound = bound
