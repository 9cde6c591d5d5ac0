"""Decoding what Redis answers (bytes) and encoding what it takes: shared by the stores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from .limbs import LIMB

_Encodable = bytes | bytearray | memoryview | str | int | float


def as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def str_mapping(fields: dict[str, str]) -> Mapping[_Encodable, _Encodable]:
    """A str -> str dict as redis-py's HSET mapping type."""
    return cast(Mapping[_Encodable, _Encodable], fields)


def with_high(low: list[Any], high: list[Any]) -> list[Any]:
    """HMGET replies of a key and of its high limbs, combined (service/storage/limbs.py)."""
    if not any(h is not None for h in high):
        return low
    return [
        lo if hi is None or lo is None else str(int(hi) * LIMB + int(lo)).encode()
        for lo, hi in zip(low, high, strict=True)
    ]
