"""Usage events on the wire: the model, the content types, and strict decoding.

A batch is decoded in one msgspec call (the fast path). Only when that fails are
the items decoded one by one, so a single malformed event is rejected with its
index and reason instead of failing the events around it.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal, Protocol

import msgspec

from costcore.money import JSON_NUMBER_PATTERN, decimal_text_problem

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
# Characters no label may hold: C0 and C1 controls (U+0085 NEL among them), DEL, the line
# and paragraph separators U+2028/U+2029, and the bidirectional formatting characters
# (U+061C, U+200E/U+200F, U+202A-U+202E, U+2066-U+2069) that reorder what a reader sees.
FORBIDDEN_TEXT_CLASS = "\\x00-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u2028-\\u202e\\u2066-\\u2069"
SAFE_TEXT_PATTERN = f"^[^{FORBIDDEN_TEXT_CLASS}]*" + END
TAG_VALUE_PATTERN = SAFE_TEXT_PATTERN
# An event's time: RFC 3339 (section 5.6) with a "T" and a "Z" or a "+HH:MM"/"-HH:MM" offset
# (the RFC lets both letters be lower case), at most 9 fraction digits (read to the nearest
# microsecond). No "+0000", no space for the "T", no offset-less local time.
TIME_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})" + END
)
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
                "tag values may not hold control characters (C0, C1, DEL), line or "
                "paragraph separators or bidirectional formatting characters",
            )
    return None


_SAFE_TEXT_RE = re.compile(SAFE_TEXT_PATTERN)
UNSAFE_TEXT_REASON = (
    "may not hold control characters (C0, C1, DEL), line or paragraph separators or "
    "bidirectional formatting characters"
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


class _Texts(msgspec.Struct):
    """The two fields of an event whose text `EventIn` does not keep (it holds a datetime and
    a Decimal, which msgspec reads from more spellings than the API accepts)."""

    time: Any = None
    quantity: Any = None


def text_problem(texts: _Texts) -> tuple[str, str] | None:
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


class CloudEvent(msgspec.Struct, omit_defaults=True):
    """CloudEvents 1.0 envelope (structured mode). `data` carries the usage fields."""

    specversion: str
    id: str
    source: str
    type: str
    time: str | None = None
    subject: str | None = None
    datacontenttype: str | None = None
    data: dict[str, Any] | None = None


JSON = "application/json"
NDJSON = "application/x-ndjson"
MSGPACK = "application/msgpack"
CLOUDEVENT = "application/cloudevents+json"
CLOUDEVENT_BATCH = "application/cloudevents-batch+json"
CONTENT_TYPES = (JSON, NDJSON, MSGPACK, CLOUDEVENT, CLOUDEVENT_BATCH)


class UnsupportedContentType(ValueError):
    pass


class TooManyEvents(ValueError):
    """The body holds more events than a batch may: found by counting them, before any is
    decoded (`count_events`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a batch holds at most {limit} events")
        self.limit = limit


class MalformedBody(ValueError):
    """The body as a whole cannot be read (not a batch of anything)."""

    def __init__(self, reason: str, field: str = "$") -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


# A struct, not a dataclass: one is made per event of every batch, and msgspec builds it in C
# (a dataclass __init__ was 9 % of the worker's time on 5,000-event batches). gc=False: it
# refers only to decoded data, which cannot refer back to it.
class DecodedItem(msgspec.Struct, gc=False):
    index: int
    event: EventIn | None
    # For items that failed to decode: why, where, and whatever could be read of them.
    reason: str = ""
    field: str = ""
    raw: Any = None


_json_batch = msgspec.json.Decoder(EventIn | list[EventIn])
_json_one = msgspec.json.Decoder(EventIn)
_json_raw_batch = msgspec.json.Decoder(list[msgspec.Raw])
_msgpack_batch = msgspec.msgpack.Decoder(EventIn | list[EventIn])
_msgpack_one = msgspec.msgpack.Decoder(EventIn)
_msgpack_raw_batch = msgspec.msgpack.Decoder(list[msgspec.Raw])
_json_texts = msgspec.json.Decoder(list[_Texts] | _Texts)
_msgpack_texts = msgspec.msgpack.Decoder(list[_Texts] | _Texts)
# `data` is read untyped: its JSON numbers as Decimals (their exact text), never as floats
# (a float would round a 20-digit quantity to one the event decoder then accepts).
_cloud_one = msgspec.json.Decoder(CloudEvent, float_hook=Decimal)
_cloud_batch = msgspec.json.Decoder(list[CloudEvent], float_hook=Decimal)


_NONBLANK_LINE = re.compile(rb"\S[^\n]*")


def media_type_of(content_type: str | None) -> str:
    media = (content_type or JSON).split(";", 1)[0].strip().lower()
    if media in ("application/vnd.msgpack", "application/x-msgpack"):
        return MSGPACK
    if media in ("application/jsonl", "application/x-jsonlines"):
        return NDJSON
    if media not in CONTENT_TYPES:
        raise UnsupportedContentType(media)
    return media


def _split_path(message: str) -> tuple[str, str]:
    """msgspec says "Expected `int`, got `str` - at `$[3].quantity`": split reason and path."""
    reason, sep, where = message.rpartition(" - at `")
    if not sep:
        return message, "$"
    return reason, where.rstrip("`")


def _item_path(index: int, path: str, batch: bool) -> str:
    if not batch:
        return path
    return "$[" + str(index) + "]" + path[1:] if path.startswith("$") else path


def _loose(raw: bytes, msgpack: bool) -> Any:
    try:
        return msgspec.msgpack.decode(raw) if msgpack else msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _refused_text(index: int, event: EventIn, texts: _Texts, batch: bool) -> DecodedItem | None:
    """The item refused, when the event's time or quantity as sent breaks its grammar."""
    problem = text_problem(texts)
    if problem is None:
        return None
    field, reason = problem
    raw = msgspec.to_builtins(event)
    raw["time"], raw["quantity"] = texts.time, texts.quantity  # as sent
    return DecodedItem(index, None, reason, _item_path(index, "$." + field, batch), raw)


def _decode_items(raws: list[msgspec.Raw], msgpack: bool, batch: bool) -> list[DecodedItem]:
    one = _msgpack_one if msgpack else _json_one
    texts_of = _msgpack_texts if msgpack else _json_texts
    items = []
    for i, raw in enumerate(raws):
        try:
            event = one.decode(raw)
            texts = texts_of.decode(raw)
            assert isinstance(texts, _Texts)  # `raw` decoded as one event
            items.append(_refused_text(i, event, texts, batch) or DecodedItem(i, event))
        except msgspec.ValidationError as exc:
            reason, path = _split_path(str(exc))
            items.append(
                DecodedItem(
                    i, None, reason, _item_path(i, path, batch), _loose(bytes(raw), msgpack)
                )
            )
        except msgspec.DecodeError as exc:  # an NDJSON line that is not JSON at all
            kind = "msgpack" if msgpack else "JSON"
            reason = f"not valid {kind}: {exc}"
            items.append(DecodedItem(i, None, reason, _item_path(i, "$", batch), None))
    return items


_json_wire_batch = msgspec.json.Decoder(list[WireEvent])
_msgpack_wire_batch = msgspec.msgpack.Decoder(list[WireEvent])


def decode_wire_batch(body: bytes, media_type: str) -> list[WireEvent] | None:
    """A JSON or msgpack array of events as `WireEvent`s, or None when the body is anything
    else or one of its events does not read as one (`decode_events` then reads the body and
    says what is wrong where). Used before `decode_events` on the ingest path."""
    if media_type not in (JSON, MSGPACK):
        return None
    try:
        return (_msgpack_wire_batch if media_type == MSGPACK else _json_wire_batch).decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None


def _msgpack_array_length(body: bytes) -> int:
    """The length a msgpack array states in its header; -1 when the body is not an array."""
    if not body:
        return -1
    first = body[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC and len(body) >= 3:
        return int.from_bytes(body[1:3], "big")
    if first == 0xDD and len(body) >= 5:
        return int.from_bytes(body[1:5], "big")
    return -1


# The fewest bytes one event of a batch takes: `{"id":"","time":"","project":"","sku":"a",
# "quantity":0}` and a comma in JSON (msgpack: 36). A JSON body no longer than this times
# the event limit cannot hold too many events, and is decoded without counting them first.
MIN_JSON_EVENT_BYTES = 56


def may_exceed(body: bytes, media_type: str, limit: int) -> bool:
    """Whether a body for `decode_wire_batch` may hold more than `limit` events: its size
    says no for the usual batch (so it is not scanned), else it is counted (`count_events`).
    A msgpack array states its length; NDJSON and CloudEvents are not read there."""
    if media_type == MSGPACK:
        return _msgpack_array_length(body) > limit
    if media_type != JSON or len(body) <= MIN_JSON_EVENT_BYTES * limit:
        return False
    return count_events(body, media_type, limit) > limit


def count_events(body: bytes, media_type: str, limit: int) -> int:
    """The number of events of a body, counted without decoding any (and no further than
    `limit + 1`): the items of a JSON or CloudEvents array (a structural scan in C), the
    non-blank lines of NDJSON, the length a msgpack array states; 1 for a single event."""
    from costcore import json_array_length, text_line_count  # the compiled pass, on use

    if media_type == NDJSON:
        return int(text_line_count(body, limit))
    if media_type == MSGPACK:
        n = min(_msgpack_array_length(body), limit + 1)
    elif media_type == CLOUDEVENT:
        n = -1
    else:
        n = int(json_array_length(body, limit))
    return 1 if n < 0 else n


def decode_events(
    body: bytes, media_type: str, max_events: int | None = None
) -> tuple[list[DecodedItem], bool]:
    """Decode a body into items; returns (items, was_batch). With `max_events`, raises
    `TooManyEvents` for a body of more events, before decoding any of them: the items that do
    not read as events are decoded one at a time, and an array of a million `{}` would
    otherwise cost a million failed decodes before the count is known."""
    if max_events is not None and count_events(body, media_type, max_events) > max_events:
        raise TooManyEvents(max_events)
    try:
        return _decode_events(body, media_type)
    except RecursionError as exc:  # msgspec recurses once per nesting level
        raise MalformedBody("the body is nested too deeply") from exc


def _decode_events(body: bytes, media_type: str) -> tuple[list[DecodedItem], bool]:
    if media_type in (CLOUDEVENT, CLOUDEVENT_BATCH):
        return _decode_cloudevents(body, media_type == CLOUDEVENT_BATCH)
    if media_type == NDJSON:
        # The lines that are not blank (from their first non-blank byte): found by the regex
        # engine, so that a body of millions of blank lines makes no list of them.
        lines = [m.group() for m in _NONBLANK_LINE.finditer(body)]
        return _decode_items([msgspec.Raw(line) for line in lines], msgpack=False, batch=True), True
    msgpack = media_type == MSGPACK
    fast = _msgpack_batch if msgpack else _json_batch
    try:
        decoded = fast.decode(body)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise MalformedBody(f"body is not valid {'msgpack' if msgpack else 'JSON'}: {exc}") from exc
    else:
        # The times and quantities as sent, read again: `EventIn` keeps a datetime and a
        # Decimal, read from more spellings than the API accepts.
        texts = (_msgpack_texts if msgpack else _json_texts).decode(body)
        if isinstance(decoded, list):
            assert isinstance(texts, list) and len(texts) == len(decoded)
            return [
                _refused_text(i, e, t, True) or DecodedItem(i, e)
                for i, (e, t) in enumerate(zip(decoded, texts, strict=True))
            ], True
        assert isinstance(texts, _Texts)
        return [_refused_text(0, decoded, texts, False) or DecodedItem(0, decoded)], False
    try:
        raws = (_msgpack_raw_batch if msgpack else _json_raw_batch).decode(body)
    except msgspec.ValidationError:  # one document that is not an array: a single item
        return _decode_items([msgspec.Raw(body)], msgpack, batch=False), False
    except msgspec.DecodeError as exc:  # malformed past the point the typed decoder stopped
        raise MalformedBody(f"body is not valid {'msgpack' if msgpack else 'JSON'}: {exc}") from exc
    return _decode_items(raws, msgpack, batch=True), True


def _decode_cloudevents(body: bytes, batch: bool) -> tuple[list[DecodedItem], bool]:
    """Map CloudEvents onto usage events.

    Mapping: `id` -> id, `time` -> time, `subject` -> project (unless `data.project`
    is set), and the usage fields (`sku`, `quantity`, `stage`, `experiment`, `owner`,
    `tags`) from `data`. `source` and `type` are kept as tags `ce_source`/`ce_type`.
    """
    try:
        envelopes = _cloud_batch.decode(body) if batch else [_cloud_one.decode(body)]
    except msgspec.ValidationError as exc:
        reason, path = _split_path(str(exc))
        raise MalformedBody(reason, path) from exc
    except msgspec.DecodeError as exc:
        raise MalformedBody(f"body is not valid JSON: {exc}") from exc
    raws = []
    for i, ce in enumerate(envelopes):
        if ce.specversion != "1.0":
            where = f"$[{i}].specversion" if batch else "$.specversion"
            raise MalformedBody(
                f"CloudEvents specversion must be '1.0', got {ce.specversion!r}", where
            )
        fields: dict[str, Any] = dict(ce.data or {})
        fields["id"] = ce.id
        if ce.time is not None:
            fields["time"] = ce.time
        if ce.subject is not None and "project" not in fields:
            fields["project"] = ce.subject
        tags = fields.get("tags") or {}
        if isinstance(tags, dict):  # anything else is left for the event decoder to reject
            tags = dict(tags)
            tags.setdefault("ce_source", ce.source[:256])
            tags.setdefault("ce_type", ce.type[:256])
        fields["tags"] = tags
        raws.append(msgspec.Raw(msgspec.json.encode(fields)))
    return _decode_items(raws, msgpack=False, batch=batch), batch
