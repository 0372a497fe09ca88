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
-- ARGV[3]  r, the number of rules, then 5 arguments per rule:
--   den >= 1          the denominator of every fraction (1 when T is a whole number of us)
--   window, window_frac  the burst window B*T: whole microseconds, and the fraction of a
--                     microsecond in units of 1/den us (< den)
--   now               microseconds since the flowguard epoch, or "" for the server's TIME
--   extra_ttl         milliseconds added to the key's expiry (0 in server-time mode)
-- KEYS     the n keys (already prefixed and length-bounded by the client), or none: then they
--          are the n arguments after the rules (a Redis Cluster node's batch: keys of several
--          slots of that node)
-- then 3 arguments per request, in request order:
--   rule              its rule's number (1 .. r)
--   step, step_frac   n*T for a request of cost n, as window is given; n*T = 0 peeks
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
-- Requests usually share a rule, which is parsed when it changes, so a call allocates nothing but
-- its reply (and, for 'a', a table of the keys it has seen).
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
local EXACT = 9007199254740992

local mode, n, r = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not (n and r) or n < 1 or r < 1 or (mode ~= 's' and mode ~= 't' and mode ~= 'a') then
  return {2}
end
local declared = #KEYS > 0
if declared and #KEYS ~= n then
  return {2}
end
local server_now
-- The rule of the current request (requests usually share one): parsed when it changes.
local rule, den, window, window_frac, rule_now, extra_ttl = 0, nil, 0, 0, 0, 0
local base_arg = 3 + 5 * r
local item_arg = base_arg
if not declared then item_arg = base_arg + n end

local out, k = {}, 0
local pending, order, committed
if mode == 'a' then
  pending, order, committed, k = {}, {}, 1, 1
end
for i = 1, n do
  local o = item_arg + 3 * (i - 1)
  local key
  if declared then key = KEYS[i] else key = ARGV[base_arg + i] end
  local j = tonumber(ARGV[o + 1])
  local step, step_frac = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  if j ~= rule then
    rule, den = j, nil
    if j and j >= 1 and j <= r and j % 1 == 0 then
      local p = 3 + 5 * (j - 1)
      local d, w, wf = tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3])
      local at, x = ARGV[p + 4], tonumber(ARGV[p + 5])
      if at == '' then
        if not server_now then
          local t = call('TIME')
          server_now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
        end
        at = server_now
      else
        at = tonumber(at)
        if at and at >= EXACT then at = nil end
      end
      if d and w and wf and x and at and d >= 1 and wf < d and x < EXACT then
        den, window, window_frac, rule_now, extra_ttl = d, w, wf, at, x
      end
    end
  end
  local status, allowed, tat, tat_frac, now, base, base_frac = 0, 0, 0, 0, 0, 0, 0
  if not (key and den and step and step_frac) or step_frac >= den then
    status = 2
  else
    now = rule_now
    local horizon = now + window
    local normalized = false
    tat = now
    local earlier = pending and pending[key]
    if earlier then
      tat, tat_frac = earlier[1], earlier[2]
      if tat_frac > 0 and earlier[3] ~= den then tat, tat_frac = tat + 1, 0 end
      base, base_frac = earlier[4], earlier[5]
      if base_frac > 0 and earlier[9] ~= den then base, base_frac = base + 1, 0 end
    else
      local stored
      if mode == 't' then
        stored = pcall('GET', key)
        if type(stored) == 'table' then status = 3 end
      else
        stored = call('GET', key)
      end
      if status == 0 and stored then
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
          status = 1
        else
          if frac > 0 and over ~= den then whole, frac = whole + 1, 0 end
          if whole > horizon or (whole == horizon and frac > window_frac) then
            whole, frac, normalized = horizon, window_frac, true
          end
          if whole > now or (whole == now and frac > 0) then tat, tat_frac = whole, frac end
        end
      end
      base, base_frac = tat, tat_frac
    end
    if status == 0 then
      local cand, cand_frac = tat + step, tat_frac + step_frac
      if cand_frac >= den then cand, cand_frac = cand + 1, cand_frac - den end
      if cand < horizon or (cand == horizon and cand_frac <= window_frac) then allowed = 1 end
      local spends = step > 0 or step_frac > 0
      local writes = spends and (mode == 'a' or allowed == 1 or normalized)
      local value, ttl
      if writes then
        local w, f = tat, tat_frac
        if allowed == 1 or mode == 'a' then w, f = cand, cand_frac end
        local ttl_us = w - now
        if f > 0 then ttl_us = ttl_us + 1 end
        local ttl_ms = (ttl_us - ttl_us % 1000) / 1000 + extra_ttl
        if ttl_us % 1000 > 0 then ttl_ms = ttl_ms + 1 end
        if ttl_ms < 1 then ttl_ms = 1 end
        if f > 0 then value = format('%d+%d/%d', w, f, den) else value = format('%d', w) end
        ttl = format('%d', ttl_ms)
      end
      if mode == 'a' then
        if allowed == 0 then committed = 0 end
        local e = pending[key]
        if not e then
          e = {0, 0, den, base, base_frac, false, false, false, den}
          pending[key] = e
          order[#order + 1] = key
        end
        e[1], e[2], e[3] = cand, cand_frac, den
        if writes then e[6], e[7], e[8] = value, ttl, true end
      elseif writes then
        if mode == 't' then
          local done = pcall('SET', key, value, 'PX', ttl)
          if type(done) == 'table' and done.err then status = 3 end
        else
          call('SET', key, value, 'PX', ttl)
        end
      end
    end
    if status ~= 0 then
      allowed, tat, tat_frac, now, base, base_frac = 0, 0, 0, 0, 0, 0
    end
  end
  if mode == 'a' then
    if status ~= 0 then committed = 0 end
    out[k + 1], out[k + 2], out[k + 3], out[k + 4] = status, allowed, tat, tat_frac
    out[k + 5], out[k + 6], out[k + 7] = now, base, base_frac
    k = k + 7
  else
    out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = status, allowed, tat, tat_frac, now
    k = k + 5
  end
end
if mode == 'a' then
  out[1] = committed
  if committed == 1 then
    for _, key in ipairs(order) do
      local e = pending[key]
      if e[8] then call('SET', key, e[6], 'PX', e[7]) end
    end
  end
end
return out
