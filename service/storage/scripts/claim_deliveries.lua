-- Lease the deliveries that are due: each one's score moves to the end of the lease, so no
-- other sender takes it before then; that new score is the lease's token for SETTLE.
--   KEYS[1] dlvq, KEYS[2] dlv; ARGV[1] now (ms), ARGV[2] lease end (ms), ARGV[3] max count
-- Returns flat pairs (delivery id, delivery JSON).
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(due) do
  local record = redis.call('HGET', KEYS[2], id)
  if record then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = record
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
