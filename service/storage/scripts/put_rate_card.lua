-- A new rate-card version: number it and store it in one step. One key only, so it runs on a
-- Redis Cluster too (the card's revision is its number of versions: versions are never deleted).
--   KEYS[1] card hash; ARGV[1] the version's JSON
local version = redis.call('HLEN', KEYS[1]) + 1
redis.call('HSET', KEYS[1], version, ARGV[1])
return version
