-- What a query needs to know before it reads the totals, read together: the events the
-- roll-ups hold, the events the totals hold (accepted less those pending a fold), the daily
-- index. KEYS[1] roll-up counter, KEYS[2] meta, KEYS[3] daily, KEYS[4] its high limbs;
-- ARGV[1] roll-up version
local covered = redis.call('HGET', KEYS[1], ARGV[1]) or '0'
local counts = redis.call('HMGET', KEYS[2], 'accepted', 'pend_events')
return {covered, counts[1] or '0', counts[2] or '0', redis.call('HGETALL', KEYS[3]),
        redis.call('HGETALL', KEYS[4])}
