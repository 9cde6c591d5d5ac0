-- Replace one hash field's value only if it is still the one read (a compare-and-set).
--   KEYS[1] the hash; ARGV[1] field, ARGV[2] value as read, ARGV[3] new value. Returns 1 if set.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
