# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled `scan_events`: the contract is `costcore.columns` (see its docstring); the plain
Python reference there is checked equal to this by tests/unit/costcore/test_columns.py."""

from array import array

from cpython.datetime cimport (
    datetime,
    datetime_day,
    datetime_hour,
    datetime_microsecond,
    datetime_minute,
    datetime_month,
    datetime_second,
    datetime_tzinfo,
    datetime_year,
    import_datetime,
    timedelta,
    timedelta_days,
    timedelta_microseconds,
    timedelta_seconds,
)
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr

from costcore.columns import CodedGroups, ScanResult

import_datetime()

from datetime import timezone

cdef object _UTC = timezone.utc

cdef extern from "Python.h":
    int PyUnicode_IS_ASCII(object)
    const unsigned char* _ascii_data "PyUnicode_1BYTE_DATA"(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)

cdef uint32_t _crc_table[256]
cdef uint8_t _alnum[128]
cdef uint8_t _id_rest[128]


cdef void _init_tables():
    cdef uint32_t c
    cdef int n, k
    for n in range(256):
        c = <uint32_t>n
        for k in range(8):
            if c & 1:
                c = 0xEDB88320 ^ (c >> 1)
            else:
                c = c >> 1
        _crc_table[n] = c
    for n in range(128):
        _alnum[n] = 0
        _id_rest[n] = 0
    for ch in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789":
        _alnum[ch] = 1
        _id_rest[ch] = 1
    for ch in b"_.:/@+=-":
        _id_rest[ch] = 1


_init_tables()


cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d) noexcept nogil:
    # Howard Hinnant's algorithm: days since 1970-01-01 of a proleptic Gregorian date.
    cdef int64_t era, yoe, doy, doe
    if m <= 2:
        y -= 1
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef inline int64_t _floor_div(int64_t a, int64_t b):
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


# The fold's and the queries' column kernels (dictionary codes, `CodedSums`, rate rows,
# pairs, positions): a part of this module, kept in its own file.
include "_grouping.pxi"


cdef inline int _digits(const unsigned char* s, Py_ssize_t at, int count) noexcept nogil:
    """The decimal number of `count` digits at s[at], or -1 if one is not a digit."""
    cdef int value = 0, k
    cdef unsigned char c
    for k in range(count):
        c = s[at + k]
        if c < 48 or c > 57:
            return -1
        value = value * 10 + (c - 48)
    return value


cdef inline int _days_in_month(int64_t y, int m) noexcept nogil:
    if m == 2:
        return 29 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 28
    return 30 if m in (4, 6, 9, 11) else 31


cdef bint _parse_time(const unsigned char* s, Py_ssize_t n, int64_t* out) noexcept nogil:
    """`YYYY-MM-DDTHH:MM:SS[.f]` then `Z` or `±HH:MM` (a fraction of 1 to 6 digits), the
    one form the fast pass reads: µs since the epoch into `out`, or False for anything else
    (the caller then lets msgspec read the event, which accepts more)."""
    cdef int year, month, day, hour, minute, second, oh, om, k, digit
    cdef int64_t micro = 0, scale = 100000, offset = 0
    cdef Py_ssize_t pos = 19
    if n < 20 or s[4] != 45 or s[7] != 45 or s[10] != 84 or s[13] != 58 or s[16] != 58:
        return False
    year = _digits(s, 0, 4)
    month = _digits(s, 5, 2)
    day = _digits(s, 8, 2)
    hour = _digits(s, 11, 2)
    minute = _digits(s, 14, 2)
    second = _digits(s, 17, 2)
    if year < 1 or month < 1 or month > 12 or day < 1 or hour < 0 or hour > 23:
        return False
    if minute < 0 or minute > 59 or second < 0 or second > 59:
        return False
    if day > _days_in_month(year, month):
        return False
    if s[pos] == 46:  # "."
        pos += 1
        for k in range(7):
            if pos >= n or s[pos] < 48 or s[pos] > 57:
                break
            if k == 6:
                return False  # more than µs: msgspec rounds; leave it to msgspec
            digit = s[pos] - 48
            micro += digit * scale
            scale //= 10
            pos += 1
        if scale == 100000:
            return False  # a "." with no digit
    if pos == n - 1 and s[pos] == 90:  # "Z"
        offset = 0
    elif pos == n - 6 and (s[pos] == 43 or s[pos] == 45) and s[pos + 3] == 58:
        oh = _digits(s, pos + 1, 2)
        om = _digits(s, pos + 4, 2)
        if oh < 0 or oh > 23 or om < 0 or om > 59:
            return False
        offset = (<int64_t>oh * 3600 + om * 60) * 1000000
        if s[pos] == 45:
            offset = -offset
    else:
        return False
    out[0] = ((_days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second)
              * 1000000 + micro - offset)
    return True


def parse_time(text):
    """Compiled `costcore.columns.parse_time_reference` (same contract)."""
    cdef int64_t us = 0
    if type(text) is not str or not PyUnicode_IS_ASCII(text):
        return None
    if not _parse_time(_ascii_data(text), PyUnicode_GET_LENGTH(text), &us):
        return None
    return us


cdef inline bint _id_shard(object event_id, uint32_t* crc_out):
    """Whether the id passes the id pattern; its CRC-32 into `crc_out`."""
    cdef Py_ssize_t length, k
    cdef const unsigned char* data
    cdef uint32_t crc = 0xFFFFFFFF
    cdef uint8_t ch
    if type(event_id) is not str or not PyUnicode_IS_ASCII(event_id):
        return False
    length = PyUnicode_GET_LENGTH(event_id)
    if length == 0 or length > 200:
        return False
    data = _ascii_data(event_id)
    if not _alnum[<uint8_t>data[0]]:
        return False
    for k in range(length):
        ch = <uint8_t>data[k]
        if not _id_rest[ch]:
            return False
        crc = _crc_table[(crc ^ ch) & 0xFF] ^ (crc >> 8)
    crc_out[0] = crc ^ 0xFFFFFFFF
    return True


def scan_events(
    events,
    quantities,
    int64_t min_epoch_us,
    int64_t max_epoch_us,
    long shards,
    projects,
    labels,
    tag_keys,
    tag_values,
):
    """Compiled `costcore.columns.scan_events_reference` (same contract)."""
    return _scan(events, quantities, min_epoch_us, max_epoch_us, shards, projects, labels,
                 tag_keys, tag_values, False)


def scan_wire_events(
    events,
    quantities,
    int64_t min_epoch_us,
    int64_t max_epoch_us,
    long shards,
    projects,
    labels,
    tag_keys,
    tag_values,
):
    """Compiled `costcore.columns.scan_wire_events_reference` (same contract)."""
    return _scan(events, quantities, min_epoch_us, max_epoch_us, shards, projects, labels,
                 tag_keys, tag_values, True)


cdef inline bint _event_us(object t, bint wire, int64_t* us):
    """An event's time as µs since the epoch into `us`: a `wire` event's text in the one
    form `_parse_time` reads, the others' aware datetime; False for anything else."""
    cdef object tz, off
    if wire:
        if type(t) is not str or not PyUnicode_IS_ASCII(t):
            return False
        return _parse_time(_ascii_data(t), PyUnicode_GET_LENGTH(t), us)
    if not isinstance(t, datetime):
        return False
    tz = datetime_tzinfo(t)
    if tz is None:
        return False
    us[0] = ((_days_from_civil(datetime_year(t), datetime_month(t), datetime_day(t)) * 86400
              + datetime_hour(t) * 3600 + datetime_minute(t) * 60 + datetime_second(t))
             * 1000000 + datetime_microsecond(t))
    if tz is not _UTC:
        off = t.utcoffset()
        if off is None:
            return False
        us[0] -= ((<int64_t>timedelta_days(off) * 86400 + timedelta_seconds(off)) * 1000000
                  + timedelta_microseconds(off))
    return True


