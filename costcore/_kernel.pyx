# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, nonecheck=False, embedsignature=True
"""Compiled pricing kernel. Same contract as ``costcore.reference``: ``price_batch`` (the
batch) and ``price_segments`` (one quantity's priced parts), one segment split for both.

The element loop runs without the GIL on raw typed memoryviews. Products and sums of
``quantity_micro x price_nano`` are computed in unsigned 128-bit integers (``q, price < 2**63``
so every product and every per-event sum of tier portions is below ``2**126``), rounded half to
even once, and only then narrowed to int64 with an overflow check. Group sums are kept in
unsigned 128-bit integers (at most ``2**63`` events of less than ``2**63`` each: below
``2**126``), so no group sum limits an event: limits hold per event and per tier counter.
"""

from cpython cimport array
from cpython.object cimport Py_SIZE
from libc.string cimport memcpy

import array as _array

from costcore._contract import check_events, check_segment_args, check_tier_cum, prepare_batch
from costcore.rates import RateTable, check_rate_columns
from costcore.result import BatchResult, PriceSegment

cdef extern from *:
    """
    #include <stdint.h>
    #include <limits.h>
    typedef unsigned __int128 tl_u128;

    #ifdef __PYX_ABI_VERSION
    #define TL_CYTHON_VERSION __PYX_ABI_VERSION
    #else
    #define TL_CYTHON_VERSION "unknown"
    #endif
    #ifdef CYTHON_HEX_VERSION
    #define TL_CYTHON_HEX_VERSION CYTHON_HEX_VERSION
    #else
    #define TL_CYTHON_HEX_VERSION 0
    #endif
    #if defined(__clang__)
    #define TL_COMPILER "clang " __clang_version__
    #elif defined(__GNUC__)
    #define TL_COMPILER "gcc " __VERSION__
    #else
    #define TL_COMPILER "unknown"
    #endif

    /* a + b for int64 (long long) values; returns nonzero on overflow. */
    static inline int tl_add_overflow(long long a, long long b, long long *out) {
        return __builtin_add_overflow(a, b, out);
    }

    /* *sum += v, where sum points at the (low, high) 64-bit halves of an unsigned 128-bit
       integer. */
    static inline void tl_add_u128(long long *sum, unsigned long long v) {
        tl_u128 s = ((tl_u128)(unsigned long long)sum[1] << 64) | (unsigned long long)sum[0];
        s += v;
        sum[0] = (long long)(unsigned long long)s;
        sum[1] = (long long)(unsigned long long)(s >> 64);
    }

    /* Round n / 10**6 half to even. Returns nonzero if the result exceeds INT64_MAX. */
    static inline int tl_round_div_1e6(tl_u128 n, long long *out) {
        const uint64_t d = 1000000u;
        uint64_t q, r;
        if ((n >> 64) == 0) {
            uint64_t n64 = (uint64_t)n;
            q = n64 / d;
            r = n64 - q * d;
        } else {
            tl_u128 q128 = n / d;
            if (q128 > (tl_u128)LLONG_MAX) return 1;
            q = (uint64_t)q128;
            r = (uint64_t)(n - q128 * d);
        }
        if (2 * r > d || (2 * r == d && (q & 1u))) q += 1;
        if (q > (uint64_t)LLONG_MAX) return 1;
        *out = (long long)q;
        return 0;
    }
    """
    ctypedef unsigned long long u128 "tl_u128"
    const char* TL_CYTHON_VERSION
    long TL_CYTHON_HEX_VERSION
    const char* TL_COMPILER
    int tl_add_overflow(long long a, long long b, long long *out) nogil
    int tl_round_div_1e6(u128 n, long long *out) nogil
    void tl_add_u128(long long *sum, unsigned long long v) nogil

KERNEL_VERSION = "2.1.0"
"""Version of the pricing contract implemented here; must equal costcore._version."""

