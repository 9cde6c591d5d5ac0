"""The client's errors: an answer the service refused, and giving up after the retries."""

from __future__ import annotations

from typing import Any

import httpx

# Statuses that refuse a body as a whole: sending it again would be refused again.
REFUSED_BATCH = frozenset({400, 403, 413, 415, 422})


class ApiError(Exception):
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
