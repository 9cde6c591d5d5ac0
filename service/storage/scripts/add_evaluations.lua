-- Store a batch of evaluation results unless its new ones would take the project past its
-- limit (then nothing is written): the rule and its Python reference are in
-- service/evaluations/capacity.py (`store_batch`). An id stored already, or repeated in the
-- batch, is a duplicate: not written, not counted against the limit.
--   KEYS[1] evals hash, KEYS[2] evalidx zset, KEYS[3] evalxidx zset
--   ARGV[1] the limit; ARGV[2..] (id, JSON, index member, per-experiment member) quadruples
-- Answers {0, new1, new2, ...} (StoreAnswer.STORED: 1 for each result stored, 0 for a
-- duplicate) or {1, stored, new} (StoreAnswer.OVER_LIMIT: nothing written).
local call = redis.call
local limit = tonumber(ARGV[1])
local stored = call('HLEN', KEYS[1])
local answer, seen, added = {0}, {}, 0
for i = 2, #ARGV, 4 do
  local id = ARGV[i]
  local fresh = 0
  if not seen[id] and call('HEXISTS', KEYS[1], id) == 0 then
    fresh = 1
    added = added + 1
  end
  seen[id] = true
  answer[#answer + 1] = fresh
end
if added > 0 and stored + added > limit then
  return {1, stored, added}
end
for n = 2, #answer do
  if answer[n] == 1 then
    local i = 2 + (n - 2) * 4
    call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    call('ZADD', KEYS[2], 0, ARGV[i + 2])
    call('ZADD', KEYS[3], 0, ARGV[i + 3])
  end
end
return answer
