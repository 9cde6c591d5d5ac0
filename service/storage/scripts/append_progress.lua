-- Append one JSON item to a JSON list held in a hash field, keeping the last ARGV[3] items.
--   KEYS[1] hash; ARGV[1] field, ARGV[2] item JSON, ARGV[3] how many to keep
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local items = {}
if raw then items = cjson.decode(raw) end
items[#items + 1] = cjson.decode(ARGV[2])
local keep = tonumber(ARGV[3])
local out = {}
for i = math.max(1, #items - keep + 1), #items do out[#out + 1] = items[i] end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(out))
return #out
