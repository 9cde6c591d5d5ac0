-- Fold the log: apply the summed increments of the entries after meta ``fold_cursor`` up to
-- entry ARGV's new cursor, and move the cursor there, unless another fold moved it since the
-- entries were read (then nothing is written and the caller reads again). The cursor only moves
-- forward (a rebuild sets it to the last entry it counted), so no entry is ever folded twice.
--   KEYS[1] meta, KEYS[2..] keys referenced by index
--   ARGV[1] msgpack [cursor, new cursor, events, increments, high parts]: events as a string,
--   increments and their high-limb parts as `apply_increments` takes them, samples to merge:
--   flat {key index, field, keep, {epoch, id, ...}}: the field (msgpack) keeps the `keep`
--   smallest (epoch µs, id) pairs of its own and these (service/ledger/wastecells.py). Returns 1 when
--   applied, 0 when the cursor moved, or the error of an increment that could not be made
--   (then every write was undone and the cursor stays: nothing is ever applied twice).
local call = redis.call
local p = cmsgpack.unpack(ARGV[1])
if (call('HGET', KEYS[1], 'fold_cursor') or '') ~= p[1] then
  return 0
end
local failed = apply_increments(p[4], p[5])
if failed then return redis.error_reply(failed) end
-- (epoch, id) order as Python's: numbers, then the ids byte by byte (not the locale's order)
local function before(ea, ia, eb, ib)
  if ea ~= eb then return ea < eb end
  for i = 1, math.min(#ia, #ib) do
    local a, b = string.byte(ia, i), string.byte(ib, i)
    if a ~= b then return a < b end
  end
  return #ia < #ib
end
local merges = p[6] or {}
for i = 1, #merges, 4 do
  local key, field, keep = KEYS[merges[i]], merges[i + 1], tonumber(merges[i + 2])
  local cur = call('HGET', key, field)
  if not cur then
    call('HSET', key, field, cmsgpack.pack(merges[i + 3]))
  else
    local old, new, out = cmsgpack.unpack(cur), merges[i + 3], {}
    local a, b = 1, 1
    while #out < 2 * keep and (a <= #old or b <= #new) do
      local from_old
      if a > #old then
        from_old = false
      elseif b > #new then
        from_old = true
      elseif old[a] == new[b] and old[a + 1] == new[b + 1] then
        b = b + 2  -- the same event twice: kept once
        from_old = true
      else
        from_old = before(old[a], old[a + 1], new[b], new[b + 1])
      end
      if from_old then
        out[#out + 1], out[#out + 2], a = old[a], old[a + 1], a + 2
      else
        out[#out + 1], out[#out + 2], b = new[b], new[b + 1], b + 2
      end
    end
    call('HSET', key, field, cmsgpack.pack(out))
  end
end
call('HSET', KEYS[1], 'fold_cursor', p[2])
if p[3] ~= '0' then  -- "-0" is not an integer to HINCRBY (entries of rows sum no events)
  call('HINCRBY', KEYS[1], 'pend_events', '-' .. p[3])
end
return 1
