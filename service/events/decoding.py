"""Usage events on the wire: the content types, the body errors, and strict decoding.

A batch is decoded in one msgspec call (the fast path). Only when that fails are
the items decoded one by one, so a single malformed event is rejected with its
index and reason instead of failing the events around it.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import msgpack as msgpack_pairs  # its unpacker hands each map's pairs over
import msgspec

from ..errors import Invalid, Problem
from .model import EventIn, SentTexts, WireEvent, text_problem


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


class UnsupportedContentType(Problem, ValueError):
    """A body of a media type the ingest does not read (415); on a route that reads one
    format (`route_media_type`), a body of any other."""

    status = 415
    title = "Unsupported media type"
    kind = "unsupported-media-type"

    def __init__(self, media: str, accepted: tuple[str, ...] = CONTENT_TYPES) -> None:
        super().__init__(media)
        self.accepted = accepted

    def problem_detail(self) -> str:
        return f"{self} is not accepted; use one of {', '.join(self.accepted)}"


class TooManyEvents(Invalid, ValueError):
    """The body holds more events than a batch may: found by counting them, before any is
    decoded (`count_events`)."""

    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__("$", f"a batch holds at most {limit} events")
        self.args = (self.reason,)
        self.limit = limit


class MalformedBody(Invalid, ValueError):
    """The body as a whole cannot be read (not a batch of anything)."""

    status = 400

    def __init__(self, reason: str, field: str = "$") -> None:
        super().__init__(field, reason)
        self.args = (reason,)


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
_json_texts = msgspec.json.Decoder(list[SentTexts] | SentTexts)
_msgpack_texts = msgspec.msgpack.Decoder(list[SentTexts] | SentTexts)
# `data` is read untyped: its JSON numbers as Decimals (their exact text), never as floats
# (a float would round a 20-digit quantity to one the event decoder then accepts).
_cloud_one = msgspec.json.Decoder(CloudEvent, float_hook=Decimal)
_cloud_batch = msgspec.json.Decoder(list[CloudEvent], float_hook=Decimal)


_NONBLANK_LINE = re.compile(rb"\S[^\n]*")


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _no_repeats(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    held = dict(pairs)
    if len(held) != len(pairs):
        seen: set[Any] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)
    return held


def repeated_key(body: bytes, msgpack: bool = False) -> str | None:
    """A key some object of the JSON (or msgpack) body names twice (`{"quantity": "1",
    "quantity": "1000000"}`), or None. Decoders keep the last silently, so such a body means
    two things; every body is refused for it. Read by the stdlib's JSON decoder and msgpack's
    unpacker, which hand each object's pairs over (msgspec's give only the dict); a body they
    cannot read is left to the decoder that answers for it."""
    if msgpack:
        return _repeated_msgpack_key(body)
    if body.count(b'"') < 4:  # no object with two keys
        return None
    try:
        json.loads(body, object_pairs_hook=_no_repeats)
    except _Repeated as repeated:
        return repeated.key[:100]
    except (ValueError, RecursionError):
        return None
    return None


def _repeated_msgpack_key(body: bytes) -> str | None:
    try:
        msgpack_pairs.unpackb(
            body, object_pairs_hook=_no_repeats, use_list=False, strict_map_key=False
        )
    except _Repeated as repeated:
        return str(repeated.key)[:100]
    except Exception:  # malformed: the decoder that answers for it says why
        return None
    return None


# A quote then white space: a key may end there (`"a" : 1`), so `":` does not count every key.
_QUOTE_SPACE = re.compile(rb'"\s')


def _may_repeat_keys(body: bytes, events: list[WireEvent]) -> bool:
    """Whether a JSON batch read as `events` may name a key twice in one object (then
    `repeated_key` reads it to know). Cheap, and never wrong the other way: every key ends in
    `":` (unless white space follows its quote, then it may), so the count of `":` is at least
    the keys sent, and the decoded events hold at least the keys they show (the five required,
    each field not at its default, each tag). A body with no repeat sends exactly those, unless
    it sends a default (`"stage":"other"`) or `":` inside a string: read then too."""
    if _QUOTE_SPACE.search(body) is not None:
        return True
    shown = 0
    for ev in events:
        shown += 5 + (ev.stage != "other") + (ev.experiment != "") + (ev.owner != "")
        if ev.tags:
            shown += 1 + len(ev.tags)
    return body.count(b'":') != shown


def media_type_of(content_type: str | None) -> str:
    media = (content_type or JSON).split(";", 1)[0].strip().lower()
    if media in ("application/vnd.msgpack", "application/x-msgpack"):
        return MSGPACK
    if media in ("application/jsonl", "application/x-jsonlines"):
        return NDJSON
    if media not in CONTENT_TYPES:
        raise UnsupportedContentType(media)
    return media


def route_media_type(content_type: str | None, route_media: str) -> str:
    """The format of a body posted to a route that reads only `route_media` (one of
    `CONTENT_TYPES`, `POST /v1/events/ndjson` for instance): that type, sent under its name,
    one of its aliases (`media_type_of`) or no content type at all. A body sent as any other
    type is a 415 (UnsupportedContentType) naming the route's: the path says what the body
    is, so a body that says otherwise was sent to the wrong route."""
    if content_type is None:
        return route_media
    try:
        media = media_type_of(content_type)
    except UnsupportedContentType as exc:
        raise UnsupportedContentType(str(exc), (route_media,)) from None
    if media != route_media:
        raise UnsupportedContentType(media, (route_media,))
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


def _refused_text(index: int, event: EventIn, texts: SentTexts, batch: bool) -> DecodedItem | None:
    """The item refused, when the event's time or quantity as sent breaks its grammar."""
    problem = text_problem(texts)
    if problem is None:
        return None
    field, reason = problem
    raw = msgspec.to_builtins(event)
    raw["time"], raw["quantity"] = texts.time, texts.quantity  # as sent
    return DecodedItem(index, None, reason, _item_path(index, "$." + field, batch), raw)


