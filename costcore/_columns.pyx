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


cdef extern from *:
    """
    static inline int tl_add_overflows(int64_t a, int64_t b, int64_t *out) {
        return __builtin_add_overflow(a, b, out);
    }
    """
    bint tl_add_overflows(int64_t a, int64_t b, int64_t *out)


def dictionary_encode(values):
    """Compiled `costcore.columns.dictionary_encode_reference` (same contract)."""
    cdef Py_ssize_t n = len(values), i
    codes_arr = array("i", bytes(4 * n))
    cdef int[::1] codes = codes_arr
    cdef dict index = {}
    cdef list distinct = []
    cdef object value, found
    for i in range(n):
        value = values[i]
        found = index.get(value)
        if found is None:
            found = len(distinct)
            index[value] = found
            distinct.append(value)
        codes[i] = found
    return distinct, codes_arr


cdef inline int _as_int(object o):
    return o


def group_coded(entries, hour_class):
    """Compiled `costcore.columns.group_coded_reference` (same contract).

    Keys are packed into one integer (a mixed-radix number of the fold's codes and the day
    less the first day) when that fits 62 bits, so a lookup hashes one int, not a tuple.
    """
    cdef Py_ssize_t e, i, n, c, k, h, nk = 0, nh = 0
    cdef int64_t us, cost, qty, day, d0 = 0, d1 = 0, radix, packed
    cdef int64_t radices[5]
    cdef int cs, ce, co, cr, ca
    cdef bint first = True, pack = True
    cdef list keys = [], hour_keys = []
    cdef dict key_index = {}, hour_index = {}
    cdef object key, found, hour_key
    cdef int[::1] hc
    hour_class_arr = array("i", hour_class)
    hc = hour_class_arr
    # Radix of each code column: the size of the fold's code space (largest code + 1).
    for c in range(5):
        radices[c] = 1
    for entry in entries:
        if len(entry.codes) != 5 or len(entry.to_global) != 5:
            raise ValueError("an entry has five code columns and five code maps")
        n = len(entry.epoch_us)
        if (len(entry.cost_nano) != n or len(entry.quantity_micro) != n
                or any(len(column) != n for column in entry.codes)):
            raise ValueError("every column of an entry must have the same length")
        for c in range(5):
            for g in entry.to_global[c]:
                if g + 1 > radices[c]:
                    radices[c] = g + 1
        for us_obj in entry.epoch_us:
            day = _floor_div(us_obj, 86400000000)
            if first or day < d0:
                d0 = day
            if first or day > d1:
                d1 = day
            first = False
    radix = d1 - d0 + 1
    for c in range(5):
        if radix > (1 << 62) // radices[c]:
            pack = False
            break
        radix *= radices[c]

    cap, hcap = 1024, 256
    sums_arr = array("q", bytes(8 * 3 * cap))
    hours_arr = array("q", bytes(8 * hcap))
    cdef int64_t[::1] sums = sums_arr
    cdef int64_t[::1] hsums = hours_arr
    cdef int64_t[::1] grown_v
    cdef int[::1] g_s, g_e, g_o, g_r, g_a
    for entry in entries:
        epoch = entry.epoch_us
        costs = entry.cost_nano
        quantities = entry.quantity_micro
        n = len(epoch)
        s_codes, e_codes, o_codes, r_codes, a_codes = entry.codes
        g_s = array("i", entry.to_global[0])
        g_e = array("i", entry.to_global[1])
        g_o = array("i", entry.to_global[2])
        g_r = array("i", entry.to_global[3])
        g_a = array("i", entry.to_global[4])
        for i in range(n):
            us = epoch[i]
            cost = costs[i]
            qty = quantities[i]
            cs = g_s[_as_int(s_codes[i])]
            ce = g_e[_as_int(e_codes[i])]
            co = g_o[_as_int(o_codes[i])]
            cr = g_r[_as_int(r_codes[i])]
            ca = g_a[_as_int(a_codes[i])]
            day = _floor_div(us, 86400000000)
            if pack:
                packed = (((((day - d0) * radices[0] + cs) * radices[1] + ce) * radices[2] + co)
                          * radices[3] + cr) * radices[4] + ca
                key = packed
            else:
                key = (day, cs, ce, co, cr, ca)
            found = key_index.get(key)
            if found is None:
                k = nk
                if nk == cap:  # a new array: one exporting its buffer cannot be resized
                    grown = array("q", bytes(8 * 3 * 2 * cap))
                    grown_v = grown
                    grown_v[:3 * cap] = sums[:3 * cap]
                    sums_arr, sums = grown, grown_v
                    cap *= 2
                key_index[key] = nk
                keys.append((day, cs, ce, co, cr, ca))
                nk += 1
                sums[3 * k] = 0
                sums[3 * k + 1] = 0
                sums[3 * k + 2] = 0
            else:
                k = found
            if (tl_add_overflows(sums[3 * k], cost, &sums[3 * k])
                    or tl_add_overflows(sums[3 * k + 1], qty, &sums[3 * k + 1])):
                raise OverflowError("a sum leaves the signed 64-bit range")
            sums[3 * k + 2] += 1
            hour_key = (_floor_div(us, 3600000000), cs, hc[cr])
            found = hour_index.get(hour_key)
            if found is None:
                h = nh
                if nh == hcap:
                    grown = array("q", bytes(8 * 2 * hcap))
                    grown_v = grown
                    grown_v[:hcap] = hsums[:hcap]
                    hours_arr, hsums = grown, grown_v
                    hcap *= 2
                hour_index[hour_key] = nh
                hour_keys.append(hour_key)
                nh += 1
                hsums[h] = 0
            else:
                h = found
            if tl_add_overflows(hsums[h], cost, &hsums[h]):
                raise OverflowError("a sum leaves the signed 64-bit range")
    cost_out = array("q", bytes(8 * nk))
    qty_out = array("q", bytes(8 * nk))
    n_out = array("q", bytes(8 * nk))
    cdef int64_t[::1] c_v = cost_out
    cdef int64_t[::1] q_v = qty_out
    cdef int64_t[::1] n_v = n_out
    for k in range(nk):
        c_v[k] = sums[3 * k]
        q_v[k] = sums[3 * k + 1]
        n_v[k] = sums[3 * k + 2]
    return CodedGroups(keys, cost_out, qty_out, n_out, hour_keys, hours_arr[:nh])
