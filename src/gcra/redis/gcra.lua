-- flowguard GCRA: one string value (the TAT) per key; one call decides several requests, each in
-- O(1), in the order given. A call of one request runs lone.lua, which decides it as this script
-- would and pays for none of what a call of several needs.
--
-- ARGV[1]  the mode:
--            't' (tolerant) each request as if alone; a request whose GET or SET fails (a key of
--                           another type, a key this node does not serve, ...) is not decided:
--                           status 3, nothing changed, and the others go on
--            'u'            't' for declared keys the client knows to be all distinct: the common
--                           path keeps no record of its writes (no key is named again to read it)
--            'a' (all)      all or nothing: allowed only if every request fits (the same key twice
--                           sums its costs); then every key is written, otherwise none
-- ARGV[2]  n, the number of requests
-- ARGV[3]  r, the number of rules, then 5 arguments per rule:
--   den >= 1          the denominator of every fraction (1 when T is a whole number of us)
--   window, window_frac  the burst window B*T: whole microseconds, and the fraction of a
--                     microsecond in units of 1/den us (< den)
--   now               microseconds since the flowguard epoch, or "" for the server's TIME
--   extra_ttl         milliseconds added to the key's expiry (0 in server-time mode)
-- then q, the number of kinds of request, then 3 arguments per kind:
--   rule              its rule's number (1 .. r)
--   step, step_frac   n*T for a request of cost n, as window is given; n*T = 0 peeks
-- KEYS     the n keys (already prefixed and length-bounded by the client), or none: then they
--          are the n arguments after the kinds (a Redis Cluster node's batch: keys of several
--          slots of that node)
-- then, only when q > 1, each request's kind (1 .. q), in request order. The requests of a call
-- usually share one kind (one quota, one cost): then they need no argument of their own.
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
-- Reading: the keys of a 't' call that declares them are read before anything is written, with
-- one MGET (Redis 7.0+; nothing else runs during a call, and the call's own writes are
-- remembered, so a key named again is decided against the earlier request's write). MGET answers
-- nil for a key of another type as for no key, so a request whose key it answered nil for writes
-- with SET .. GET, which fails on a key of another type and then changes nothing, or, if it
-- writes nothing, reads its key again with GET: either fails as a lone request's GET would. When
-- the MGET fails (a key this node does not serve, a user without +mget, ...), and in 'a' calls
-- and a Redis Cluster node's batches (keys of several slots, which one MGET refuses), each
-- key is read with its own GET.
--
-- The TTL is the TAT rounded up to a millisecond, from the decision's time (plus extra_ttl).
--
-- Requests usually share a kind (rule and cost), which is parsed once per call; a value or a TTL
-- equal to the previous one is not formatted again. The common coalesced call (tolerant, one
-- kind, keys read by one MGET) takes a loop of its own that decides exactly as the general one:
-- every key with no value is decided against now, so that decision, its value and its TTL are
-- computed once per call, not once per key.
--
-- Replies ('t'): first, per rule, its now (0 for a rule no request used validly); then per
-- request in order: tat when the request was decided against the TAT tat (a whole number of
-- microseconds: tat = max(stored TAT, now); the client derives the decision from it); -4, tat,
-- tat_frac when that TAT has a fraction tat_frac/den; or -status: 1, the key holds something that
-- is not a GCRA state; 2, invalid arguments; 3, not decided ('t' only).
-- 'a' replies committed (0/1) first, then per request: status, fits (0/1), tat, tat_frac, now,
-- base, base_frac, where tat is the TAT the request was tested against (max(stored, now) plus the
-- costs of the earlier requests on the same key) and base = max(stored, now) for its key.
-- committed is 1 iff every status is 0 and every request fits; only then was anything written.

local tonumber, find, match, format, unpack = tonumber, string.find, string.match, string.format, unpack
local call, pcall = redis.call, redis.pcall
-- Keys per MGET (unpack has a bound on the values it returns).
local CHUNK = 256

local mode, n, r = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local distinct = mode == 'u'
if distinct then mode = 't' end
if not (n and r) or n < 1 or r < 1 or (mode ~= 't' and mode ~= 'a') then
  return {2}
end
local kind_arg = 4 + 5 * r
local q = tonumber(ARGV[kind_arg])
if not q or q < 1 then
  return {2}
end
local declared = #KEYS > 0
if declared and #KEYS ~= n then
  return {2}
end
-- Undeclared keys are ARGV[key_base + i]; each request's kind (q > 1) is ARGV[key_arg + i].
local key_base = kind_arg + 3 * q
local key_arg = key_base
if not declared then key_arg = key_base + n end

-- The server's TIME: microseconds since the flowguard epoch, read once.
local server_now

-- read[i]: the i-th key's value from the MGET, false for none (read is false without an MGET);
-- recheck: read each key that has no value there with its own GET. MGET is used from Redis 7.0
-- on (SET .. GET needs 6.2), for declared keys (a Redis Cluster node's batch spans slots, which
-- one MGET may not). written[key]: what this call wrote to key (a table once it wrote).
local read, recheck, written = false, true, false
if mode == 't' and n > 1 and declared and redis.REDIS_VERSION_NUM then
  recheck = false
  if n <= CHUNK then
    read = pcall('MGET', unpack(KEYS))
    if read.err then read, recheck = false, true end
  else
    read = {}
    for first = 1, n, CHUNK do
      local last = first + CHUNK - 1
      if last > n then last = n end
      local got = pcall('MGET', unpack(KEYS, first, last))
      if got.err then
        read, recheck = false, true
        break
      end
      for i = first, last do read[i] = got[i - first + 1] end
    end
  end
end

local out, k = {}, 0
local pending, order, committed
if mode == 'a' then
  pending, order, committed, k = {}, {}, 1, 1
else
  for j = 1, r do out[j] = 0 end
  k = r
end

-- The current kind, and what it names: den is nil when the kind is invalid. horizon = now + B*T;
-- spends: its cost is not 0.
local cur, den, window, window_frac, now, extra_ttl, step, step_frac, horizon, spends

-- The helpers below take what they read as arguments and return what they find. A function that
-- used the call's locals directly would capture each of them, an allocation per local and call
-- (about 400 server instructions each, measured), which a call of one decision pays in full;
-- they capture nothing: the library functions come as arguments too, and 2^53
-- (9007199254740992, below which integers are exact in Lua's doubles) is written out.

-- Kind number kind's rule and step, parsed from ARGV (reading TIME at most once per call):
-- returns kind, then den, window, window_frac, now, extra_ttl, step, step_frac, horizon, spends
-- (den nil when the kind cannot be decided), then server_now. out[j] is set to the rule's now
-- when its rule is valid (not in mode 'a').
local function select_kind(kind, server_now, q, r, kind_arg, out, mode, tonumber, call)
  local j, step, step_frac
  if kind and kind >= 1 and kind <= q and kind % 1 == 0 then
    local p = kind_arg + 3 * (kind - 1)
    j = tonumber(ARGV[p + 1])
    step, step_frac = tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3])
  end
  if j and j >= 1 and j <= r and j % 1 == 0 and step and step_frac then
    local p = 3 + 5 * (j - 1)
    local d, w, wf = tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3])
    local at, x = ARGV[p + 4], tonumber(ARGV[p + 5])
    if at == '' then
      if not server_now then
        local t = call('TIME')
        server_now = (t[1] - 1700000000) * 1000000 + t[2]
      end
      at = server_now
    else
      at = tonumber(at)
      if at and at >= 9007199254740992 then at = nil end
    end
    if d and w and wf and x and at and d >= 1 and wf < d and x < 9007199254740992 then
      if mode ~= 'a' then out[j] = at end
      if step_frac < d then
        return kind, d, w, wf, at, x, step, step_frac, at + w, step > 0 or step_frac > 0, server_now
      end
    end
  end
  return kind, nil, nil, nil, nil, nil, nil, nil, nil, nil, server_now