cdef object _scan(
    events,
    quantities,
    int64_t min_epoch_us,
    int64_t max_epoch_us,
    long shards,
    projects,
    labels,
    tag_keys,
    tag_values,
    bint wire,
):
    """Both scans: `wire` events carry their time as text and their quantity as sent (a
    str or an int, looked up as it is); the others an aware datetime and a Decimal (looked
    up by its str())."""
    if shards <= 0:
        raise ValueError(f"shards must be > 0, got {shards}")
    cdef Py_ssize_t n = len(events)
    status = bytearray(n)
    epoch_arr = array("q", bytes(8 * n))
    day_arr = array("q", bytes(8 * n))
    quantity_arr = array("q", bytes(8 * n))
    shard_arr = array("q", bytes(8 * n))
    cdef unsigned char[::1] st = status
    cdef int64_t[::1] epoch_v = epoch_arr
    cdef int64_t[::1] day_v = day_arr
    cdef int64_t[::1] quantity_v = quantity_arr
    cdef int64_t[::1] shard_v = shard_arr
    cdef Py_ssize_t i
    cdef Py_ssize_t passed = 0
    cdef uint32_t crc = 0
    cdef int64_t us = 0
    cdef bint ok
    cdef object ev, q, text, tags
    for i in range(n):
        st[i] = 1
        ev = events[i]
        if ev is None or not _id_shard(ev.id, &crc):
            continue
        if ev.project not in projects:
            continue
        text = ev.experiment
        if text and text not in labels:
            continue
        text = ev.owner
        if text and text not in labels:
            continue
        tags = ev.tags
        if tags:
            ok = True
            for key, value in tags.items():
                if key not in tag_keys or value not in tag_values:
                    ok = False
                    break
            if not ok:
                continue
        q = quantities.get(ev.quantity if wire else str(ev.quantity))
        if q is None:
            continue
        if not _event_us(ev.time, wire, &us):
            continue
        if us < min_epoch_us or us > max_epoch_us:
            continue
        st[i] = 0
        epoch_v[i] = us
        day_v[i] = _floor_div(us, 86400000000)
        quantity_v[i] = q
        shard_v[i] = crc % <uint32_t>shards
        passed += 1
    return ScanResult(status, epoch_arr, day_arr, quantity_arr, shard_arr, passed)


