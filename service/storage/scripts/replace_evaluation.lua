-- Correct or delete one stored evaluation result, if it is still the one the caller read, and
-- audit it in the same step: the rule and its Python reference are in
-- service/evaluations/capacity.py (`replace_reference`).
--   KEYS[1] evals hash, KEYS[2] evalidx zset, KEYS[3] evalxidx zset, KEYS[4] evalaudit stream
--   ARGV[1] id, ARGV[2] the stored JSON the caller read, ARGV[3] ARGV[4] its index members,
--   ARGV[5] the new JSON ('' deletes), ARGV[6] ARGV[7] its index members,
--   ARGV[8] the audit record (JSON), ARGV[9] how many audit records the stream keeps
-- Answers 1 when done, 0 when the stored result is not the one read (nothing written).
local call = redis.call
if call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
call('ZREM', KEYS[2], ARGV[3])
call('ZREM', KEYS[3], ARGV[4])
if ARGV[5] == '' then
  call('HDEL', KEYS[1], ARGV[1])
else
  call('HSET', KEYS[1], ARGV[1], ARGV[5])
  call('ZADD', KEYS[2], 0, ARGV[6])
  call('ZADD', KEYS[3], 0, ARGV[7])
end
call('XADD', KEYS[4], 'MAXLEN', ARGV[9], '*', 'record', ARGV[8])
return 1
