"""Exact sums past int64: every stored sum of money or quantity is kept in two limbs.

A stored sum ``v`` (cost in nano, quantity in micro) is the pair of a low limb ``lo`` in the
field itself and a high limb ``hi`` in the same field of the key's high hash
(`Keys.high`): ``v = hi * LIMB + lo``, with ``LIMB = 10**9`` (one currency unit of nano,
a thousand units of micro). Both limbs are int64 fields moved by HINCRBY (exact, atomic).
The proof that no HINCRBY of a script fails, and so that no script stops after a partial
write, is in docs/exact-money.md; this module is the Python reference of the rules the Lua
scripts follow (service/storage/scripts/apply_increments.lua), held equal to them by
tests/integration/ledger/test_exact_money.py.

* An increment ``d`` with ``0 <= d <= MAX_LO_DELTA`` goes whole into the low limb (the usual
  case: one HINCRBY, as before there were limbs); a larger one is split into
  ``d % LIMB`` (low) and ``d // LIMB`` (high) (`split_delta`).
* When a low limb's HINCRBY would leave int64 (Valkey refuses it and writes nothing), the
  script first carries the low limb's whole multiples of ``LIMB`` into the high limb, exactly,
  by cutting its decimal text (`carry`), and increments again: the low limb is then below
  ``LIMB``, and ``LIMB + MAX_LO_DELTA <= INT64_MAX``.
* Should any increment still fail, the script undoes every increment it made (carries keep
  the value and stay) and writes nothing else (`apply_increments`).
* Every sum is bounded by the project's lifetime total, which the ingest script keeps below
  ``CAP_UNITS * LIMB`` (meta ``bound_c``/``bound_q``), so a high limb stays below
  ``CAP_UNITS + 2**63 / LIMB`` (a legacy int64 field included) < ``INT64_MAX``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "CAP_UNITS",
    "INT64_MAX",
    "LIMB",
    "MAX_LO_DELTA",
    "apply_increments",
    "bound_units",
    "carry",
    "combine",
    "dec_add",
    "dec_lt",
    "split_delta",
    "split_value",
]

INT64_MAX = 2**63 - 1
LIMB = 10**9
# The largest increment sent whole into a low limb: after a carry the limb is below LIMB, so
# it then takes any such increment without leaving int64.
MAX_LO_DELTA = INT64_MAX - LIMB
# What a project may hold over its lifetime, per kind (cost, quantity), in units of LIMB:
# 10**18 currency units (10**27 nano) of cost and 10**21 units of quantity.
CAP_UNITS = 10**18


def split_delta(delta: int) -> tuple[int, int]:
    """(low, high) increments of an increment: whole into the low limb when it may go there."""
    if 0 <= delta <= MAX_LO_DELTA:
        return delta, 0
    high, low = divmod(delta, LIMB)
    return low, high


def split_value(value: int) -> tuple[int, int]:
    """(low, high) fields of a value written whole (a rebuild's staging): one field if it fits."""
    if 0 <= value <= INT64_MAX:
        return value, 0
    high, low = divmod(value, LIMB)
    return low, high


def combine(low: int, high: int) -> int:
    return high * LIMB + low


def bound_units(total: int) -> int:
    """A batch's total (nano or micro) in whole LIMBs, rounded up: what it adds to the bound."""
    return -(-total // LIMB)


def dec_add(a: str, b: str) -> str:
    """Reference of the Lua ``add``: the sum of two canonical non-negative decimal strings."""
    return str(int(a) + int(b))


def dec_lt(a: str, b: str) -> bool:
    """Reference of the Lua ``lt``: ``<`` on canonical non-negative decimal strings."""
    return int(a) < int(b)


def carry(low_text: str) -> tuple[int, int] | None:
    """Reference of the Lua ``carry``: (units moved to the high limb, low limb left), or None
    when there is nothing to carry (the text is no integer above LIMB - 1)."""
    if not low_text.isdigit() or not low_text.isascii() or len(low_text) <= 9:
        return None
    units = int(low_text[:-9])
    return units, int(low_text) - units * LIMB


_Field = tuple[str, str]  # (key, field)


def _hincrby(store: dict[_Field, int], at: _Field, delta: int) -> bool:
    value = store.get(at, 0) + delta
    if not -(2**63) <= value <= INT64_MAX:
        return False  # Valkey: "increment or decrement would overflow", nothing written
    store[at] = value
    return True


def apply_increments(
    store: dict[_Field, int],
    low: Sequence[tuple[str, str | None, str, int]],
    high: Sequence[tuple[str, str, int]],
) -> bool:
    """Reference of the Lua ``apply_increments`` on `store` ((key, field) -> int64 value).

    `low`: (key, its high key or None for a single-limb key, field, increment) in order;
    `high`: (high key, field, increment), applied after them. Returns False when an increment
    cannot be applied; then every increment made is undone (carries stay: they keep each
    value), as the script leaves it."""
    done: list[tuple[_Field, int, _Field | None]] = []  # (field, increment, its high field)
    failed = False
    for key, high_key, name, delta in low:
        at = (key, name)
        if not _hincrby(store, at, delta):
            moved = None
            if high_key is not None and at in store:
                moved = carry(str(store[at]))
            if (
                high_key is not None
                and moved is not None
                and _hincrby(store, (high_key, name), moved[0])
            ):
                store[at] = moved[1]
                if _hincrby(store, at, delta):
                    done.append((at, delta, (high_key, name)))
                    continue
            failed = True
            break
        done.append((at, delta, (high_key, name) if high_key is not None else None))
    if not failed:
        for key, name, delta in high:
            if not _hincrby(store, (key, name), delta):
                failed = True
                break
            done.append(((key, name), delta, None))
    if failed:
        for at, delta, high_at in done:  # the script's order: the low ones, then the high
            _undo(store, at, high_at, delta)
        return False
    return True


def _undo(store: dict[_Field, int], at: _Field, high_at: _Field | None, delta: int) -> None:
    """Reference of the Lua ``undo``: take `delta` back; when a carry since left the low
    limb unable to take it whole, the high limb takes its units and the low limb the rest."""
    if high_at is None or abs(delta) < LIMB:
        store[at] = store.get(at, 0) - delta
        return
    if _hincrby(store, at, -delta):
        return
    units, rest = divmod(abs(delta), LIMB)
    sign = 1 if delta > 0 else -1
    store[high_at] = store.get(high_at, 0) - sign * units
    store[at] = store.get(at, 0) - sign * rest


def combined_fields(low: Mapping[bytes, bytes], high: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    """A hash's fields with their high limbs folded in (values as HINCRBY spells them)."""
    out = dict(low)
    for name, units in high.items():
        have = out.get(name)
        if have is not None:
            out[name] = str(int(units) * LIMB + int(have)).encode()
    return out
