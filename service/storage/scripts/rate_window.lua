-- Count requests (ARGV[1], default 1) in their one-second window; the key expires with it.
local by = tonumber(ARGV[1] or '1')
local n = redis.call('INCRBY', KEYS[1], by)
if n == by then redis.call('PEXPIRE', KEYS[1], 2000) end
return n
