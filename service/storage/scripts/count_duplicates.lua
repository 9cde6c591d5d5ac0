-- Count duplicates that were answered without reaching INGEST (every event already seen).
return redis.call('HINCRBY', KEYS[1], 'duplicates', ARGV[1])
