"""trainledger's Python client: post usage events, read costs, spool events on disk.

    >>> from trainledger.client import Client, event_id
    >>> with Client("http://127.0.0.1:8000", token) as client:
    ...     client.post_events({"id": event_id("job", 4242), "time": "2026-11-01T00:00:00Z",
    ...                         "project": "llm-7b", "sku": "gpu.h100.hour", "quantity": "8"})

Retries connection errors, timeouts, 429 and 5xx (backoff with full jitter, Retry-After
honoured); `Batcher` flushes on size and on time; `Spool` (spool.py) keeps events on disk
until a drainer has them counted. Guide: docs/guides/client.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..events.model import EventIn
    from .aio import AsyncBatcher, AsyncClient
    from .batching import RefusedEvent
    from .errors import (
        ApiError,
        BatcherError,
        BatcherFull,
        ClientError,
        ServiceUnreachable,
    )
    from .ids import NAMESPACE, event_id, namespace
    from .models import Event, IngestReport, RejectedEvent
    from .retry import NO_RETRY, RetryPolicy
    from .spool import DrainReport, SetAside, Spool
    from .spool_files import SpoolBusy
    from .sync import Batcher, Client

# Imported when first used: a Slurm hook that imports `trainledger.client.spool` to call
# `Spool.put` does not pay for httpx and the event model (most of a second on a busy node).
_WHERE = {
    "EventIn": "..events.model",
    "AsyncBatcher": ".aio",
    "AsyncClient": ".aio",
    "ApiError": ".errors",
    "BatcherError": ".errors",
    "BatcherFull": ".errors",
    "ClientError": ".errors",
    "ServiceUnreachable": ".errors",
    "RefusedEvent": ".batching",
    "NAMESPACE": ".ids",
    "event_id": ".ids",
    "namespace": ".ids",
    "Event": ".models",
    "IngestReport": ".models",
    "RejectedEvent": ".models",
    "NO_RETRY": ".retry",
    "RetryPolicy": ".retry",
    "DrainReport": ".spool",
    "SetAside": ".spool",
    "Spool": ".spool",
    "SpoolBusy": ".spool_files",
    "Batcher": ".sync",
    "Client": ".sync",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(where, __name__), name)


__all__ = [
    "NAMESPACE",
    "NO_RETRY",
    "ApiError",
    "AsyncBatcher",
    "AsyncClient",
    "Batcher",
    "BatcherError",
    "BatcherFull",
    "Client",
    "ClientError",
    "DrainReport",
    "Event",
    "EventIn",
    "IngestReport",
    "RefusedEvent",
    "RejectedEvent",
    "RetryPolicy",
    "ServiceUnreachable",
    "SetAside",
    "Spool",
    "SpoolBusy",
    "event_id",
    "namespace",
]