cdef long long INT64_MAX_ = 9223372036854775807

# Error codes from the C validation passes.
cdef enum:
    OK = 0
    BAD_RATES = 1
    BAD_TIER_CUM = 2
    BAD_EVENT = 3
    MUTATED = 4

cdef array.array _Q = _array.array("q")
cdef array.array _I = _array.array("i")
cdef array.array _B = _array.array("b")


def kernel_build_info():
    """Build-time facts about this compiled module."""
    hex_version = TL_CYTHON_HEX_VERSION
    return {
        "kernel_version": KERNEL_VERSION,
        "cython_version": TL_CYTHON_VERSION.decode("ascii").replace("_", "."),
        "cython_hex_version": hex_version,
        "compiler": TL_COMPILER.decode("ascii", "replace"),
        "int128": True,
        "nogil": True,
    }


cdef int _rates_ok(
    const long long[::1] unit_price,
    const int[::1] tier_start,
    const int[::1] tier_count,
    const long long[::1] tier_upto,
    const long long[::1] tier_price,
) noexcept nogil:
    """Same conditions as costcore.rates.check_rate_columns; 1 if all hold."""
    cdef Py_ssize_t n_rows = unit_price.shape[0]
    cdef Py_ssize_t n_tiers = tier_upto.shape[0]
    cdef Py_ssize_t row, k, start, count
    cdef long long previous
    if tier_start.shape[0] != n_rows or tier_count.shape[0] != n_rows:
        return 0
    if tier_price.shape[0] != n_tiers:
        return 0
    for row in range(n_rows):
        if unit_price[row] < 0:
            return 0
        count = tier_count[row]
        if count < 0:
            return 0
        if count == 0:
            continue
        start = tier_start[row]
        if start < 0 or start + count > n_tiers:
            return 0
        previous = 0
        for k in range(start, start + count):
            if tier_price[k] < 0 or tier_upto[k] <= previous:
                return 0
            previous = tier_upto[k]
        if previous != INT64_MAX_:
            return 0
    return 1


cdef int _events_ok(
    const long long[::1] qty,
    const int[::1] rrow,
    const int[::1] grp,
    const int[::1] tslot,
    const int[::1] t_count,
    const long long[::1] cum,
    Py_ssize_t ngroups,
) noexcept nogil:
    """BAD_TIER_CUM or BAD_EVENT at the first tier counter or event that breaks the
    conditions of costcore._contract's check_tier_cum or check_events, else OK."""
    cdef Py_ssize_t n = qty.shape[0], n_rows = t_count.shape[0], n_slots = cum.shape[0]
    cdef Py_ssize_t i, row, key, slot
    for i in range(n_slots):
        if cum[i] < 0:
            return BAD_TIER_CUM
    for i in range(n):
        row = rrow[i]
        key = grp[i]
        slot = tslot[i]
        if qty[i] < 0 or row < 0 or row >= n_rows or key < 0 or key >= ngroups:
            return BAD_EVENT
        if t_count[row] > 0:
            if slot < 0 or slot >= n_slots:
                return BAD_EVENT
        elif slot != -1:
            return BAD_EVENT
    return OK


cdef inline u128 _split_tiers(
    long long c,
    long long end,
    const long long* upto,
    const long long* price,
    Py_ssize_t count,
    long long* portions,
) noexcept nogil:
    """The compiled segment split (``price_segments``' contract), which ``price_batch`` and
    ``price_segments`` share: each tier's part of the cumulative micro-units [c, end) (tier k
    spans [upto[k - 1], upto[k]), the first from 0), and what they cost at the tiers' prices,
    summed exactly (micro-units x nano-units per unit). Where ``portions`` is not NULL,
    ``portions[k]`` receives tier k's non-zero part; the pricing loop passes NULL, and the C
    compiler, inlining this, drops the stores."""
    cdef u128 amount = 0
    cdef long long lower = 0, upper, lo, hi
    cdef Py_ssize_t k
    for k in range(count):
        upper = upto[k]
        if upper > c:
            lo = c if c > lower else lower
            hi = end if end < upper else upper
            if hi > lo:
                amount += <u128>(hi - lo) * <u128>price[k]
                if portions != NULL:
                    portions[k] = hi - lo
        if upper >= end:
            break
        lower = upper
    return amount


