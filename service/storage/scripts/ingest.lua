-- Apply one project's priced batch atomically. Every check runs before the first write, so the
-- script never leaves a partial batch behind. (Redis's cmsgpack reads no msgpack "bin" type:
-- everything in the payload is a str.) Ids are checked and marked per `seen` shard (one HMGET
-- and one HSET of many fields, not an HSETNX per event); totals stay one HINCRBY per field
-- (exact int64 arithmetic in Valkey: adding in Lua, in two limbs, then HSET per hash, costed
-- more instructions than it saved; measured with callgrind, see bench/README.md).
--   KEYS[1] meta, KEYS[2] log, KEYS[3] rej, KEYS[4] rejidx, KEYS[5..] keys referenced by index
--   ARGV[1] msgpack: [events, tier_checks, increments, currency, rate_card, duplicates_seen,
--                     log_min_id ("" = keep all), counters, alerts key#, budgets revision]:
--           events, grouped by `seen` shard: flat (key#, n, id1, expiry day1, …, idn, dayn)…;
--           tier_checks flat in triples (key#, sku, expected);
--           increments (tier and budget counters), as `apply_increments` takes them (inc).
--           Amounts travel as strings: Lua numbers are doubles.
--           counters: [key#, high key#, field, delta, checks] with checks [mode, limit,
--           marker key#, alert id, alert JSON]; mode 'c' fires when the counter goes from
--           below the limit to at or above it, 'a' when it ends strictly above; each alert id
--           fires once. The counter's increment itself is among the increments.
--           p[11]: the project's rate_card, currency, attribution_tags as priced ("\0": unset;
--           empty: no check); p[12]: key# of the rate card (0: no check), p[13] its revision
--           as priced (the number of versions, as `RateCardStore.rate_card_revision` counts them);
--           p[14] 1 when the server has HSETEX with FNX (see below), else 0.
--           p[15] the increments' high-limb parts (his, as `apply_increments` takes them).
--           p[16] [cost units, cost limit, quantity units, quantity limit]: what the batch adds
--           to meta ``bound_c``/``bound_q`` (its cost and quantity in LIMBs, rounded up), and
--           the most each may hold before it (service/storage/limbs.py, CAP_UNITS).
--           p[17] key# of the project's budget hold (0: none): while it exists (a reprice job
--           is queued or running, service/jobs) the counters move but no alert fires; the
--           job settles them on the repriced figures.
--   ARGV[2] the log entry (service/ledger/eventlog.py). The batch's totals are not applied
--   here: a fold reads the log after meta ``fold_cursor`` and applies many batches at once
--   (service/ledger/folding.py); ``pend_events`` counts the events it has yet to fold. Log
--   retention never trims an entry not yet folded.
-- Returns {0, log_entry_id} on success, {1, i1, i2, …} (1-based positions, in the payload's
-- event order, of events already seen), {2, j} (tier counter j changed since it was read:
-- price again), {3, revision} (the project's budgets changed: read them again, so no
-- budget misses the batch), {4} (the project's settings or its rate card changed since
-- the worker cached them: read them again and price again), {5, bound_c, bound_q} (the batch
-- would take the project past what its sums can hold: nothing written), or {6, error} (an
-- increment failed, e.g. a key of the wrong type: every write undone).
-- The first element is `IngestAnswer` (service/ingest/store.py), decoded by the store.
local call = redis.call
local CHUNK = 1000  -- fields per HMGET/HSET (Lua's unpack() has a stack limit)

local function id_lt(a, b)  -- "<" on stream entry ids ("ms-seq")
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if am ~= bm then return lt(am, bm) end
  return lt(as, bs)
end

local p = cmsgpack.unpack(ARGV[1])
local ev, tc, inc = p[1], p[2], p[3]

local budgets_rev = call('HGET', KEYS[1], 'budgets_rev') or '0'
if budgets_rev ~= p[10] then
  return {3, budgets_rev}
end
-- Settings the batch was priced with (a worker's cached copy): refuse it if they moved.
if #p[11] > 0 then
  local cur = call('HMGET', KEYS[1], 'rate_card', 'currency', 'attribution_tags')
  for k = 1, 3 do
    if (cur[k] or '\0') ~= p[11][k] then return {4} end
  end
end
if p[12] > 0 and call('HLEN', KEYS[p[12]]) ~= p[13] then
  return {4}
end

for j = 1, #tc, 3 do
  local current = call('HGET', KEYS[tc[j]], tc[j + 1]) or '0'
  if current ~= tc[j + 2] then
    return {2, (j + 2) / 3}
  end
end

-- The budget counters as they stand, read before anything moves them (exact: both limbs).
local befores = {}
for k, c in ipairs(p[8]) do
  local lo = call('HGET', KEYS[c[1]], c[3]) or '0'
  local hi = call('HGET', KEYS[c[2]], c[3]) or '0'
  if hi ~= '0' then lo = add(hi .. '000000000', lo) end
  befores[k] = lo
end

-- Duplicates. Where the server has HSETEX with FNX (Valkey 9, Redis 8: it sets a hash's fields
-- only if none of them exists), a batch with no duplicate, the usual one, marks its ids with one
-- command per shard; should a shard hold a duplicate, the shards marked before it are unmarked
-- (their ids were all new) and the check below finds the duplicates. Elsewhere: one HMGET per
-- shard, then one HSET. Either way nothing stays written unless every id was new.
local marked = false
local i = 1
if p[14] == 1 then
  marked = true
  local done = {}
  while marked and i <= #ev do
    local key, n = KEYS[ev[i]], ev[i + 1]
    for s = 0, n - 1, CHUNK do
      local m = math.min(n, s + CHUNK) - s
      local first = i + 2 + 2 * s
      if call('HSETEX', key, 'FNX', 'FIELDS', m, unpack(ev, first, first + 2 * m - 1)) ~= 1 then
        marked = false
        break
      end
      done[#done + 1] = {key, first, m}
    end
    i = i + 2 + 2 * n
  end
  if not marked then
    for _, d in ipairs(done) do
      local ids = {}
      for j = 0, d[3] - 1 do ids[#ids + 1] = ev[d[2] + 2 * j] end
      call('HDEL', d[1], unpack(ids))
    end
  end
end

local dups = {}
local n_events = 0
i = 1
while i <= #ev do
  local key, n = KEYS[ev[i]], ev[i + 1]
  if not marked then
    for s = 0, n - 1, CHUNK do
      local ids = {}
      for j = s, math.min(n, s + CHUNK) - 1 do ids[#ids + 1] = ev[i + 2 + 2 * j] end
      local got = call('HMGET', key, unpack(ids))
      for j = 1, #got do
        if got[j] then dups[#dups + 1] = n_events + s + j end
      end
    end
  end
  n_events = n_events + n
  i = i + 2 + 2 * n
end
if #dups > 0 then
  table.insert(dups, 1, 1)
  return dups
end

-- Unmark every id of the batch (all new: marked by this script), undoing its only writes so far.
local function unmark()
  if not marked then return end
  local at = 1
  while at <= #ev do
    local key, n = KEYS[ev[at]], ev[at + 1]
    for s = 0, n - 1, CHUNK do
      local ids = {}
      for j = s, math.min(n, s + CHUNK) - 1 do ids[#ids + 1] = ev[at + 2 + 2 * j] end
      call('HDEL', key, unpack(ids))
    end
    at = at + 2 + 2 * n
  end
end

-- What the project's sums may still take (docs/exact-money.md): checked before any write
-- (where HSETEX marked the ids, they are unmarked).
local bound = call('HMGET', KEYS[1], 'bound_c', 'bound_q')
bound[1], bound[2] = bound[1] or '0', bound[2] or '0'
local function over(limit, current)  -- a negative limit: the batch alone is too much
  return string.sub(limit, 1, 1) == '-' or lt(limit, current)
end
if over(p[16][2], bound[1]) or over(p[16][4], bound[2]) then
  unmark()
  return {5, bound[1], bound[2]}
end

if not marked then
  i = 1
  while i <= #ev do
    local key, n = KEYS[ev[i]], ev[i + 1]
    for s = 0, n - 1, CHUNK do
      call('HSET', key, unpack(ev, i + 2 + 2 * s, i + 1 + 2 * math.min(n, s + CHUNK)))
    end
    i = i + 2 + 2 * n
  end
end
marked = true
local failed = apply_increments(inc, p[15])
if failed then
  unmark()  -- nothing else may stay
  return {6, failed}
end

local held = p[17] > 0 and call('EXISTS', KEYS[p[17]]) == 1
for k, c in ipairs(held and {} or p[8]) do
  local before = befores[k]
  local after = add(before, c[4])
  for _, chk in ipairs(c[5]) do
    local fire
    if chk[1] == 'c' then
      fire = lt(before, chk[2]) and not lt(after, chk[2])
    else
      fire = lt(chk[2], after)
    end
    if fire and call('HSETNX', KEYS[chk[3]], chk[4], after) == 1 then
      call('XADD', KEYS[p[9]], '*', 'id', chk[4], 'a', chk[5], 's', after)
    end
  end
end

-- Accepted events leave the dead letters (looked up per chunk, not per event).
if call('EXISTS', KEYS[3]) == 1 then
  i = 1
  while i <= #ev do
    local n = ev[i + 1]
    for s = 0, n - 1, CHUNK do
      local ids = {}
      for j = s, math.min(n, s + CHUNK) - 1 do ids[#ids + 1] = ev[i + 2 + 2 * j] end
      local got = call('HMGET', KEYS[3], unpack(ids))
      local gone = {}
      for j = 1, #got do
        if got[j] then gone[#gone + 1] = ids[j] end
      end
      if #gone > 0 then
        call('HDEL', KEYS[3], unpack(gone))
        call('ZREM', KEYS[4], unpack(gone))
      end
    end
    i = i + 2 + 2 * n
  end
end

call('HSETNX', KEYS[1], 'currency', p[4])
call('HSETNX', KEYS[1], 'rate_card', p[5])
call('HINCRBY', KEYS[1], 'accepted', n_events)
call('HINCRBY', KEYS[1], 'pend_events', n_events)
if p[16][1] ~= '0' then call('HINCRBY', KEYS[1], 'bound_c', p[16][1]) end
if p[16][3] ~= '0' then call('HINCRBY', KEYS[1], 'bound_q', p[16][3]) end
if p[6] ~= '0' then
  call('HINCRBY', KEYS[1], 'duplicates', p[6])
end
-- The fold's cursor starts at the entry before the project's first batch (a rebuild moves
-- it past what it counted).
local cursor = call('HGET', KEYS[1], 'fold_cursor')
if not cursor then
  local last = call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  cursor = '0-0'
  if #last > 0 then
    cursor = last[1][1]
  else
    call('HSET', KEYS[1], 'logix', 1, 'wastecells', 1)  -- the fold indexes every entry from the first one
  end
  call('HSET', KEYS[1], 'fold_cursor', cursor)
end
local entry
local min_id = p[7]
if min_id ~= '' and id_lt(cursor, min_id) then
  min_id = cursor  -- retention never drops an entry the fold has not read
end
if min_id ~= '' then
  entry = call('XADD', KEYS[2], 'MINID', '~', min_id, '*', 'b', ARGV[2])
else
  entry = call('XADD', KEYS[2], '*', 'b', ARGV[2])
end
return {0, entry}
