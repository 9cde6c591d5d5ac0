-- Swap a rebuild's staging keys in, if no batch was accepted since the rebuild read the log.
--   KEYS[1] log, KEYS[2] meta, then pairs (staging, live) for every key to replace, then live
--   keys to drop.
--   ARGV[1] last log entry id the rebuild saw ("" if the log was empty), ARGV[2] pair count,
--   ARGV[3] and ARGV[4] the bounds of the rebuilt totals (meta bound_c, bound_q)
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local last_id = ''
if #last > 0 then last_id = last[1][1] end
if last_id ~= ARGV[1] then
  return 0
end
-- The rebuilt totals hold every logged batch: the fold goes on after the last of them.
if last_id == '' then last_id = '0-0' end
redis.call('HSET', KEYS[2], 'fold_cursor', last_id)
redis.call('HSET', KEYS[2], 'pend_events', 0)
redis.call('HSET', KEYS[2], 'bound_c', ARGV[3], 'bound_q', ARGV[4])
redis.call('HSET', KEYS[2], 'logix', 1, 'wastecells', 1)  -- the rebuilt log index and waste cells cover every entry
local pairs_n = tonumber(ARGV[2])
for i = 1, pairs_n do
  redis.call('RENAME', KEYS[2 + 2 * i - 1], KEYS[2 + 2 * i])
end
for i = 3 + 2 * pairs_n, #KEYS do
  redis.call('DEL', KEYS[i])
end
return 1
