-- Legacy: before the totals were folded from the log, each batch's cell sums were queued on
-- the pending list; a project may still hold some (or a worker of that version may still be
-- running). Fold the oldest `count` pending blobs: apply their summed increments, drop them,
-- and move the head's sequence number, unless another fold moved it since they were read
-- (then nothing is written and the caller reads again). The sequence number only grows (a
-- rebuild that discards the list advances it too), so a stale fold never applies blobs twice.
--   KEYS[1] meta, KEYS[2] pending, KEYS[3..] keys referenced by index
--   ARGV[1] msgpack [head, count, events, increments, high parts]: head and events as strings,
--   increments as in fold_log.lua. Returns 1 when applied, 0 when the head moved.
local call = redis.call
local p = cmsgpack.unpack(ARGV[1])
if (call('HGET', KEYS[1], 'pend_head') or '0') ~= p[1] then
  return 0
end
local failed = apply_increments(p[4], p[5])
if failed then return redis.error_reply(failed) end
call('LTRIM', KEYS[2], p[2], -1)
call('HINCRBY', KEYS[1], 'pend_head', p[2])
if p[3] ~= '0' then
  call('HINCRBY', KEYS[1], 'pend_events', '-' .. p[3])
end
return 1
