"""The demo's webhook receiver: a real HTTP server on 127.0.0.1 that keeps what it is sent and
checks each delivery's Standard Webhooks signature."""

from __future__ import annotations

import json
import threading
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ...webhooks.formats.signing import verify_standard


@dataclass
class Delivery:
    webhook_id: str
    body: dict[str, Any]
    signed: bool
    received_at: datetime

    @property
    def alert_ids(self) -> list[str]:
        """The alerts this message tells: its own, and the lower thresholds of the same
        budget the same batch crossed, which it lists."""
        data = self.body.get("data") if isinstance(self.body, dict) else None
        also = data.get("also_crossed", []) if isinstance(data, dict) else []
        return [self.webhook_id] + [a["id"] for a in also if isinstance(a, dict) and "id" in a]


class Receiver:
    """A real HTTP server on 127.0.0.1 that keeps every webhook delivery it is sent."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.secret: str | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._keep(headers, raw)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the demo prints what arrived itself

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hooks/trainledger"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _keep(self, headers: dict[str, str], raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        signed = False
        if self.secret is not None:
            with suppress(ValueError):
                signed = verify_standard(self.secret, headers, raw)
        with self._lock:
            self.deliveries.append(
                Delivery(headers.get("webhook-id", ""), body, signed, datetime.now(UTC))
            )

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)
