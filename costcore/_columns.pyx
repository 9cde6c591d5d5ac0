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


cdef extern from *:
    """
    static inline int tl_add_overflows(int64_t a, int64_t b, int64_t *out) {
        return __builtin_add_overflow(a, b, out);
    }
    /* *sum += v, where sum points at the (low, high) 64-bit halves of a signed 128-bit
       integer (sums of fewer than 2**63 int64 values: never out of its range). */
    static inline void tl_add_s128(int64_t *sum, int64_t v) {
        __int128 s = (__int128)(((unsigned __int128)(uint64_t)sum[1] << 64) | (uint64_t)sum[0]);
        s += v;
        sum[0] = (int64_t)(uint64_t)s;
        sum[1] = (int64_t)(uint64_t)((unsigned __int128)s >> 64);
    }
    """
    bint tl_add_overflows(int64_t a, int64_t b, int64_t *out)
    void tl_add_s128(int64_t *sum, int64_t v)


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


cdef object _doubled(object arr):
    """A copy of an array('q') twice as long (one exporting its buffer cannot be resized)."""
    grown = array("q", bytes(16 * len(arr)))
    memoryview(grown).cast("B")[:8 * len(arr)] = memoryview(arr).cast("B")
    return grown


cdef object _wide(int64_t lo, int64_t hi):
    """The Python int of a signed 128-bit integer's (low, high) 64-bit halves."""
    if (hi == 0 and lo >= 0) or (hi == -1 and lo < 0):
        return lo
    return (<object>hi << 64) | <object><uint64_t>lo


