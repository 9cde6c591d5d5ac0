"""What the ingest script adds to a budget counter and checks against its limits.

Below both `budgets/firing.py` (which builds them) and `ingest/store.py` (which sends them),
so the store does not import the firing rule (and, through it, `Stores`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LimitCheck:
    mode: str  # "c": crossed from below to at/above; "a": ends strictly above
    limit: int
    alert_id: str
    alert_json: bytes


@dataclass(frozen=True)
class BudgetCounter:
    """Add `delta` to a budget counter and check its limits, inside the ingest script."""

    daily: bool  # the per-day counter (growth) rather than the per-period one
    field: str
    delta: int
    checks: Sequence[LimitCheck]
