"""The arguments of `apply_increments` (scripts/apply_increments.lua): the increments of the
ingest script and of a fold, grouped by key, split into two limbs where they must be."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from .keys import Keys
from .limbs import MAX_LO_DELTA, split_delta

_Address = TypeVar("_Address", bound=Hashable)


def _same(key: str) -> str:
    return key


def increment_args(
    ref: Callable[[str], int],
    increments: Iterable[tuple[_Address, str, int]],
    key_of: Callable[[_Address], str] = _same,  # type: ignore[assignment]
) -> tuple[list[Any], list[Any]]:
    """`apply_increments`'s (inc, his) for (address, field, delta) increments: grouped by
    address, each address's key (`key_of`, called once per address) with its high limbs' key
    (0: none), the deltas split by `split_delta`.

    Grouping by the caller's address and spelling each key once keeps a fold's many thousand
    increments to one pass (bench/README: the fold's CPU per event)."""
    by_address: dict[_Address, list[Any]] = {}
    keys: dict[_Address, str] = {}
    his: list[Any] = []
    for address, field, delta in increments:
        flat = by_address.get(address)
        if flat is None:
            flat = by_address[address] = []
        if 0 <= delta <= MAX_LO_DELTA:
            flat += (field, str(delta))
            continue
        key = keys.get(address)
        if key is None:
            key = keys[address] = key_of(address)
        if not Keys.has_high(key):  # one limb (tier counters, event counts): whole
            if not -(2**63) <= delta < 2**63:
                raise ValueError(f"{key} {field}: {delta} leaves int64 and the key has no limbs")
            flat += (field, str(delta))
        else:
            low, high = split_delta(delta)
            flat += (field, str(low))
            his += (ref(Keys.high(key)), field, str(high))
    inc: list[Any] = []
    for address, flat in by_address.items():
        key = keys.get(address) or key_of(address)
        inc += (ref(key), ref(Keys.high(key)) if Keys.has_high(key) else 0, len(flat) // 2)
        inc += flat
    return inc, his
