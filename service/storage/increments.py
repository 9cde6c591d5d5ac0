"""The arguments of `apply_increments` (scripts/apply_increments.lua): the increments of the
ingest script and of a fold, grouped by key, split into two limbs where they must be."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .keys import Keys
from .limbs import MAX_LO_DELTA, split_delta


def increment_args(
    ref: Callable[[str], int], increments: Iterable[tuple[str, str, int]]
) -> tuple[list[Any], list[Any]]:
    """`apply_increments`'s (inc, his) for (key, field, delta) increments: grouped by key,
    each key with its high limbs' key (0: none), the deltas split by `split_delta`."""
    by_key: dict[str, list[Any]] = {}
    his: list[Any] = []
    for key, field, delta in increments:
        flat = by_key.get(key)
        if flat is None:
            flat = by_key[key] = []
        if 0 <= delta <= MAX_LO_DELTA:
            flat += (field, str(delta))
        elif not Keys.has_high(key):  # one limb (tier counters, event counts): whole
            if not -(2**63) <= delta < 2**63:
                raise ValueError(f"{key} {field}: {delta} leaves int64 and the key has no limbs")
            flat += (field, str(delta))
        else:
            low, high = split_delta(delta)
            flat += (field, str(low))
            his += (ref(Keys.high(key)), field, str(high))
    inc: list[Any] = []
    for key, flat in by_key.items():
        inc += (ref(key), ref(Keys.high(key)) if Keys.has_high(key) else 0, len(flat) // 2)
        inc += flat
    return inc, his
