-- Move dead letters back to the due queue, each only if it is still the record that was read.
--   KEYS[1] dlvq, KEYS[2] dlv, KEYS[3] dlvdead
--   ARGV[1] due time (ms), then triples (delivery id, record as read, new record)
-- Returns the ids moved.
local moved = {}
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('ZSCORE', KEYS[3], id) and redis.call('HGET', KEYS[2], id) == ARGV[i + 1] then
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZADD', KEYS[1], ARGV[1], id)
    moved[#moved + 1] = id
  end
end
return moved