def _decode_items(
    raws: list[msgspec.Raw], msgpack: bool, batch: bool, repeats: bool = False
) -> list[DecodedItem]:
    """Each raw item decoded on its own; with `repeats`, an item that names a key twice in
    one object is rejected for it (JSON: decoders keep the last value silently)."""
    one = _msgpack_one if msgpack else _json_one
    texts_of = _msgpack_texts if msgpack else _json_texts
    items = []
    for i, raw in enumerate(raws):
        key = repeated_key(bytes(raw), msgpack) if repeats else None
        if key is not None:
            reason = f"the key {key!r} is given twice in one object"
            path = _item_path(i, "$." + key, batch)
            items.append(DecodedItem(i, None, reason, path, _loose(bytes(raw), msgpack)))
            continue
        try:
            event = one.decode(raw)
            texts = texts_of.decode(raw)
            assert isinstance(texts, SentTexts)  # `raw` decoded as one event
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
        events = (_msgpack_wire_batch if media_type == MSGPACK else _json_wire_batch).decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    if media_type == JSON and _may_repeat_keys(body, events) and repeated_key(body) is not None:
        return None  # `decode_events` rejects the events that repeat a key
    if media_type == MSGPACK and repeated_key(body, msgpack=True) is not None:
        return None  # `decode_events` rejects the events that repeat a key
    return events


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
        raws = [msgspec.Raw(line) for line in lines]
        return _decode_items(raws, msgpack=False, batch=True, repeats=True), True
    msgpack = media_type == MSGPACK
    repeats = repeated_key(body, msgpack) is not None
    fast = _msgpack_batch if msgpack else _json_batch
    try:
        if repeats:  # each item is read on its own, and those that repeat a key rejected
            raise msgspec.ValidationError
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
        assert isinstance(texts, SentTexts)
        return [_refused_text(0, decoded, texts, False) or DecodedItem(0, decoded)], False
    try:
        raws = (_msgpack_raw_batch if msgpack else _json_raw_batch).decode(body)
    except msgspec.ValidationError:  # one document that is not an array: a single item
        return _decode_items([msgspec.Raw(body)], msgpack, batch=False, repeats=repeats), False
    except msgspec.DecodeError as exc:  # malformed past the point the typed decoder stopped
        raise MalformedBody(f"body is not valid {'msgpack' if msgpack else 'JSON'}: {exc}") from exc
    return _decode_items(raws, msgpack, batch=True, repeats=repeats), True


def _decode_cloudevents(body: bytes, batch: bool) -> tuple[list[DecodedItem], bool]:
    """Map CloudEvents onto usage events.

    Mapping: `id` -> id, `time` -> time, `subject` -> project (unless `data.project`
    is set), and the usage fields (`sku`, `quantity`, `stage`, `experiment`, `owner`,
    `tags`) from `data`. `source` and `type` are kept as tags `ce_source`/`ce_type`.
    """
    key = repeated_key(body)
    if key is not None:  # an envelope's or its data's: the mapping below would lose which
        raise MalformedBody(f"the key {key!r} is given twice in one object", key)
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
