-- Fold the log: apply the summed increments of the entries after meta ``fold_cursor`` up to
-- entry ARGV's new cursor, and move the cursor there, unless another fold moved it since the
-- entries were read (then nothing is written and the caller reads again). The cursor only moves
-- forward (a rebuild sets it to the last entry it counted), so no entry is ever folded twice.
--   KEYS[1] meta, KEYS[2..] keys referenced by index
--   ARGV[1] msgpack [cursor, new cursor, events, increments, high parts]: events as a string,
--   increments and their high-limb parts as `apply_increments` takes them. Returns 1 when
--   applied, 0 when the cursor moved, or the error of an increment that could not be made
--   (then every write was undone and the cursor stays: nothing is ever applied twice).
local call = redis.call
local p = cmsgpack.unpack(ARGV[1])
if (call('HGET', KEYS[1], 'fold_cursor') or '') ~= p[1] then
  return 0
end
local failed = apply_increments(p[4], p[5])
if failed then return redis.error_reply(failed) end
call('HSET', KEYS[1], 'fold_cursor', p[2])
if p[3] ~= '0' then  -- "-0" is not an integer to HINCRBY (entries of rows sum no events)
  call('HINCRBY', KEYS[1], 'pend_events', '-' .. p[3])
end
return 1
