-- Where a fold starts, read together: the cursor, the log's last entry id and the length of
-- the legacy pending list. No cursor yet: the project has no batch to fold from the log (its
-- entries, if any, were applied or queued when accepted). The entries themselves are read
-- after this, page by page (`Store.unfolded_entries`).
--   KEYS[1] meta, KEYS[2] log, KEYS[3] legacy pending list
--   Returns {cursor or '', last id or '', legacy length}
local cursor = redis.call('HGET', KEYS[1], 'fold_cursor') or ''
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local last_id = ''
if #last > 0 then last_id = last[1][1] end
return {cursor, last_id, redis.call('LLEN', KEYS[3])}
