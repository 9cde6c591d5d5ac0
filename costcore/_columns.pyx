# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled `scan_events`: the contract is `costcore.columns` (see its docstring); the plain
Python reference there is checked equal to this by tests/test_costcore.py."""

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
from libc.stdint cimport int64_t, uint8_t, uint32_t

from costcore.columns import GroupResult, ScanResult

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


cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d):
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
    cdef Py_ssize_t i, k, length
    cdef Py_ssize_t passed = 0
    cdef const unsigned char* data
    cdef uint32_t crc
    cdef uint8_t ch
    cdef int64_t us, days
    cdef bint ok
    cdef object ev, q, t, tz, off, event_id, text
    for i in range(n):
        st[i] = 1
        ev = events[i]
        if ev is None:
            continue
        event_id = ev.id
        if type(event_id) is not str or not PyUnicode_IS_ASCII(event_id):
            continue
        length = PyUnicode_GET_LENGTH(event_id)
        if length == 0 or length > 200:
            continue
        data = _ascii_data(event_id)
        if not _alnum[<uint8_t>data[0]]:
            continue
        ok = True
        crc = 0xFFFFFFFF
        for k in range(length):
            ch = <uint8_t>data[k]
            if not _id_rest[ch]:
                ok = False
                break
            crc = _crc_table[(crc ^ ch) & 0xFF] ^ (crc >> 8)
        if not ok:
            continue
        crc = crc ^ 0xFFFFFFFF
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
            for key, value in tags.items():
                if key not in tag_keys or value not in tag_values:
                    ok = False
                    break
            if not ok:
                continue
        q = quantities.get(str(ev.quantity))
        if q is None:
            continue
        t = ev.time
        if not isinstance(t, datetime):
            continue
        tz = datetime_tzinfo(t)
        if tz is None:
            continue
        us = ((_days_from_civil(datetime_year(t), datetime_month(t), datetime_day(t)) * 86400
               + datetime_hour(t) * 3600 + datetime_minute(t) * 60 + datetime_second(t))
              * 1000000 + datetime_microsecond(t))
        if tz is not _UTC:
            off = t.utcoffset()
            if off is None:
                continue
            us -= ((<int64_t>timedelta_days(off) * 86400 + timedelta_seconds(off)) * 1000000
                   + timedelta_microseconds(off))
        if us < min_epoch_us or us > max_epoch_us:
            continue
        st[i] = 0
        epoch_v[i] = us
        day_v[i] = _floor_div(us, 86400000000)
        quantity_v[i] = q
        shard_v[i] = crc % <uint32_t>shards
        passed += 1
    return ScanResult(status, epoch_arr, day_arr, quantity_arr, shard_arr, passed)


def group_events(events, rows, day, epoch_us, tag_text):
    """Compiled `costcore.columns.group_events_reference` (same contract)."""
    cdef Py_ssize_t n = len(events)
    if len(rows) != n or len(day) != n or len(epoch_us) != n:
        raise ValueError("events, rows, day and epoch_us must have the same length")
    group_arr = array("i", bytes(4 * n))
    hour_arr = array("i", bytes(4 * n))
    cdef int[::1] group_v = group_arr
    cdef int[::1] hour_v = hour_arr
    cdef dict key_index = {}
    cdef dict hour_index = {}
    cdef list keys = []
    cdef list hour_keys = []
    cdef Py_ssize_t i
    cdef object ev, tags, key, hour_key, found, row, stage
    cdef int64_t us
    for i in range(n):
        ev = events[i]
        row = rows[i]
        stage = ev.stage
        tags = ev.tags
        key = (day[i], row, stage, ev.experiment, ev.owner, tag_text(tags) if tags else "")
        found = key_index.get(key)
        if found is None:
            found = len(keys)
            key_index[key] = found
            keys.append(key)
        group_v[i] = found
        us = epoch_us[i]
        hour_key = (_floor_div(us, 3600000000), row, stage)
        found = hour_index.get(hour_key)
        if found is None:
            found = len(hour_keys)
            hour_index[hour_key] = found
            hour_keys.append(hour_key)
        hour_v[i] = found
    return GroupResult(group_arr, keys, hour_arr, hour_keys)
