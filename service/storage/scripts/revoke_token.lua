-- Revoke a token by id unless it is the last admin token for every project.
--   KEYS[1] token index (id -> digest), KEYS[2] ids of unscoped admin tokens (same slot)
--   ARGV[1] token id
-- Returns the token's digest (revoked: the caller deletes its record), false (no such token) or
-- 0 (refused: the last unscoped admin). Ids in KEYS[2] no longer in the index are dropped first.
local digest = redis.call('HGET', KEYS[1], ARGV[1])
if not digest then return false end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  local live = 0
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if redis.call('HEXISTS', KEYS[1], id) == 1 then live = live + 1
    else redis.call('SREM', KEYS[2], id) end
  end
  if live <= 1 then return 0 end
  redis.call('SREM', KEYS[2], ARGV[1])
end
redis.call('HDEL', KEYS[1], ARGV[1])
return digest
