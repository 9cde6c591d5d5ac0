-- Every change of a job's state, so that a project runs one job at a time and a worker that
-- lost its lease changes nothing (Python reference: service/jobs/reference.py).
--   KEYS[1] joblease, KEYS[2] jobq, KEYS[3] job hash, KEYS[4] jobs (the project's index),
--   KEYS[5] bhold (the reprice jobs holding the project's budget alert decisions: a job's id
--   leaves it in the same step as the job ends, and the hash expires unless renewed),
--   KEYS[6] jobx (the id of the project's last exclusive job: an export);
--   ARGV[1] op, ARGV[2] job id, then:
--   add    ARGV[3] created (ms), ARGV[4] keep (ms), ARGV[5] hold (ms; 0: the job holds no
--          alerts), ARGV[6] exclusive ('1': refused while the last exclusive job is still in
--          the queue, i.e. queued or running), ARGV[7..] the job's fields and values: 1
--          (queued at the end; ids created more than `keep` ago leave the index); 0 refused
--   hold   ARGV[3] hold (ms): 1 (the id holds the alerts before its job is added)
--   release: 1 (the id holds them no more: its job was never added)
--   claim  ARGV[3] token, ARGV[4] lease ms, ARGV[5] now, ARGV[6] keep (ms), ARGV[7] hold (ms):
--          1 claimed; 0 the lease is held or the job is not at the head of the queue; -1 the
--          head was cancelled or gone (dropped)
--   renew  ARGV[3] token, ARGV[4] lease ms, ARGV[5] now, ARGV[6] done, ARGV[7] total,
--          ARGV[8] hold (ms): 0 the lease is not the token's; 1 renewed; 2 renewed, and a
--          cancel was asked
--   finish ARGV[3] token, ARGV[4] now, ARGV[5] state, ARGV[6] result, ARGV[7] error,
--          ARGV[8] done, ARGV[9] total, ARGV[10] keep (ms: the ended job's hash expires then):
--          0 the lease is not the token's (nothing written); 1 finished
--   cancel ARGV[3] now, ARGV[4] keep (ms, as for finish): -1 no such job; 0 already finished; 1 cancelled (it was queued);
--          2 asked (it is running: its worker stops at its next step)
local op, id = ARGV[1], ARGV[2]
local function hold(ms)
  redis.call('HSET', KEYS[5], id, '1')
  redis.call('PEXPIRE', KEYS[5], ms)
end
local function keep_hold(ms)  -- the job's hold lives on while it does
  if redis.call('HEXISTS', KEYS[5], id) == 1 then redis.call('PEXPIRE', KEYS[5], ms) end
end
if op == 'hold' then
  hold(tonumber(ARGV[3]))
  return 1
end
if op == 'release' then
  redis.call('HDEL', KEYS[5], id)
  return 1
end
if op == 'add' then
  if ARGV[6] == '1' then
    local last = redis.call('GET', KEYS[6])
    if last and redis.call('LPOS', KEYS[2], last) then return 0 end
    redis.call('SET', KEYS[6], id)
  end
  if tonumber(ARGV[5]) > 0 then hold(tonumber(ARGV[5])) end
  redis.call('HSET', KEYS[3], unpack(ARGV, 7))
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (tonumber(ARGV[3]) - tonumber(ARGV[4])))
  redis.call('ZADD', KEYS[4], tonumber(ARGV[3]), id)
  redis.call('RPUSH', KEYS[2], id)
  return 1
end
if op == 'claim' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  if redis.call('LINDEX', KEYS[2], 0) ~= id then return 0 end
  local state = redis.call('HGET', KEYS[3], 'state')
  if not state or (state ~= 'queued' and state ~= 'running') then
    redis.call('LPOP', KEYS[2])
    redis.call('HDEL', KEYS[5], id)
    return -1
  end
  if redis.call('HGET', KEYS[3], 'cancel') == '1' then
    redis.call('LPOP', KEYS[2])
    redis.call('HDEL', KEYS[5], id)
    redis.call('HSET', KEYS[3], 'state', 'cancelled', 'finished_at', ARGV[5])
    redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[6]))
    return -1
  end
  redis.call('SET', KEYS[1], ARGV[3], 'PX', tonumber(ARGV[4]))
  redis.call('HSET', KEYS[3], 'state', 'running', 'owner', ARGV[3], 'heartbeat_at', ARGV[5])
  redis.call('HSETNX', KEYS[3], 'started_at', ARGV[5])
  redis.call('HINCRBY', KEYS[3], 'attempts', 1)
  keep_hold(tonumber(ARGV[7]))
  return 1
end
if op == 'renew' then
  if redis.call('GET', KEYS[1]) ~= ARGV[3] then return 0 end
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
  redis.call('HSET', KEYS[3], 'heartbeat_at', ARGV[5], 'done', ARGV[6], 'total', ARGV[7])
  keep_hold(tonumber(ARGV[8]))
  if redis.call('HGET', KEYS[3], 'cancel') == '1' then return 2 end
  return 1
end
if op == 'finish' then
  if redis.call('GET', KEYS[1]) ~= ARGV[3] then return 0 end
  redis.call('LREM', KEYS[2], 1, id)
  redis.call('HSET', KEYS[3], 'state', ARGV[5], 'finished_at', ARGV[4], 'done', ARGV[8], 'total', ARGV[9])
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[3], 'result', ARGV[6]) end
  if ARGV[7] ~= '' then redis.call('HSET', KEYS[3], 'error', ARGV[7]) end
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[10]))
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[5], id)
  return 1
end
if op == 'cancel' then
  local state = redis.call('HGET', KEYS[3], 'state')
  if not state then return -1 end
  if state == 'queued' then
    redis.call('LREM', KEYS[2], 1, id)
    redis.call('HSET', KEYS[3], 'state', 'cancelled', 'cancel', '1', 'finished_at', ARGV[3])
    redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[4]))
    redis.call('HDEL', KEYS[5], id)
    return 1
  end
  if state == 'running' then
    redis.call('HSET', KEYS[3], 'cancel', '1')
    return 2
  end
  return 0
end
return redis.error_reply('unknown job op ' .. tostring(op))