cdef class CodedSums:
    """Sums of log entries by cell and hour, one entry at a time (`add`), so that a fold
    running in a thread holds the interpreter for one entry at most, never for the whole
    fold. `group_coded` is its one-call form; its contract is
    `costcore.columns.group_coded_reference`.

    Keys are packed into one integer (a mixed-radix number of the codes and the day or hour
    less the first one) when `radices` (the size of each of the five code spaces) and the
    spans of days and hours allow 62 bits, so a lookup hashes one int, not a tuple.

    Sums are signed 128-bit integers (two int64 halves each: cost, quantity; then the event
    count), so no sum of a fold leaves its range: the results are exact Python ints.
    """

    cdef int64_t radices[5]
    cdef int64_t day0, hour0, n_classes
    cdef bint pack, pack_hours
    cdef int[::1] hour_class
    cdef object hour_class_arr
    cdef dict key_index, hour_index
    cdef list keys, hour_keys
    cdef object sums_arr, hours_arr
    cdef int64_t[::1] sums
    cdef int64_t[::1] hsums
    cdef Py_ssize_t nk, nh, cap, hcap

    def __init__(self, radices, int64_t day0, int64_t days, int64_t hour0, int64_t hours,
                 hour_class):
        cdef int64_t radix = days
        cdef int c
        self.hour_class_arr = array("i", hour_class)
        self.hour_class = self.hour_class_arr
        self.n_classes = max(1, len(hour_class) and max(hour_class) + 1)
        self.pack = days > 0
        for c in range(5):
            self.radices[c] = max(1, radices[c])
            if radix > (1 << 62) // self.radices[c]:
                self.pack = False
            else:
                radix *= self.radices[c]
        self.pack_hours = (hours > 0 and hours < (1 << 62) // self.radices[0]
                           and hours * self.radices[0] < (1 << 62) // self.n_classes)
        self.day0, self.hour0 = day0, hour0
        self.key_index, self.hour_index = {}, {}
        self.keys, self.hour_keys = [], []
        self.cap, self.hcap = 1024, 256
        self.sums_arr = array("q", bytes(8 * 5 * self.cap))
        # per hour cell: cost (two words, signed 128-bit) and events
        self.hours_arr = array("q", bytes(8 * 3 * self.hcap))
        self.sums = self.sums_arr
        self.hsums = self.hours_arr
        self.nk = self.nh = 0

    cdef Py_ssize_t _slot(self, object key, tuple spelled):
        cdef Py_ssize_t k
        found = self.key_index.get(key)
        if found is not None:
            return found
        k = self.nk
        if k == self.cap:
            self.sums_arr = _doubled(self.sums_arr)
            self.sums = self.sums_arr
            self.cap *= 2
        self.key_index[key] = k
        self.keys.append(spelled)
        self.sums[5 * k] = 0
        self.sums[5 * k + 1] = 0
        self.sums[5 * k + 2] = 0
        self.sums[5 * k + 3] = 0
        self.sums[5 * k + 4] = 0
        self.nk += 1
        return k

    cdef Py_ssize_t _hour_slot(self, object key, tuple spelled):
        cdef Py_ssize_t h
        found = self.hour_index.get(key)
        if found is not None:
            return found
        h = self.nh
        if h == self.hcap:
            self.hours_arr = _doubled(self.hours_arr)
            self.hsums = self.hours_arr
            self.hcap *= 2
        self.hour_index[key] = h
        self.hour_keys.append(spelled)
        self.hsums[3 * h] = 0
        self.hsums[3 * h + 1] = 0
        self.hsums[3 * h + 2] = 0
        self.nh += 1
        return h

    def add(self, entry):
        """Add one entry's events (a `CodedEntry`)."""
        if len(entry.codes) != 5 or len(entry.to_global) != 5:
            raise ValueError("an entry has five code columns and five code maps")
        cdef Py_ssize_t n = len(entry.epoch_us), i, k, h
        epoch = entry.epoch_us
        costs = entry.cost_nano
        quantities = entry.quantity_micro
        if (len(costs) != n or len(quantities) != n
                or any(len(column) != n for column in entry.codes)):
            raise ValueError("every column of an entry must have the same length")
        s_codes, e_codes, o_codes, r_codes, a_codes = entry.codes
        cdef list g_s = list(entry.to_global[0]), g_e = list(entry.to_global[1])
        cdef list g_o = list(entry.to_global[2]), g_r = list(entry.to_global[3])
        cdef list g_a = list(entry.to_global[4])
        cdef int64_t us, cost, qty, day, hour, cs, ce, co, cr, ca, hc
        cdef object key
        for i in range(n):
            us = epoch[i]
            cost = costs[i]
            qty = quantities[i]
            cs = g_s[<Py_ssize_t>s_codes[i]]
            ce = g_e[<Py_ssize_t>e_codes[i]]
            co = g_o[<Py_ssize_t>o_codes[i]]
            cr = g_r[<Py_ssize_t>r_codes[i]]
            ca = g_a[<Py_ssize_t>a_codes[i]]
            day = _floor_div(us, 86400000000)
            if self.pack:
                key = ((((((day - self.day0) * self.radices[0] + cs) * self.radices[1] + ce)
                          * self.radices[2] + co) * self.radices[3] + cr)
                       * self.radices[4] + ca)
                found = self.key_index.get(key)
                k = found if found is not None else self._slot(key, (day, cs, ce, co, cr, ca))
            else:
                key = (day, cs, ce, co, cr, ca)
                found = self.key_index.get(key)
                k = found if found is not None else self._slot(key, key)
            tl_add_s128(&self.sums[5 * k], cost)
            tl_add_s128(&self.sums[5 * k + 2], qty)
            self.sums[5 * k + 4] += 1
            hour = _floor_div(us, 3600000000)
            hc = self.hour_class[cr]
            if self.pack_hours:
                key = ((hour - self.hour0) * self.radices[0] + cs) * self.n_classes + hc
                found = self.hour_index.get(key)
                h = found if found is not None else self._hour_slot(key, (hour, cs, hc))
            else:
                key = (hour, cs, hc)
                found = self.hour_index.get(key)
                h = found if found is not None else self._hour_slot(key, key)
            tl_add_s128(&self.hsums[3 * h], cost)
            self.hsums[3 * h + 2] += 1

    def result(self):
        """The sums so far, as `CodedGroups`."""
        cdef Py_ssize_t k
        cdef list cost_out = [], qty_out = [], hour_out = []
        n_out = array("q", bytes(8 * self.nk))
        cdef int64_t[::1] n_v = n_out
        hour_n_out = array("q", bytes(8 * self.nh))
        cdef int64_t[::1] hn_v = hour_n_out
        for k in range(self.nk):
            cost_out.append(_wide(self.sums[5 * k], self.sums[5 * k + 1]))
            qty_out.append(_wide(self.sums[5 * k + 2], self.sums[5 * k + 3]))
            n_v[k] = self.sums[5 * k + 4]
        for k in range(self.nh):
            hour_out.append(_wide(self.hsums[3 * k], self.hsums[3 * k + 1]))
            hn_v[k] = self.hsums[3 * k + 2]
        return CodedGroups(list(self.keys), cost_out, qty_out, n_out, list(self.hour_keys),
                           hour_out, hour_n_out)


def coded_sums_for(entries, hour_class):
    """An empty `CodedSums` sized for these entries: their code spaces (from `to_global`) and
    their span of days and hours. The entries are then added one by one."""
    cdef int c
    cdef bint first = True
    cdef int64_t day, d0 = 0, d1 = -1, hour, h0 = 0, h1 = -1
    spans = [1, 1, 1, 1, 1]
    for entry in entries:
        if len(entry.codes) != 5 or len(entry.to_global) != 5:
            raise ValueError("an entry has five code columns and five code maps")
        for c in range(5):
            for g in entry.to_global[c]:
                if g + 1 > spans[c]:
                    spans[c] = g + 1
        for us in entry.epoch_us:
            day = _floor_div(us, 86400000000)
            hour = _floor_div(us, 3600000000)
            if first or day < d0:
                d0 = day
            if first or day > d1:
                d1 = day
            if first or hour < h0:
                h0 = hour
            if first or hour > h1:
                h1 = hour
            first = False
    return CodedSums(spans, d0, d1 - d0 + 1, h0, h1 - h0 + 1, hour_class)


def group_coded(entries, hour_class):
    """Compiled `costcore.columns.group_coded_reference` (same contract), through
    `CodedSums`."""
    sums = coded_sums_for(entries, hour_class)
    for entry in entries:
        sums.add(entry)
    return sums.result()


cdef inline Py_ssize_t _bisect_right(const int64_t[::1] starts, int64_t t) nogil:
    cdef Py_ssize_t lo = 0, hi = starts.shape[0], mid
    while lo < hi:
        mid = (lo + hi) // 2
        if t < starts[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def rate_rows(skus, epoch_us, starts, tables):
    """Compiled `costcore.columns.rate_rows_reference` (same contract)."""
    cdef Py_ssize_t n = len(skus), i, vi = -1, nv = len(starts)
    if len(epoch_us) != n:
        raise ValueError("skus and epoch_us differ in length")
    if len(tables) != nv:
        raise ValueError("starts and tables differ in length")
    starts_arr = array("q", starts)
    cdef const int64_t[::1] st = starts_arr
    rows_arr = array("i", bytes(4 * n))
    cdef int[::1] rows = rows_arr
    cdef int64_t t, lo = 0, hi = 0
    cdef bint bounded_lo = True, bounded_hi = True, known = False
    cdef dict table = None
    cdef object row
    for i in range(n):
        t = epoch_us[i]
        if not known or (bounded_lo and t < lo) or (bounded_hi and t >= hi):
            # The version in effect at t: found once per run of events in its span.
            vi = _bisect_right(st, t) - 1
            bounded_lo = vi >= 0
            lo = st[vi] if vi >= 0 else 0
            bounded_hi = vi + 1 < nv
            hi = st[vi + 1] if vi + 1 < nv else 0
            table = tables[vi] if vi >= 0 else None
            known = True
        if table is None:
            rows[i] = -1
            continue
        row = table.get(skus[i])
        rows[i] = -1 if row is None else <int>row
    return rows_arr


def pair_codes(firsts, seconds, wanted):
    """Compiled `costcore.columns.pair_codes_reference` (same contract)."""
    cdef Py_ssize_t n = len(firsts), i
    if len(seconds) != n:
        raise ValueError("firsts and seconds differ in length")
    codes_arr = array("i", bytes(4 * n))
    cdef int[::1] codes = codes_arr
    cdef list wanted_list = [bool(w) for w in wanted]
    cdef Py_ssize_t nw = len(wanted_list)
    cdef dict index = {}
    cdef list pairs = []
    cdef Py_ssize_t first
    cdef object key, found
    for i in range(n):
        first = firsts[i]
        if not (0 <= first < nw) or not wanted_list[first]:
            codes[i] = -1
            continue
        key = (first, seconds[i])
        found = index.get(key)
        if found is None:
            found = len(pairs)
            index[key] = found
            pairs.append(key)
        codes[i] = found
    return pairs, codes_arr


def remap_codes(codes, table):
    """Compiled `costcore.columns.remap_codes_reference` (same contract)."""
    cdef Py_ssize_t n = len(codes), i, nt = len(table)
    table_arr = array("q", table)
    cdef const int64_t[::1] tv = table_arr
    out_arr = array("q", bytes(8 * n))
    cdef int64_t[::1] out = out_arr
    cdef int64_t c
    for i in range(n):
        c = codes[i]
        if c < 0:
            out[i] = -1
        elif c < nt:
            out[i] = tv[c]
        else:
            raise IndexError(f"code {c} at position {i} is outside a table of {nt}")
    return out_arr


def group_positions(keys, Py_ssize_t nkeys):
    """Compiled `costcore.columns.group_positions_reference` (same contract)."""
    cdef Py_ssize_t n = len(keys), i, k
    keys_arr = array("q", keys)
    cdef const int64_t[::1] kv = keys_arr
    counts_arr = array("q", bytes(8 * max(nkeys, 0)))
    cdef int64_t[::1] counts = counts_arr
    for i in range(n):
        if kv[i] < 0 or kv[i] >= nkeys:
            raise ValueError(f"key {kv[i]} at position {i} is outside [0, {nkeys})")
        counts[kv[i]] += 1
    next_arr = array("q", bytes(8 * max(nkeys, 0)))
    cdef int64_t[::1] nxt = next_arr
    cdef int64_t total = 0
    for k in range(nkeys):
        nxt[k] = total
        total += counts[k]
    order_arr = array("q", bytes(8 * n))
    cdef int64_t[::1] order = order_arr
    for i in range(n):
        k = kv[i]
        order[nxt[k]] = i
        nxt[k] += 1
    return order_arr, counts_arr


def take(values, positions):
    """Compiled `costcore.columns.take_reference` (same contract)."""
    cdef Py_ssize_t n = len(positions), i, nv = len(values)
    cdef list out = [None] * n
    cdef object v
    cdef Py_ssize_t p
    for i in range(n):
        p = positions[i]
        if p < 0 or p >= nv:
            raise IndexError(f"position {p} is outside a sequence of {nv}")
        v = values[p]
        out[i] = v
    return out


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
    cdef object ev, q, t, tz, off, text, tags
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
        t = ev.time
        if wire:
            if type(t) is not str or not PyUnicode_IS_ASCII(t):
                continue
            if not _parse_time(_ascii_data(t), PyUnicode_GET_LENGTH(t), &us):
                continue
        else:
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
