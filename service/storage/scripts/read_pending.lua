-- Legacy (see fold_pending.lua): read the pending list's head sequence number, its length and its first
-- blobs together: at
-- most ARGV[1] blobs, and no more once they hold ARGV[2] bytes (at least one blob).
--   KEYS[1] meta, KEYS[2] pending
local head = redis.call('HGET', KEYS[1], 'pend_head') or '0'
local most, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, size, from = {}, 0, 0
while #out < most and size < budget do
  local chunk = redis.call('LRANGE', KEYS[2], from, from + 63)
  if #chunk == 0 then break end
  for _, blob in ipairs(chunk) do
    if #out >= most or size >= budget then break end
    out[#out + 1] = blob
    size = size + #blob
  end
  from = from + 64
end
return {head, redis.call('LLEN', KEYS[2]), out}
