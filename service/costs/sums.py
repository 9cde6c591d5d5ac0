"""Summing the integer fields of totals hashes in bulk: the hot loop of every cost query."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from operator import itemgetter

import msgspec


def picker(positions: Sequence[int]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    """A function returning the items at `positions` as a tuple (`itemgetter` returns a bare
    item for one position)."""
    if len(positions) > 1:
        return itemgetter(*positions)
    if len(positions) == 1:
        (at,) = positions
        return lambda items: (items[at],)
    return lambda items: ()


_INT_LIST = msgspec.json.Decoder(list[int])


def ints(values: Sequence[bytes]) -> list[int]:
    """`int(v)` of each value, parsed in one C call: the values joined as a JSON array of
    integers (~2x faster than one `int()` each). Each value must then be exactly one JSON
    integer (a comma inside one would add an element, an empty one is malformed), which
    `int()` reads the same; anything else (never written by HINCRBY) falls back to `int()`."""
    try:
        out = _INT_LIST.decode(b"[" + b",".join(values) + b"]")
    except msgspec.DecodeError:
        out = []
    return out if len(out) == len(values) else [int(v) for v in values]


def sum_fields(hashes: Sequence[dict[bytes, bytes]]) -> tuple[list[bytes], list[int]]:
    """Each field of `hashes` (first-seen order) and its total over them (0 where absent).

    Hot on the big sources (a week of `xsku` is 7 hashes of 4,000 fields): the values of
    every field are picked from all hashes at once (`itemgetter`, after filling in the
    fields a hash lacks), converted in bulk (`ints`) and summed in C loops (`zip`, `sum`)
    rather than one Python step per field and hash.
    """
    present = [h for h in hashes if h]
    if len(present) == 1:
        return list(present[0]), ints(list(present[0].values()))
    fields = list(dict.fromkeys(chain.from_iterable(present)))
    if not fields:
        return [], []
    if len(fields) == 1:  # every hash holds just it (itemgetter of one field returns no tuple)
        return fields, [sum(ints([v for h in present for v in h.values()]))]
    pick = itemgetter(*fields)
    zeros = dict.fromkeys(fields, b"0")
    columns = [
        ints(pick(h if len(h) == len(fields) else {**zeros, **h}))  # same length: same fields
        for h in present
    ]
    return fields, list(map(sum, zip(*columns, strict=True)))