end

-- The TAT a stored value gives under a rule (den, horizon, window_frac, now): tat, tat_frac
-- (max(stored, now)) and whether the value was beyond the horizon (normalized); nil when it is
-- not a GCRA state.
local function state(stored, den, horizon, window_frac, now, find, match)
  local whole, frac, over
  if #stored <= 16 and find(stored, '^%d+$') then
    whole, frac, over = stored + 0, 0, den
  elseif #stored <= 50 then
    local w, f, d = match(stored, '^(%d+)%+(%d+)/(%d+)$')
    if w and #w <= 16 and #f <= 16 and #d <= 16 then
      whole, frac, over = w + 0, f + 0, d + 0
    end
  end
  if not whole or whole >= 9007199254740992 or over >= 9007199254740992 or frac >= over then
    return nil
  end
  if frac > 0 and over ~= den then whole, frac = whole + 1, 0 end
  local normalized = false
  if whole > horizon or (whole == horizon and frac > window_frac) then
    whole, frac, normalized = horizon, window_frac, true
  end
  if whole > now or (whole == now and frac > 0) then return whole, frac, normalized end
  return now, 0, normalized
end

-- The TAT after one request of step (step, step_frac) against tat, and whether it fits the
-- burst (horizon, window_frac).
local function spend(tat, tat_frac, step, step_frac, den, horizon, window_frac)
  local cand, cand_frac = tat + step, tat_frac + step_frac
  if cand_frac >= den then cand, cand_frac = cand + 1, cand_frac - den end
  return cand, cand_frac, cand < horizon or (cand == horizon and cand_frac <= window_frac)