cdef int _price_events(
    const long long[::1] qty,
    const int[::1] rrow,
    const int[::1] grp,
    const int[::1] tslot,
    const long long[::1] unit_price,
    const int[::1] t_start,
    const int[::1] t_count,
    const long long[::1] t_upto,
    const long long[::1] t_price,
    long long[::1] cum,
    long long[::1] cost_out,
    signed char[::1] status_out,
    long long[::1] gcost,
    long long[::1] gqty,
    long long[::1] gev,
    long long* accepted,
) noexcept nogil:
    """The pricing loop over validated events: each one's cost (or status 1: past int64),
    its group's sums and its tier counter. OK, or MUTATED when an index read for memory
    access has changed since validation (the GIL is released: another thread could have
    modified the caller's arrays)."""
    cdef Py_ssize_t n = qty.shape[0], n_rows = unit_price.shape[0]
    cdef Py_ssize_t ngroups = gev.shape[0], n_slots = cum.shape[0]
    cdef Py_ssize_t i, slot, row, key
    cdef long long q, c, end, cost
    cdef long long priced = 0  # a local, not *accepted: the compiler keeps it in a register
    cdef u128 amount
    for i in range(n):
        q = qty[i]
        row = rrow[i]
        key = grp[i]
        if q < 0 or row < 0 or row >= n_rows or key < 0 or key >= ngroups:
            return MUTATED
        if t_count[row] == 0:
            slot = -1
            amount = <u128>q * <u128>unit_price[row]
        else:
            slot = tslot[i]
            if slot < 0 or slot >= n_slots:
                return MUTATED
            c = cum[slot]
            if c < 0:
                return MUTATED
            if tl_add_overflow(c, q, &end):
                status_out[i] = 1
                continue
            amount = _split_tiers(
                c, end, &t_upto[t_start[row]], &t_price[t_start[row]], t_count[row], NULL
            )
        if tl_round_div_1e6(amount, &cost):
            status_out[i] = 1
            continue
        cost_out[i] = cost
        tl_add_u128(&gcost[2 * key], <unsigned long long>cost)
        tl_add_u128(&gqty[2 * key], <unsigned long long>q)
        gev[key] += 1
        priced += 1
        if slot >= 0:
            cum[slot] = end
    accepted[0] = priced
    return OK


