"""Deterministic event ids: the same natural key always gives the same id, so posting an
event again (a retry, a re-run import, a hook and a later bulk import) counts it once."""

from __future__ import annotations

import uuid

# The namespace of ids made by `event_id` (a fixed uuid4: change it and every id changes).
NAMESPACE = uuid.UUID("5a8f7c1e-3b0d-4e62-9f1a-6c2d8e4b7a90")
# Joins the parts of a key: a character no label holds, so ("a", "b:c") and ("a:b", "c")
# give different ids.
SEPARATOR = "\x1f"


def event_id(*key: object, namespace: uuid.UUID = NAMESPACE) -> str:
    """A UUID (version 5: SHA-1 over the namespace and the key) for a natural key, e.g.
    ``event_id("slurm", cluster, job_id, sku, day)``. Parts are joined as text; at least one."""
    if not key:
        raise ValueError("event_id needs at least one part of a key")
    return str(uuid.uuid5(namespace, SEPARATOR.join(str(part) for part in key)))


def namespace(name: str) -> uuid.UUID:
    """A namespace of one's own (for a team or a tool), derived from a name: ids made in it
    never equal ids made in another."""
    return uuid.uuid5(NAMESPACE, name)