cdef inline bint _json_space(unsigned char c) noexcept nogil:
    return c == 32 or c == 9 or c == 10 or c == 13


def json_array_length(const unsigned char[::1] body, Py_ssize_t limit):
    """Compiled `costcore.columns.json_array_length_reference` (same contract). A string is
    crossed with `memchr` to its next quote (escaped when an odd run of backslashes precedes
    it): most of an event's bytes are in strings."""
    cdef Py_ssize_t n = body.shape[0], i = 0, depth = 1, count = 0, b
    cdef bint in_item = False
    cdef unsigned char c
    cdef const unsigned char* base
    cdef const unsigned char* found
    if n == 0:
        return -1
    base = &body[0]
    with nogil:
        while i < n and _json_space(base[i]):
            i += 1
        if i == n or base[i] != 91:  # not "["
            count = -1
        else:
            i += 1
            while i < n:
                c = base[i]
                if c == 34:  # a string: to its closing quote
                    if depth == 1 and not in_item:
                        in_item = True
                        count += 1
                        if count > limit:
                            break
                    b = i
                    while True:
                        found = <const unsigned char*>memchr(base + b + 1, 34, n - b - 1)
                        if found == NULL:
                            i = n
                            break
                        b = found - base
                        i = b - 1
                        while base[i] == 92:
                            i -= 1
                        if (b - 1 - i) % 2 == 0:  # not escaped
                            i = b
                            break
                    if i >= n:
                        break
                elif c == 91 or c == 123:  # "[" "{"
                    if depth == 1 and not in_item:
                        in_item = True
                        count += 1
                        if count > limit:
                            break
                    depth += 1
                elif c == 93 or c == 125:  # "]" "}"
                    depth -= 1
                    if depth == 0:
                        break
                elif depth == 1:
                    if c == 44:  # ","
                        in_item = False
                    elif not in_item and not _json_space(c):
                        in_item = True
                        count += 1
                        if count > limit:
                            break
                i += 1
    return count


def text_line_count(const unsigned char[::1] body, Py_ssize_t limit):
    """Compiled `costcore.columns.text_line_count_reference` (same contract)."""
    cdef Py_ssize_t n = body.shape[0], i = 0, count = 0
    cdef bint blank = True
    cdef unsigned char c
    with nogil:
        while i < n:
            c = body[i]
            if c == 10:
                blank = True
            elif blank and not (c == 32 or (9 <= c <= 13)):
                blank = False
                count += 1
                if count > limit:
                    break
            i += 1
    return count
