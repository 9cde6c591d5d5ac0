-- Record an attempt's outcome, if the sender still holds the lease (the score is its token and
-- the record is the one it claimed): retry later, delivered, or failed (dead letter).
--   KEYS[1] dlvq, KEYS[2] dlv, KEYS[3] dlvdone, KEYS[4] dlvdead
--   ARGV[1] delivery id, ARGV[2] lease token, ARGV[3] record as claimed, ARGV[4] new record,
--   ARGV[5] 'retry' | 'delivered' | 'failed', ARGV[6] score: next attempt or time of the outcome
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
if ARGV[5] == 'retry' then
  redis.call('ZADD', KEYS[1], ARGV[6], ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  if ARGV[5] == 'delivered' then
    redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
  else
    redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
  end
end
return 1