end

-- The value and the PX argument that store the TAT w + f/den, decided at now (plus extra_ttl
-- milliseconds). In a call of several requests, memo holds the last whole value and TTL
-- formatted ({w, value, ttl, ttl_arg}), so that one equal to the previous one is not formatted
-- again; a call of one request has no memo (false), which would cost more than it saves.
local memo = n > 1 and {false, false, false, false}
local function encode(w, f, now, extra_ttl, den, memo, format)
  local ttl_us = w - now
  if f > 0 then ttl_us = ttl_us + 1 end
  local part = ttl_us % 1000
  local ttl_ms = (ttl_us - part) / 1000 + extra_ttl
  if part > 0 then ttl_ms = ttl_ms + 1 end
  if ttl_ms < 1 then ttl_ms = 1 end
  if not memo then
    if f > 0 then return format('%d+%d/%d', w, f, den), format('%d', ttl_ms) end
    return format('%d', w), format('%d', ttl_ms)
  end
  if ttl_ms ~= memo[3] then memo[3], memo[4] = ttl_ms, format('%d', ttl_ms) end
  if f > 0 then return format('%d+%d/%d', w, f, den), memo[4] end
  if w ~= memo[1] then memo[1], memo[2] = w, format('%d', w) end
  return memo[2], memo[4]
end

local fast = false
if mode == 't' and read and q == 1 then
  cur, den, window, window_frac, now, extra_ttl, step, step_frac, horizon, spends, server_now =
    select_kind(1, server_now, q, r, kind_arg, out, mode, tonumber, call)
  fast = den ~= nil
end

if fast then
  -- The common coalesced call: tolerant, one kind, keys read by MGET. A key with no value is
  -- decided against now, the same for every such key: its write is computed once.
  local fresh_value, fresh_ttl = false, false
  local fresh, fresh_frac, fresh_fits = spend(now, 0, step, step_frac, den, horizon, window_frac)
  if spends and fresh_fits then
    fresh_value, fresh_ttl = encode(fresh, fresh_frac, now, extra_ttl, den, memo, format)
  end
  -- state() reads no value under a denominator of 2^53 or more; the inlined copy below does
  -- not look at den, so it runs only under a smaller one.
  local keys, inline = KEYS, den < 9007199254740992
  for i = 1, n do
    local key = keys[i]
    local stored = written and written[key] or read[i]
    if not stored then
      -- No key, or one of another type (MGET answers nil for both): SET .. GET writes the
      -- first and fails on the second, changing nothing; without a write, GET tells them apart.
      local failed
      if fresh_value then
        local done = pcall('SET', key, fresh_value, 'PX', fresh_ttl, 'GET')
        failed = done and done.err
        if not (failed or distinct) then
          if not written then written = {} end
          written[key] = fresh_value
        end
      else
        failed = type(pcall('GET', key)) == 'table'
      end
      if failed then out[k + 1] = -3 else out[k + 1] = now end
      k = k + 1
    else
      local tat, tat_frac, normalized
      local len = #stored
      if inline and len <= 15 and find(stored, '^%d+$') then
        -- state(), inlined for the common value: a whole number of microseconds of at most 15
        -- digits (below 2^53).
        local whole, frac = stored + 0, 0
        normalized = false
        if whole > horizon then whole, frac, normalized = horizon, window_frac, true end
        if whole > now or (whole == now and frac > 0) then
          tat, tat_frac = whole, frac
        else
          tat, tat_frac = now, 0
        end
      else
        tat, tat_frac, normalized = state(stored, den, horizon, window_frac, now, find, match)
      end
      if not tat then
        out[k + 1] = -1
        k = k + 1
      else
        -- spend and reply, inlined: a Lua call costs about 300 server instructions, and this
        -- is the per-key path of the commonest call.
        local cand, cand_frac = tat + step, tat_frac + step_frac
        if cand_frac >= den then cand, cand_frac = cand + 1, cand_frac - den end
        local fits = cand < horizon or (cand == horizon and cand_frac <= window_frac)
        local failed = false
        if spends and (fits or normalized) then
          local w, f = tat, tat_frac
          if fits then w, f = cand, cand_frac end
          local value, ttl
          if f == 0 then
            -- encode(), inlined for a whole number of microseconds.
            local ttl_us = w - now
            local part = ttl_us % 1000
            local ttl_ms = (ttl_us - part) / 1000 + extra_ttl
            if part > 0 then ttl_ms = ttl_ms + 1 end
            if ttl_ms < 1 then ttl_ms = 1 end
            if ttl_ms ~= memo[3] then memo[3], memo[4] = ttl_ms, format('%d', ttl_ms) end
            if w ~= memo[1] then memo[1], memo[2] = w, format('%d', w) end
            value, ttl = memo[2], memo[4]
          else
            value, ttl = encode(w, f, now, extra_ttl, den, memo, format)
          end
          local done = pcall('SET', key, value, 'PX', ttl)
          failed = done.err
          if not (failed or distinct) then
            if not written then written = {} end
            written[key] = value
          end
        end
        if failed then
          out[k + 1] = -3
          k = k + 1
        elseif tat_frac > 0 then
          out[k + 1], out[k + 2], out[k + 3] = -4, tat, tat_frac
          k = k + 3
        else
          out[k + 1] = tat
          k = k + 1
        end
      end
    end
  end
  return out