def price_batch(quantity_micro, rate_row, group, tier_slot, rates, tier_cum, n_groups):
    """Price a batch of usage events (see ``costcore.reference`` for the contract)."""
    batch = prepare_batch(quantity_micro, rate_row, group, tier_slot, rates, tier_cum, n_groups)
    rates = batch.rates

    # Private copies of the rate columns: validated once, then read without the GIL, so a
    # concurrent mutation of the caller's table cannot break memory safety.
    cdef array.array unit_price_a = array.copy(rates.unit_price_nano)
    cdef array.array tier_start_a = array.copy(rates.tier_start)
    cdef array.array tier_count_a = array.copy(rates.tier_count)
    cdef array.array tier_upto_a = array.copy(rates.tier_upto_micro)
    cdef array.array tier_price_a = array.copy(rates.tier_price_nano)
    cdef const long long[::1] unit_price = unit_price_a
    cdef const int[::1] t_start = tier_start_a
    cdef const int[::1] t_count = tier_count_a
    cdef const long long[::1] t_upto = tier_upto_a
    cdef const long long[::1] t_price = tier_price_a

    cdef const long long[::1] qty = batch.quantity_micro
    cdef const int[::1] rrow = batch.rate_row
    cdef const int[::1] grp = batch.group
    cdef const int[::1] tslot = batch.tier_slot
    cdef long long[::1] cum = batch.tier_cum
    cdef Py_ssize_t ngroups = batch.n_groups

    cdef Py_ssize_t n = qty.shape[0]
    cdef Py_ssize_t n_slots = cum.shape[0]

    cdef array.array cost_a = array.clone(_Q, n, True)
    cdef array.array status_a = array.clone(_B, n, True)
    # Group sums: two 64-bit halves (low, high) of an unsigned 128-bit integer each.
    cdef array.array gcost_a = array.clone(_Q, 2 * ngroups, True)
    cdef array.array gqty_a = array.clone(_Q, 2 * ngroups, True)
    cdef array.array gev_a = array.clone(_Q, ngroups, True)
    cdef long long[::1] cost_out = cost_a
    cdef signed char[::1] status_out = status_a
    cdef long long[::1] gcost = gcost_a
    cdef long long[::1] gqty = gqty_a
    cdef long long[::1] gev = gev_a

    cdef long long accepted = 0
    cdef int err = OK

    with nogil:
        # Validation passes: no output or tier_cum is touched before they all pass.
        if not _rates_ok(unit_price, t_start, t_count, t_upto, t_price):
            err = BAD_RATES
        else:
            err = _events_ok(qty, rrow, grp, tslot, t_count, cum, ngroups)
        if err == OK:
            err = _price_events(
                qty, rrow, grp, tslot, unit_price, t_start, t_count, t_upto, t_price, cum,
                cost_out, status_out, gcost, gqty, gev, &accepted,
            )

    if err == BAD_RATES or err == BAD_TIER_CUM or err == BAD_EVENT:
        # Let the shared Python checks produce the exact error message the reference raises.
        check_rate_columns(unit_price_a, tier_start_a, tier_count_a, tier_upto_a, tier_price_a)
        check_tier_cum(batch.tier_cum.tolist())
        check_events(
            batch.quantity_micro.tolist(),
            batch.rate_row.tolist(),
            batch.group.tolist(),
            batch.tier_slot.tolist(),
            tier_count_a,
            batch.n_groups,
            n_slots,
        )
        raise RuntimeError("internal error: kernel validation disagrees with costcore._contract")
    if err == MUTATED:
        raise RuntimeError(
            "price_batch inputs were modified by another thread while being priced; "
            "tier_cum may be partially updated"
        )

    return BatchResult(
        cost_a, status_a, _wide(gcost_a, ngroups), _wide(gqty_a, ngroups), gev_a, accepted
    )


cdef list _wide(array.array halves, Py_ssize_t n):
    """Python ints of n unsigned 128-bit sums stored as (low, high) 64-bit halves."""
    cdef const long long[::1] v = halves
    cdef Py_ssize_t g
    cdef list out = []
    for g in range(n):
        if v[2 * g + 1] == 0 and v[2 * g] >= 0:
            out.append(v[2 * g])
        else:
            out.append(
                (<object><unsigned long long>v[2 * g + 1] << 64)
                | <object><unsigned long long>v[2 * g]
            )
    return out


cdef inline bint _row_ok(
    const long long* unit_price,
    const int* t_start,
    const int* t_count,
    const long long* t_upto,
    const long long* t_price,
    Py_ssize_t n_tiers,
    Py_ssize_t row,
) noexcept nogil:
    """Same conditions as costcore.rates.check_rate_row on a row in range; 1 if all hold."""
    cdef Py_ssize_t count = t_count[row], start = t_start[row], k
    cdef long long previous = 0
    if unit_price[row] < 0 or count < 0:
        return 0
    if count == 0:
        return 1
    if start < 0 or start + count > n_tiers:
        return 0
    for k in range(start, start + count):
        if t_price[k] < 0 or t_upto[k] <= previous:
            return 0
        previous = t_upto[k]
    return previous == INT64_MAX_


