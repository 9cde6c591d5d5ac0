-- Set a new budget's counters from the log, if no batch was accepted since it was read, and
-- record the thresholds its spend already passed.
--   KEYS[1] log, KEYS[2] bspend, KEYS[3] bday, KEYS[4] bfired, KEYS[5] alerts, KEYS[6] and
--   KEYS[7] the high limbs of bspend and bday (service/storage/limbs.py), KEYS[8] (a new
--   budget's only) the project's budget hold: while a repricing holds the project's alerts,
--   the counters are set and nothing fires (the repricing settles them, on its figures)
--   ARGV[1] last log entry id seen, ARGV[2] msgpack [spend triples, day triples, checks] where
--   triples are flat (field, low limb, high limb) and checks are [spend (exact decimal text),
--   limit, alert id, alert JSON].
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local last_id = ''
if #last > 0 then last_id = last[1][1] end
if last_id ~= ARGV[1] then
  return 0
end
local p = cmsgpack.unpack(ARGV[2])
for k = 1, 2 do
  local t = p[k]
  for i = 1, #t, 3 do
    redis.call('HSET', KEYS[1 + k], t[i], t[i + 1])
    if t[i + 2] ~= '0' then redis.call('HSET', KEYS[5 + k], t[i], t[i + 2]) end
  end
end
local held = KEYS[8] ~= nil and redis.call('EXISTS', KEYS[8]) == 1
for _, chk in ipairs(held and {} or p[3]) do
  local spent = chk[1]
  if not lt(spent, chk[2]) and redis.call('HSETNX', KEYS[4], chk[3], spent) == 1 then
    redis.call('XADD', KEYS[5], '*', 'id', chk[3], 'a', chk[4], 's', spent)
  end
end
return 1
