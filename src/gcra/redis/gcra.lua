-- flowguard GCRA: one string value (the TAT) per key; one call decides one or several requests,
-- each in O(1), in the order given.
--
-- ARGV[1]  the mode:
--            's' (single)   one request; a failing GET or SET raises the call's error
--            't' (tolerant) each request as if alone; a request whose GET or SET fails (a key of
--                           another type, a key this node does not serve, ...) is not decided:
--                           status 3, nothing changed, and the others go on
--            'a' (all)      all or nothing: allowed only if every request fits (the same key twice
--                           sums its costs); then every key is written, otherwise none
-- ARGV[2]  n, the number of requests
-- KEYS     the n keys (already prefixed and length-bounded by the client), or none: then they
--          are ARGV[3 .. n+2] (a Redis Cluster node's batch: keys of several slots of that node)
-- then 7 arguments per request, in request order:
--   step, step_frac   n*T for a request of cost n: whole microseconds, and the fraction of a
--                     microsecond in units of 1/den us (< den); n*T = 0 peeks
--   den >= 1          the denominator of every fraction (1 when T is a whole number of us)
--   window, window_frac  the burst window B*T, the same way
--   now               microseconds since the flowguard epoch, or "" for the server's TIME
--   extra_ttl         milliseconds added to the key's expiry (0 in server-time mode)
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
-- one window. A fraction over another denominator (a quota that changed) is rounded up to the
-- next whole microsecond.
--
-- Replies, per request in order ('s' and 't'): status, allowed (0/1), tat, tat_frac, now, where
-- tat + tat_frac/den = max(stored TAT, now) is the TAT the request was decided against (the
-- client derives the decision from it). Status 0: decided; 1: the key holds something that is not
-- a GCRA state; 2: invalid arguments; 3: not decided ('t' only). The other four are 0 unless the
-- status is 0.
-- 'a' replies committed (0/1) first, then per request: status, fits (0/1), tat, tat_frac, now,
-- base, base_frac, where tat is the TAT the request was tested against (max(stored, now) plus the
-- costs of the earlier requests on the same key) and base = max(stored, now) for its key.
-- committed is 1 iff every status is 0 and every request fits; only then was anything written.

local tonumber, find, match, format = tonumber, string.find, string.match, string.format
local call, pcall = redis.call, redis.pcall
local EXACT = 9007199254740992 -- 2^53: integers below it are exact doubles

local mode, n = ARGV[1], tonumber(ARGV[2])
local keys, at = KEYS, 2
if not n or n < 1 or (mode ~= 's' and mode ~= 't' and mode ~= 'a') then
  return {2}
end
if #KEYS == 0 then
  keys = {}
  for i = 1, n do
    keys[i] = ARGV[2 + i]
  end
  at = 2 + n
elseif #KEYS ~= n then
  return {2}
end

local server_now
local function clock(arg)
  if arg == '' then
    if not server_now then
      local t = call('TIME')
      server_now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
    end
    return server_now
  end
  local now = tonumber(arg)
  if now and now < EXACT then
    return now
  end
end

-- A stored value as (whole, frac) over den, clamped to the horizon; nil when it is not a state.
local function parse(stored, den, horizon, window_frac)
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
    return nil
  end
  if frac > 0 and over ~= den then
    whole, frac = whole + 1, 0
  end
  if whole > horizon or (whole == horizon and frac > window_frac) then
    return horizon, window_frac, true
  end
  return whole, frac, false
end

-- Writes the TAT `whole + frac/den` at `key`, living until then (rounded up to the millisecond)
-- plus the extra TTL. `set` is redis.call or redis.pcall; returns what it returned.
local function store(set, key, whole, frac, den, now, extra_ttl)
  local ttl_us = whole - now
  if frac > 0 then
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
  if frac > 0 then
    value = format('%d+%d/%d', whole, frac, den)
  else
    value = format('%d', whole)
  end
  return set('SET', key, value, 'PX', format('%d', ttl_ms))
end

local out = {}
-- 'a': per key, the TAT after the earlier requests on it (whole, frac, den), and what to write.
local pending, order = {}, {}
local committed = 1
for i = 1, n do
  local o = at + 7 * (i - 1)
  local key = keys[i]
  -- The arguments come from the client's exact arithmetic; only their presence and range are checked.
  local step, step_frac, den = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local window, window_frac = tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5])
  local extra_ttl = tonumber(ARGV[o + 7])
  local now = clock(ARGV[o + 6])
  local status, allowed, tat, tat_frac, base, base_frac = 0, 0, 0, 0, 0, 0
  if not (key and step and step_frac and den and window and window_frac and extra_ttl and now)
      or den < 1 or step_frac >= den or window_frac >= den or extra_ttl >= EXACT then
    status, now = 2, 0
  else
    -- The latest TAT the burst allows: now + B*T.
    local horizon = now + window
    local normalized = false
    tat, tat_frac = now, 0
    local earlier = pending[key]
    if earlier then
      -- 'a', a key already seen: decided against the sum of the earlier costs, not clamped.
      tat, tat_frac = earlier[1], earlier[2]
      if tat_frac > 0 and earlier[3] ~= den then
        tat, tat_frac = tat + 1, 0
      end
      base, base_frac = earlier[4], earlier[5]
      if base_frac > 0 and earlier[9] ~= den then
        base, base_frac = base + 1, 0
      end
    else
      local stored
      if mode == 't' then
        stored = pcall('GET', key)
        if type(stored) == 'table' then
          status = 3
        end
      else
        stored = call('GET', key)
      end
      if status == 0 and stored then
        local whole, frac
        whole, frac, normalized = parse(stored, den, horizon, window_frac)
        if not whole then
          status = 1
        elseif whole > now or (whole == now and frac > 0) then
          tat, tat_frac = whole, frac
        end
      end
      base, base_frac = tat, tat_frac
    end
    if status == 0 then
      -- tat' = tat + n*T, with the carry; allowed iff tat' <= now + B*T.
      local cand, cand_frac = tat + step, tat_frac + step_frac
      if cand_frac >= den then
        cand, cand_frac = cand + 1, cand_frac - den
      end
      if cand < horizon or (cand == horizon and cand_frac <= window_frac) then
        allowed = 1
      end
      local spends = step > 0 or step_frac > 0
      if mode == 'a' then
        if allowed == 0 then
          committed = 0
        end
        local entry = pending[key]
        if not entry then
          entry = {0, 0, den, base, base_frac, now, extra_ttl, false, den}
          pending[key] = entry
          order[#order + 1] = key
        end
        entry[1], entry[2], entry[3], entry[6], entry[7] = cand, cand_frac, den, now, extra_ttl
        entry[8] = entry[8] or spends
      elseif spends and (allowed == 1 or normalized) then
        local w, f = tat, tat_frac
        if allowed == 1 then
          w, f = cand, cand_frac
        end
        if mode == 't' then
          local done = store(pcall, key, w, f, den, now, extra_ttl)
          if type(done) == 'table' and done.err then
            status, allowed = 3, 0
          end
        else
          store(call, key, w, f, den, now, extra_ttl)
        end
      end
    end
    if status ~= 0 then
      allowed, tat, tat_frac, now, base, base_frac = 0, 0, 0, 0, 0, 0
    end
  end
  if mode == 'a' then
    if status ~= 0 then
      committed = 0
    end
    local k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4] = status, allowed, tat, tat_frac
    out[k + 5], out[k + 6], out[k + 7] = now, base, base_frac
  else
    local k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = status, allowed, tat, tat_frac, now
  end
end

if mode == 'a' then
  if committed == 1 then
    for _, key in ipairs(order) do
      local e = pending[key]
      if e[8] then
        store(call, key, e[1], e[2], e[3], e[6], e[7])
      end
    end
  end
  table.insert(out, 1, committed)
end
return out