cdef inline array.array _column(object column, Py_ssize_t itemsize):
    """A RateTable column as the array it is (no buffer to acquire: the export splits every
    event); None if it is not an array of that item size."""
    if type(column) is not array.array:
        return None
    cdef array.array typed = column
    return typed if typed.ob_descr.itemsize == itemsize else None


def price_segments(rates, row, cum_before, quantity_micro):
    """Split a quantity into its priced parts (see ``costcore.reference`` for the contract)."""
    if not (
        isinstance(rates, RateTable)
        and type(row) is int
        and type(cum_before) is int
        and type(quantity_micro) is int
        and 0 <= cum_before <= INT64_MAX_
        and 0 <= quantity_micro <= INT64_MAX_ - cum_before
    ):
        check_segment_args(rates, row, cum_before, quantity_micro)  # raises the reason
        if not (0 <= cum_before <= INT64_MAX_ and 0 <= quantity_micro <= INT64_MAX_):
            raise RuntimeError("internal error: price_segments disagrees with costcore._contract")
    cdef array.array unit_price = _column(rates.unit_price_nano, 8)
    cdef array.array t_start = _column(rates.tier_start, 4)
    cdef array.array t_count = _column(rates.tier_count, 4)
    cdef array.array upto = _column(rates.tier_upto_micro, 8)
    cdef array.array price = _column(rates.tier_price_nano, 8)
    if unit_price is None or t_start is None or t_count is None or upto is None or price is None:
        raise TypeError("price_segments: a RateTable column is not an array of its type")
    cdef Py_ssize_t n_rows = Py_SIZE(unit_price), n_tiers = Py_SIZE(upto)
    if not (
        Py_SIZE(t_start) == n_rows
        and Py_SIZE(t_count) == n_rows
        and Py_SIZE(price) == n_tiers
        and 0 <= row < n_rows
        and _row_ok(
            unit_price.data.as_longlongs,
            t_start.data.as_ints,
            t_count.data.as_ints,
            upto.data.as_longlongs,
            price.data.as_longlongs,
            n_tiers,
            row,
        )
    ):
        check_segment_args(rates, row, cum_before, quantity_micro)  # raises the reason
        raise RuntimeError("internal error: price_segments disagrees with costcore._contract")
    cdef Py_ssize_t r = row
    cdef long long c = cum_before, q = quantity_micro
    cdef Py_ssize_t count = t_count.data.as_ints[r]
    if count == 0:
        return [tuple.__new__(PriceSegment, (q, unit_price.data.as_longlongs[r], None, 0, None))]
    cdef Py_ssize_t start = t_start.data.as_ints[r]
    # The row's tiers and their parts in arrays of this call before any Python object is made
    # (a collection run by one could run code that resizes the table's columns).
    cdef array.array row_upto = array.clone(_Q, count, False)
    cdef array.array row_price = array.clone(_Q, count, False)
    cdef array.array portions_a = array.clone(_Q, count, True)
    memcpy(row_upto.data.as_longlongs, &upto.data.as_longlongs[start], count * sizeof(long long))
    memcpy(row_price.data.as_longlongs, &price.data.as_longlongs[start], count * sizeof(long long))
    cdef const long long* up = row_upto.data.as_longlongs
    cdef const long long* pr = row_price.data.as_longlongs
    cdef long long* portions = portions_a.data.as_longlongs
    _split_tiers(c, c + q, up, pr, count, portions)
    cdef list out = []
    cdef long long lower = 0, upper
    cdef Py_ssize_t k
    for k in range(count):
        upper = up[k]
        if portions[k] > 0 or (q == 0 and lower <= c < upper):
            out.append(
                tuple.__new__(
                    PriceSegment,
                    (portions[k], pr[k], k, lower, None if upper == INT64_MAX_ else upper),
                )
            )
        lower = upper
    return out
