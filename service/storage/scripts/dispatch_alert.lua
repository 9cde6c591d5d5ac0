-- Turn one alert of the stream into its webhook deliveries (the outbox), then acknowledge it,
-- in one step: an alert read by a dispatcher that dies before this runs stays pending in the
-- consumer group and is claimed again; running this twice creates nothing new (HSETNX).
--   KEYS[1] alerts, KEYS[2] dlv, KEYS[3] dlvq
--   ARGV[1] consumer group, ARGV[2] stream entry id, ARGV[3] first attempt time (ms),
--   then pairs (delivery id, delivery JSON)
local created = 0
for i = 4, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[i])
    created = created + 1
  end
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return created
