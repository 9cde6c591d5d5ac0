# Included by _columns.pyx (`include "_grouping.pxi"`): one extension module, one C file, so
# the fold's and the queries' column kernels below inline `_floor_div` and compile exactly as
# they did inside _columns.pyx. Its names (`array`, the `libc.stdint` types, `CodedGroups`)
# are that module's. The ingest side (`scan_events`, `parse_time`, the body counters) is in
# _columns.pyx itself.

cdef extern from *:
    """
    /* *sum += v, where sum points at the (low, high) 64-bit halves of a signed 128-bit
       integer (sums of fewer than 2**63 int64 values: never out of its range). */
    static inline void tl_add_s128(int64_t *sum, int64_t v) {
        __int128 s = (__int128)(((unsigned __int128)(uint64_t)sum[1] << 64) | (uint64_t)sum[0]);
        s += v;
        sum[0] = (int64_t)(uint64_t)s;
        sum[1] = (int64_t)(uint64_t)((unsigned __int128)s >> 64);
    }
    """
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
