"""The text of the totals' fields (the layout: service/storage/keys.py)."""

from __future__ import annotations

from collections.abc import Iterable

from ..storage.keys import FIELD_SEP, TAG_SEP

__all__ = ["attributed_tags", "dims_of", "joined_dims", "tags_of"]

# --- the totals' fields ----------------------------------------------------------------
# A totals field is a kind (``c|`` cost, ``q|`` quantity, ``n|`` events) and the cell's dims
# joined by FIELD_SEP; the dims element of the attributed tags joins ``k=v`` pairs by TAG_SEP
# (the layout: service/storage/keys.py). Only these functions read or write that text.


def attributed_tags(tags: dict[str, str], keys: frozenset[str]) -> str:
    """The event's tags that the project attributes costs by, canonically ordered."""
    if not tags or not keys:
        return ""
    return TAG_SEP.join(f"{k}={tags[k]}" for k in sorted(keys & tags.keys()))


def tags_of(text: str) -> dict[str, str]:
    """The tags of an attributed-tags dims element."""
    if not text:
        return {}
    return dict(pair.split("=", 1) for pair in text.split(TAG_SEP))


def dims_of(text: str) -> list[str]:
    """The dims of a totals field (after its kind), as stored."""
    return text.split(FIELD_SEP)


def joined_dims(dims: Iterable[str]) -> str:
    """A totals field's dims text (`dims_of` reversed)."""
    return FIELD_SEP.join(dims)