end

local kind = 1
for i = 1, n do
  local key
  if declared then key = KEYS[i] else key = ARGV[key_base + i] end
  if q > 1 then kind = tonumber(ARGV[key_arg + i]) end
  if kind ~= cur then
    cur, den, window, window_frac, now, extra_ttl, step, step_frac, horizon, spends, server_now =
      select_kind(kind, server_now, q, r, kind_arg, out, mode, tonumber, call)
  end
  local status, allowed, tat, tat_frac, base, base_frac = 0, false, 0, 0, 0, 0
  if not (key and den) then
    status = 2
  else
    local normalized, verify = false, false
    tat = now
    local earlier = pending and pending[key]
    if earlier then
      tat, tat_frac = earlier[1], earlier[2]
      if tat_frac > 0 and earlier[3] ~= den then tat, tat_frac = tat + 1, 0 end
      base, base_frac = earlier[4], earlier[5]
      if base_frac > 0 and earlier[9] ~= den then base, base_frac = base + 1, 0 end
    else
      local stored = written and written[key]
      if not stored and read then stored = read[i] end
      if not stored then
        if not recheck then
          -- No value in the MGET: no key, or one of another type, which the SET .. GET that
          -- writes it, or else a GET, tells apart.
          verify = true
        elseif mode == 't' then
          stored = pcall('GET', key)
          if type(stored) == 'table' then status = 3 end
        else
          stored = call('GET', key)
        end
      end
      if status == 0 and stored then
        tat, tat_frac, normalized = state(stored, den, horizon, window_frac, now, find, match)
        if not tat then status, tat, tat_frac = 1, 0, 0 end
      end
      base, base_frac = tat, tat_frac
    end
    if status == 0 then
      local cand, cand_frac
      cand, cand_frac, allowed = spend(tat, tat_frac, step, step_frac, den, horizon, window_frac)
      local writes = spends and (mode == 'a' or allowed or normalized)
      local value, ttl
      if writes then
        local w, f = tat, tat_frac
        if allowed or mode == 'a' then w, f = cand, cand_frac end
        value, ttl = encode(w, f, now, extra_ttl, den, memo, format)
      end
      if mode == 'a' then
        if not allowed then committed = 0 end
        local e = pending[key]
        if not e then
          e = {0, 0, den, base, base_frac, false, false, false, den}
          pending[key] = e
          order[#order + 1] = key
        end
        e[1], e[2], e[3] = cand, cand_frac, den
        if writes then e[6], e[7], e[8] = value, ttl, true end
      elseif writes then
        local done
        if verify then
          done = pcall('SET', key, value, 'PX', ttl, 'GET')
        else
          done = pcall('SET', key, value, 'PX', ttl)
        end
        -- An error is a table with err; SET answers a status table, SET .. GET a nil (false).
        if done and done.err then
          status = 3
        else
          if not written then written = {} end
          written[key] = value
        end
      elseif verify and type(pcall('GET', key)) == 'table' then
        status = 3
      end
    end
  end
  if mode == 'a' then
    local fits = 0
    if allowed then fits = 1 end
    if status ~= 0 then
      committed = 0
      out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6], out[k + 7] =
        status, 0, 0, 0, 0, 0, 0
    else
      out[k + 1], out[k + 2], out[k + 3], out[k + 4] = 0, fits, tat, tat_frac
      out[k + 5], out[k + 6], out[k + 7] = now, base, base_frac
    end
    k = k + 7
  elseif status ~= 0 then
    out[k + 1] = -status
    k = k + 1
  elseif tat_frac > 0 then
    out[k + 1], out[k + 2], out[k + 3] = -4, tat, tat_frac
    k = k + 3
  else
    out[k + 1] = tat
    k = k + 1
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
