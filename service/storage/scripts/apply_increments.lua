-- Sums kept in two limbs (service/storage/limbs.py, docs/exact-money.md): the fragment that
-- ingest.lua and fold_log.lua start with (service/storage/scripts/__init__.py prepends it).
-- Amounts travel as strings (Lua numbers are doubles); `lt` and `add` work on their decimal
-- text, exactly.
--   apply_increments(inc, his): inc grouped by key, flat (key#, high key# or 0, n, field1,
--   delta1, ..., fieldn, deltan)...; his flat (high key#, field, delta)..., applied after inc.
--   One HINCRBY per field, as before there were limbs; a low limb HINCRBY refuses (it would
--   leave int64) is carried into its high limb first (`carry`) and made again. Returns nil, or
--   the error of an increment that could not be made, after undoing every increment made.
local function lt(a, b)  -- exact "<" on canonical non-negative integer strings
  if #a ~= #b then return #a < #b end
  return a < b
end

local function add(a, b)  -- exact sum of canonical non-negative integer strings
  if #a < #b then a, b = b, a end
  local out, c, j = {}, 0, #b
  for i = #a, 1, -1 do
    local s = a:byte(i) - 48 + c
    if j >= 1 then
      s = s + b:byte(j) - 48
      j = j - 1
    end
    if s >= 10 then s, c = s - 10, 1 else c = 0 end
    out[i] = string.char(48 + s)
  end
  local r = table.concat(out)
  if c == 1 then r = '1' .. r end
  return r
end

local function carry(key, hkey, f)  -- lo = u * 10^9 + r: u to the high limb, exactly
  local lo = redis.pcall('HGET', key, f)
  if type(lo) ~= 'string' or #lo <= 9 or not string.match(lo, '^%d+$') then return false end
  local units = string.sub(lo, 1, #lo - 9)
  if type(redis.pcall('HINCRBY', hkey, f, units)) == 'table' then return false end
  redis.call('HINCRBY', key, f, '-' .. units .. '000000000')
  return true
end

local function undo(key, hkey, f, d)
  if d == '0' then return end  -- "-0" is not an integer to HINCRBY
  local negative = string.sub(d, 1, 1) == '-'
  local digits = negative and string.sub(d, 2) or d
  local back = (negative and '' or '-') .. digits
  if not hkey or #digits <= 9 then
    redis.call('HINCRBY', key, f, back)
    return
  end
  if type(redis.pcall('HINCRBY', key, f, back)) ~= 'table' then return end
  -- A carry since the increment left the low limb too small to take the whole undo (it
  -- would leave int64): the high limb takes its units, the low limb the rest; the value
  -- (high * 10^9 + low) is restored all the same.
  local units, rest = string.sub(digits, 1, #digits - 9), string.sub(digits, #digits - 8)
  rest = string.match(rest, '^0*(%d-)$')
  redis.call('HINCRBY', hkey, f, (negative and '' or '-') .. units)
  if rest ~= '' then redis.call('HINCRBY', key, f, (negative and '' or '-') .. rest) end
end

local function apply_increments(inc, his)
  local err, stop = nil, #inc + 1
  local l = 1
  while l <= #inc and not err do
    local key, hk, n = KEYS[inc[l]], inc[l + 1], inc[l + 2]
    for j = l + 3, l + 2 + 2 * n, 2 do
      local r = redis.pcall('HINCRBY', key, inc[j], inc[j + 1])
      if type(r) == 'table' then
        if hk > 0 and carry(key, KEYS[hk], inc[j]) then
          r = redis.pcall('HINCRBY', key, inc[j], inc[j + 1])
        end
        if type(r) == 'table' then
          err, stop = r.err or 'ERR', j
          break
        end
      end
    end
    l = l + 3 + 2 * n
  end
  local his_done = 0
  if not err then
    for j = 1, #his, 3 do
      local r = redis.pcall('HINCRBY', KEYS[his[j]], his[j + 1], his[j + 2])
      if type(r) == 'table' then
        err = r.err or 'ERR'
        break
      end
      his_done = j
    end
  end
  if not err then return nil end
  -- Undo: every increment made, back out exactly (carries keep each value: they stay).
  l = 1
  while l <= #inc do
    local key, hk, n = KEYS[inc[l]], inc[l + 1], inc[l + 2]
    for j = l + 3, l + 2 + 2 * n, 2 do
      if j >= stop then break end
      undo(key, hk > 0 and KEYS[hk] or nil, inc[j], inc[j + 1])
    end
    l = l + 3 + 2 * n
  end
  for j = 1, his_done, 3 do
    undo(KEYS[his[j]], nil, his[j + 1], his[j + 2])
  end
  return err
end
