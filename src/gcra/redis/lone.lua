-- flowguard GCRA, one request per call: the script of a lone decision, the commonest call of a
-- quiet service. It decides exactly as gcra.lua decides one request, writes the same value with
-- the same TTL, and does nothing else, so that a call of one request pays for no batch machinery.
--
-- KEYS[1]  the key (already prefixed and length-bounded by the client)
-- ARGV[1]  step: n*T for a request of cost n, in whole microseconds (n*T = 0 peeks)
-- ARGV[2]  window: the burst window B*T, in whole microseconds
-- and only when needed (the common call, server time and a whole number of us, has two):
-- ARGV[3]  now: microseconds since the flowguard epoch; "" (or absent) for the server's TIME
-- ARGV[4]  extra_ttl: milliseconds added to the key's expiry
-- ARGV[5]  den >= 1: the denominator of the fractions below (absent: 1)
-- ARGV[6]  step_frac, ARGV[7] window_frac: the fractions of a microsecond of step and window, in
--          units of 1/den us (< den)
-- The client builds these arguments: a missing or non-numeric step or window is a script error,
-- an invalid optional argument the reply -2.
--
-- The arithmetic, the value and the TTL are gcra.lua's (see its header): integers below 2^53, the
-- TAT as "<whole>" or "<whole>+<frac>/<den>" decimal microseconds, a value the script never writes
-- is left alone (reply -1), a TAT beyond now + B*T is read as now + B*T and stored as such by the
-- next spend, a fraction over another denominator is rounded up, the TTL is the TAT rounded up
-- to a millisecond from now (plus extra_ttl). A key of another type fails the call (GET's error).
--
-- Reply: a string "<time>" or "<time> <tat>", or a negative integer status (-1: the key holds
-- something that is not a GCRA state; -2: invalid arguments).
--   <time>  the server's TIME as it answered ("<unix seconds> <microseconds>"), or the now given
--   <tat>   the TAT the request was decided against, max(stored, now), as "<whole>" or
--           "<whole>+<frac>" (frac > 0, over den); absent when it is now
-- The client derives the decision from them. A reply of strings built from the strings Redis
-- already gave (TIME's, the stored value's) costs the server less than an array of numbers.

local step, window = ARGV[1] + 0, ARGV[2] + 0
local at, extra_ttl, den, step_frac, window_frac = ARGV[3], 0, 1, 0, 0
if ARGV[4] then
  extra_ttl = tonumber(ARGV[4])
  if ARGV[5] then
    den, step_frac, window_frac = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  end
  if not (extra_ttl and den and step_frac and window_frac) or extra_ttl >= 9007199254740992
    or den < 1 or step_frac >= den or window_frac >= den then
    return -2
  end
end
-- time: the server's TIME (seconds, microseconds as strings), false for an explicit time.
local now, time = nil, false
if at and at ~= '' then
  now = tonumber(at)
  if not now or now >= 9007199254740992 then return -2 end
else
  time = redis.call('TIME')
  now = (time[1] - 1700000000) * 1000000 + time[2]
end

local key = KEYS[1]
local horizon = now + window
-- tat, tat_frac: max(stored, now); text: tat as the reply gives it (false: now, not given).
local tat, tat_frac, normalized, text = now, 0, false, false
local stored = redis.call('GET', key)
if stored then
  local whole, frac, over, digits
  if #stored <= 16 and string.find(stored, '^%d+$') then
    whole, frac, over, digits = stored + 0, 0, den, true
  elseif #stored <= 50 then
    local w, f, d = string.match(stored, '^(%d+)%+(%d+)/(%d+)$')
    if w and #w <= 16 and #f <= 16 and #d <= 16 then whole, frac, over = w + 0, f + 0, d + 0 end
  end
  if not whole or whole >= 9007199254740992 or over >= 9007199254740992 or frac >= over then
    return -1
  end
  if frac > 0 and over ~= den then whole, frac = whole + 1, 0 end
  if whole > horizon or (whole == horizon and frac > window_frac) then
    whole, frac, normalized = horizon, window_frac, true
  end
  if whole > now or (whole == now and frac > 0) then
    tat, tat_frac = whole, frac
    if frac > 0 then
      text = string.format('%d+%d', whole, frac)
    elseif digits and not normalized then
      -- The stored digits are the TAT: no need to format it again.
      text = stored
    else
      text = string.format('%d', whole)
    end
  end
end

local cand, cand_frac = tat + step, tat_frac + step_frac
if cand_frac >= den then cand, cand_frac = cand + 1, cand_frac - den end
local fits = cand < horizon or (cand == horizon and cand_frac <= window_frac)
if (step > 0 or step_frac > 0) and (fits or normalized) then
  local w, f = tat, tat_frac
  if fits then w, f = cand, cand_frac end
  local ttl_us = w - now
  if f > 0 then ttl_us = ttl_us + 1 end
  local part = ttl_us % 1000
  local ttl_ms = (ttl_us - part) / 1000 + extra_ttl
  if part > 0 then ttl_ms = ttl_ms + 1 end
  if ttl_ms < 1 then ttl_ms = 1 end
  local value
  if f > 0 then value = string.format('%d+%d/%d', w, f, den) else value = string.format('%d', w) end
  redis.call('SET', key, value, 'PX', string.format('%d', ttl_ms))
end
-- One concatenation per reply.
if time then
  if text then return time[1] .. ' ' .. time[2] .. ' ' .. text end
  return time[1] .. ' ' .. time[2]
end
if text then return at .. ' ' .. text end
return at
