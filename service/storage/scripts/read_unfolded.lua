-- Where a fold starts, read together: the cursor and the log's last entry id. No cursor yet:
-- the project has no batch yet (the first one sets it). The entries themselves are read after
-- this, page by page (`LedgerStore.unfolded_entries`).
--   KEYS[1] meta, KEYS[2] log
--   Returns {cursor or '', last id or ''}
local cursor = redis.call('HGET', KEYS[1], 'fold_cursor') or ''
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local last_id = ''
if #last > 0 then last_id = last[1][1] end
return {cursor, last_id}
