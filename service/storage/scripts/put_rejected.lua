-- Store dead letters and keep at most ARGV[1] of the project's, dropping the oldest (by
-- rejection time). KEYS[1] rej, KEYS[2] rejidx; ARGV[2..] (id, record, time ms) triples.
-- Returns the number dropped.
local call = redis.call
local limit = tonumber(ARGV[1])
for i = 2, #ARGV, 3 do
  call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i])
end
local excess = call('ZCARD', KEYS[2]) - limit
local dropped = 0
while excess > 0 do
  local n = math.min(excess, 1000)
  local ids = call('ZRANGE', KEYS[2], 0, n - 1)
  call('HDEL', KEYS[1], unpack(ids))
  call('ZREMRANGEBYRANK', KEYS[2], 0, n - 1)
  excess = excess - n
  dropped = dropped + n
end
return dropped
