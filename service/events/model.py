"""Usage events: the model, the patterns of their identifiers and labels, and the checks of
the text msgspec does not make while decoding (decoding.py reads the bodies).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal, Protocol

import msgspec

from costcore.money import (
    JSON_NUMBER_PATTERN,
    MAX_FRACTION_DIGITS,
    MAX_INTEGER_DIGITS,
    decimal_text_problem,
)

STAGES: tuple[str, ...] = (
    "data_prep",
    "quality_scoring",
    "pretrain",
    "midtrain",
    "eval",
    "post_train",
    "other",
)
Stage = Literal[
    "data_prep", "quality_scoring", "pretrain", "midtrain", "eval", "post_train", "other"
]

# Identifiers never contain "{", "}", ":" or control characters, so a value can neither
# escape its project's hash tag nor forge a field separator in the totals.
# Every pattern ends in `$(?!\n)`: msgspec (and Litestar's parameters) check a pattern with
# `re.search`, where a bare `$` also matches before a final newline ("llm\n" would pass);
# the look-ahead refuses that and means nothing to a JSON Schema (ECMA-262) reader.
END = r"$(?!\n)"
PROJECT_PATTERN = r"^[a-z0-9][a-z0-9_\-]{0,63}" + END
EVENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/@+=\-]{0,199}" + END
LABEL_PATTERN = r"^[A-Za-z0-9_.@/+=\-]{0,128}" + END
TAG_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}" + END
# The one rule of every label, name and free text the API keeps (tag values, budget, token,
# benchmark and metric names, descriptions...), which reach chat and email unchanged. No
# character of this class: C0 and C1 controls (U+0085 NEL among them), DEL, the line and
# paragraph separators U+2028/U+2029, the bidirectional formatting characters (U+061C,
# U+200E/U+200F, U+202A-U+202E, U+2066-U+2069) that reorder what a reader sees, and the
# invisible or blank ones that make two names look alike or a name look empty: the soft hyphen
# U+00AD, the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), the Mongolian vowel separator
# U+180E, the zero-width space U+200B, the word joiner and invisible operators U+2060-U+2064,
# the byte order mark U+FEFF and the tag characters U+E0000-U+E007F. (U+200C/U+200D, which
# some scripts and emoji need, are allowed.) And no run of more than 3 combining marks
# (`COMBINING_RUN`), which stack over the lines around them.
FORBIDDEN_TEXT_CLASS = (
    "\\x00-\\x1f\\x7f-\\x9f\\xad\\u061c\\u115f\\u1160\\u180e\\u200b\\u200e\\u200f"
    "\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u2069\\u3164\\ufeff\\uffa0"
    # The tag characters as themselves, not as `\\U000e0000`: that escape is Python's only,
    # while the characters read alike in Python and in ECMA-262 (JSON Schema's) with `u`.
    "\U000e0000-\U000e007f"
)
COMBINING_RUN = "[\\u0300-\\u036f\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f]{4}"
SAFE_TEXT_PATTERN = f"^(?!.*{COMBINING_RUN})[^{FORBIDDEN_TEXT_CLASS}]*" + END
TAG_VALUE_PATTERN = SAFE_TEXT_PATTERN
# An event's time: RFC 3339 (section 5.6) with a "T" and a "Z" or a "+HH:MM"/"-HH:MM" offset
# (the RFC lets both letters be lower case), at most 9 fraction digits (read to the nearest
# microsecond). No "+0000", no space for the "T", no offset-less local time.
TIME_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})" + END
)
# The decimal strings of every body but events (`costcore.money.MAX_INTEGER_DIGITS`, the one
# bound): no exponent, at most 24 digits before the point and 18 after.
_DIGITS = f"[0-9]{{1,{MAX_INTEGER_DIGITS}}}(\\.[0-9]{{1,{MAX_FRACTION_DIGITS}}})?"
DECIMAL_PATTERN = "^" + _DIGITS + END
SIGNED_DECIMAL_PATTERN = "^-?" + _DIGITS + END
QUANTITY_TEXT_PATTERN = JSON_NUMBER_PATTERN.removesuffix("$") + END
MAX_TAGS = 16

ProjectName = Annotated[str, msgspec.Meta(pattern=PROJECT_PATTERN, examples=["llm-7b"])]
EventId = Annotated[str, msgspec.Meta(pattern=EVENT_ID_PATTERN, examples=["job-4242-step-1"])]
Label = Annotated[str, msgspec.Meta(pattern=LABEL_PATTERN)]
TagKey = Annotated[str, msgspec.Meta(pattern=TAG_KEY_PATTERN)]
TagValue = Annotated[str, msgspec.Meta(max_length=256, pattern=TAG_VALUE_PATTERN)]
Quantity = Annotated[
    Decimal,
    msgspec.Meta(
        description=(
            "non-negative decimal, at most 6 decimal places: a JSON number, or a string "
            f"matching {QUANTITY_TEXT_PATTERN} (ASCII; no spaces, '+', '_', '.5' or '5.')"
        ),
        examples=["8"],
    ),
]


# The event model checks lengths while decoding but not the character patterns: msgspec runs
# a regular expression per field per event, which is most of a batch's decoding time. The
# patterns are checked by `identifier_problem` instead, against a cache of values already seen
# valid (projects, experiments, owners and tags repeat across a batch). The descriptions
# carry the patterns into the OpenAPI document.
def _described(pattern: str, max_length: int, **extra: Any) -> msgspec.Meta:
    return msgspec.Meta(max_length=max_length, description=f"matches {pattern}", **extra)


_IdField = Annotated[str, _described(EVENT_ID_PATTERN, 200, examples=["job-4242-step-1"])]
_ProjectField = Annotated[str, _described(PROJECT_PATTERN, 64, examples=["llm-7b"])]
_SkuField = Annotated[str, msgspec.Meta(min_length=1, max_length=128, examples=["gpu.h100.hour"])]
_LabelField = Annotated[str, _described(LABEL_PATTERN, 128)]
_TagsField = Annotated[
    dict[
        Annotated[str, _described(TAG_KEY_PATTERN, 63)],
        Annotated[str, _described(TAG_VALUE_PATTERN, 256)],
    ],
    msgspec.Meta(max_length=MAX_TAGS),
]


# gc=False: events hold no reference cycles, and a batch of them would otherwise keep the
# garbage collector busy while it is decoded.
class EventIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """One usage event. `id` is the idempotency key within the project."""

    id: _IdField
    time: Annotated[
        datetime, msgspec.Meta(tz=True, description=f"RFC 3339, matches {TIME_PATTERN}")
    ]
    project: _ProjectField
    sku: _SkuField
    quantity: Quantity
    stage: Stage = "other"
    experiment: _LabelField = ""
    owner: _LabelField = ""
    tags: _TagsField = {}


class LabelledEvent(Protocol):
    """An event's scope labels: what budgets and the log read besides its id and times."""

    @property
    def stage(self) -> str: ...
    @property
    def experiment(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def tags(self) -> dict[str, str]: ...


class AcceptedEvent(LabelledEvent, Protocol):
    """What the ledger reads of an event once it is checked: `EventIn` and `WireEvent` both
    have it (the time and quantity are read into columns by then: epoch µs, micro-units)."""

    @property
    def id(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def sku(self) -> str: ...


class WireEvent(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """An event as it arrives, for the ingest fast path (`decode_wire_batch`): the fields and
    limits of `EventIn`, but the time left as the text sent and the quantity as the string or
    integer sent. Making a datetime and a Decimal per event was about half of decoding a
    batch; `costcore.scan_wire_events` reads both in C instead, and any event it cannot read
    sends the batch down the `EventIn` path. Not part of the API's schema."""

    id: _IdField
    time: str
    project: _ProjectField
    sku: _SkuField
    quantity: str | int
    stage: Stage = "other"
    experiment: _LabelField = ""
    owner: _LabelField = ""
    tags: _TagsField = {}

    def event(self) -> EventIn:
        """The same event read as `EventIn` (for a rejection's message and dead letter)."""
        return msgspec.convert(msgspec.to_builtins(self), EventIn)


_ID_RE = re.compile(EVENT_ID_PATTERN)
_PROJECT_RE = re.compile(PROJECT_PATTERN)
_LABEL_RE = re.compile(LABEL_PATTERN)
_TAG_KEY_RE = re.compile(TAG_KEY_PATTERN)
_TAG_VALUE_RE = re.compile(TAG_VALUE_PATTERN)
_TIME_RE = re.compile(TIME_PATTERN, re.ASCII)
_VALID: dict[re.Pattern[str], set[str]] = {
    _PROJECT_RE: set(),
    _LABEL_RE: set(),
    _TAG_KEY_RE: set(),
    _TAG_VALUE_RE: set(),
}
_CACHE_LIMIT = 100_000


def _matches(regex: re.Pattern[str], value: str) -> bool:
    seen = _VALID[regex]
    if value in seen:
        return True
    if regex.fullmatch(value) is None:
        return False
    if len(seen) >= _CACHE_LIMIT:
        seen.clear()
    seen.add(value)
    return True


def identifier_problem(event: EventIn) -> tuple[str, str] | None:
    """(field, reason) if an identifier of the event breaks its pattern, else None."""
    if _ID_RE.fullmatch(event.id) is None:
        return "id", f"must match {EVENT_ID_PATTERN}"
    if not _matches(_PROJECT_RE, event.project):
        return "project", f"must match {PROJECT_PATTERN}"
    if event.experiment and not _matches(_LABEL_RE, event.experiment):
        return "experiment", f"must match {LABEL_PATTERN}"
    if event.owner and not _matches(_LABEL_RE, event.owner):
        return "owner", f"must match {LABEL_PATTERN}"
    for key, value in event.tags.items():
        if not _matches(_TAG_KEY_RE, key):
            return "tags", f"tag key {key[:70]!r} must match {TAG_KEY_PATTERN}"
        if not _matches(_TAG_VALUE_RE, value):
            return (
                f"tags.{key}",
                "tag values " + UNSAFE_TEXT_REASON,
            )
    return None


_SAFE_TEXT_RE = re.compile(SAFE_TEXT_PATTERN)
UNSAFE_TEXT_REASON = (
    "may not hold control characters (C0, C1, DEL), line or paragraph separators, "
    "bidirectional formatting characters, invisible or blank characters (zero-width, fillers, "
    "soft hyphen, tag characters) or more than 3 stacked combining marks"
)


def safe_text(text: str) -> bool:
    """Whether a label or free text holds none of the characters `SAFE_TEXT_PATTERN` refuses
    (for fields checked after decoding: the schema of stored records may not refuse them)."""
    return _SAFE_TEXT_RE.fullmatch(text) is not None


def time_text_problem(text: str) -> str | None:
    """Why an event's time as sent is not in the accepted form, or None when it is."""
    if len(text) > 64 or _TIME_RE.fullmatch(text) is None:
        return (
            f"must be an RFC 3339 date-time with 'Z' or a '+HH:MM' offset, matching {TIME_PATTERN}"
        )
    return None


def time_window_problem(
    when: datetime, now: datetime, window_days: int, future_skew_hours: int
) -> str | None:
    """Why a time (of an event, of an evaluation result) is outside the range the API accepts
    (`TRAINLEDGER_DEDUP_WINDOW_DAYS` back, `TRAINLEDGER_MAX_FUTURE_SKEW_HOURS` ahead), or None.
    The reasons start with "time" (the ingest says "event time")."""
    if when < now - timedelta(days=window_days):
        return f"time is older than the deduplication window ({window_days} days)"
    if when > now + timedelta(hours=future_skew_hours):
        return "time is too far in the future"
    return None


class SentTexts(msgspec.Struct):
    """The two fields of an event whose text `EventIn` does not keep (it holds a datetime and
    a Decimal, which msgspec reads from more spellings than the API accepts)."""

    time: Any = None
    quantity: Any = None


def text_problem(texts: SentTexts) -> tuple[str, str] | None:
    """(field, reason) if the time or quantity of an event as sent breaks its grammar."""
    if isinstance(texts.time, str):
        problem = time_text_problem(texts.time)
        if problem is not None:
            return "time", problem
    if isinstance(texts.quantity, str):
        problem = decimal_text_problem(texts.quantity, json_number=True)
        if problem is not None:
            return "quantity", f"quantity {problem}"
    return None


def valid_project(name: str) -> bool:
    return _matches(_PROJECT_RE, name)


def known_valid() -> tuple[set[str], set[str], set[str], set[str]]:
    """The values already checked valid: projects, labels (experiment, owner), tag keys, tag
    values. `costcore.scan_events` passes events whose values are all in them."""
    return _VALID[_PROJECT_RE], _VALID[_LABEL_RE], _VALID[_TAG_KEY_RE], _VALID[_TAG_VALUE_RE]
