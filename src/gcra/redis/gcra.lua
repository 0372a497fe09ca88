-- flowguard GCRA: one key, one string value (the TAT), O(1).
--
-- KEYS[1]  the limited identity (already prefixed and length-bounded by the client)
-- ARGV[1]  n*T for this request of cost n: whole microseconds (n*T = 0 peeks)
-- ARGV[2]  n*T: the fraction of a microsecond, in units of 1/den us (< den)
-- ARGV[3]  den >= 1: the denominator of every fraction (1 when T is a whole number of us)
-- ARGV[4]  the burst window B*T: whole microseconds
-- ARGV[5]  B*T: the fraction, in units of 1/den us (< den)
-- ARGV[6]  now in microseconds since the flowguard epoch, or "" to use the server's TIME
-- ARGV[7]  extra TTL in milliseconds added to the key's expiry (0 in server-time mode)
--
-- Exact arithmetic: T = period / rate need not be a whole number of microseconds, so every time
-- is a whole number of microseconds plus a fraction f/den. The client computes n*T and B*T
-- exactly; the script only adds and compares. Times count microseconds since
-- 2023-11-14T22:13:20Z (unix 1700000000), about 2^48 today; B*T is at most 2^51 us and den at
-- most 2^52, so every value stays an integer below 2^53, exact in Lua's doubles, for ~140 years.
-- Numbers are written with string.format('%d') so no exponent notation ever reaches Redis.
--
-- The value is the TAT as decimal microseconds: "<whole>", or "<whole>+<frac>/<den>" when it has
-- a fraction of a microsecond. Anything else (signs, exponents, hex, spaces, inf, nan, a number of
-- more than 16 digits or of 2^53 or more, a fraction of den or more) is not a state this script
-- writes: status 1, nothing changes. A state beyond now + B*T (written under a quota with a longer
-- window, by a clock that was ahead, or by hand) is read as now + B*T, a fully spent key, and
-- stored as such by the next request that spends, so no value locks a key out for longer than
-- one window. A fraction over another denominator (a quota that
-- changed) is rounded up to the next whole microsecond.
--
-- Returns {0, allowed (0/1), tat, tat_frac, now}, where tat + tat_frac/den = max(stored TAT, now)
-- is the TAT the request was decided against; the client derives the decision from it.
-- Returns {1} when the key holds something that is not a GCRA state, {2} for invalid arguments.

local tonumber, find, match, format = tonumber, string.find, string.match, string.format
local EXACT = 9007199254740992 -- 2^53: integers below it are exact doubles

-- The arguments come from the client's exact arithmetic; only their presence and range are checked.
local step, step_frac, den = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local window, window_frac = tonumber(ARGV[4]), tonumber(ARGV[5])
local extra_ttl = tonumber(ARGV[7])
if not (step and step_frac and den and window and window_frac and extra_ttl)
    or den < 1 or step_frac >= den or window_frac >= den or extra_ttl >= EXACT then
  return {2}
end

local now
if ARGV[6] == '' then
  local t = redis.call('TIME')
  now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[6])
  if not now or now >= EXACT then
    return {2}
  end
end

-- The latest TAT the burst allows: now + B*T.
local horizon = now + window
local tat, tat_frac = now, 0
local normalized = false
local stored = redis.call('GET', KEYS[1])
if stored then
  -- "<whole>" or "<whole>+<frac>/<den>", each a decimal integer of at most 16 digits below 2^53.
  local whole, frac, over
  if #stored > 0 and #stored <= 16 and not find(stored, '%D') then
    whole, frac, over = tonumber(stored), 0, den
  elseif #stored <= 50 then
    local w, f, d = match(stored, '^(%d+)%+(%d+)/(%d+)$')
    if w and #w <= 16 and #f <= 16 and #d <= 16 then
      whole, frac, over = tonumber(w), tonumber(f), tonumber(d)
    end
  end
  if not whole or whole >= EXACT or over >= EXACT or frac >= over then
    return {1}
  end
  if frac > 0 and over ~= den then
    whole, frac = whole + 1, 0
  end
  if whole > horizon or (whole == horizon and frac > window_frac) then
    whole, frac, normalized = horizon, window_frac, true
  end
  if whole > now or (whole == now and frac > 0) then
    tat, tat_frac = whole, frac
  end
end

-- tat' = tat + n*T, with the carry; allowed iff tat' <= now + B*T.
local cand, cand_frac = tat + step, tat_frac + step_frac
if cand_frac >= den then
  cand, cand_frac = cand + 1, cand_frac - den
end
local allowed = 0
if cand < horizon or (cand == horizon and cand_frac <= window_frac) then
  allowed = 1
end

local spends = step > 0 or step_frac > 0
if spends and (allowed == 1 or normalized) then
  local at, at_frac = tat, tat_frac
  if allowed == 1 then
    at, at_frac = cand, cand_frac
  end
  -- The key lives until its TAT (rounded up to the millisecond), plus the extra TTL.
  local ttl_us = at - now
  if at_frac > 0 then
    ttl_us = ttl_us + 1
  end
  local ttl_ms = (ttl_us - ttl_us % 1000) / 1000 + extra_ttl
  if ttl_us % 1000 > 0 then
    ttl_ms = ttl_ms + 1
  end
  if ttl_ms < 1 then
    ttl_ms = 1
  end
  local value
  if at_frac > 0 then
    value = format('%d+%d/%d', at, at_frac, den)
  else
    value = format('%d', at)
  end
  redis.call('SET', KEYS[1], value, 'PX', format('%d', ttl_ms))
end
return {0, allowed, tat, tat_frac, now}
