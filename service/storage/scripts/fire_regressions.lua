-- Fire evaluation regression alerts, each at most once: for each (alert id, record JSON),
-- in order, the first HSETNX of the id on the fired hash records it and appends the alert
-- to the project's alerts stream (the stream budget alerts go to, which the webhook
-- dispatcher reads), both in this one atomic step. A candidate already fired (by an
-- earlier request, a concurrent one, or earlier in this list) does nothing. The Python
-- reference of the rule: `fire_reference` in service/evaluations/regression.py.
--   KEYS[1] efired (alert id -> record JSON), KEYS[2] alerts
--   ARGV: pairs (alert id, record JSON)
-- Returns the ids fired, in order.
local fired = {}
for i = 1, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('XADD', KEYS[2], '*', 'id', ARGV[i], 'a', ARGV[i + 1])
    fired[#fired + 1] = ARGV[i]
  end
end
return fired
