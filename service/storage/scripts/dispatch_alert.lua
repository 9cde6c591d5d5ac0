-- Turn alerts of the stream into their webhook deliveries (the outbox), then acknowledge
-- them, in one step: alerts read by a dispatcher that dies before this runs stay pending in
-- the consumer group and are claimed again; running this twice creates nothing new (HSETNX).
-- Several alerts (thresholds of one budget crossed by one batch) may make one delivery per
-- webhook: their entries are acknowledged together with it.
--   KEYS[1] alerts, KEYS[2] dlv, KEYS[3] dlvq
--   ARGV[1] consumer group, ARGV[2] first attempt time (ms), ARGV[3] n, the number of
--   stream entry ids that follow, then the n ids, then pairs (delivery id, delivery JSON)
local n = tonumber(ARGV[3])
local created = 0
for i = 4 + n, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('ZADD', KEYS[3], 'NX', ARGV[2], ARGV[i])
    created = created + 1
  end
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4, 3 + n))
return created
