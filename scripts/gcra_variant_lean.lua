-- gcra_variant_lean.lua: a PROPOSAL, measured by examples/redis_cost.rs; the crate does not use it.
--
-- Same KEYS/ARGV, same decisions and same stored state (one string, SET .. PX) as
-- src/gcra/redis/gcra.lua (the version on the `redis` branch, with the exact `remaining`). One change:
-- the script returns the state, not the report. Building the five-element reply (two divisions,
-- floor, the rounding fix, a five-slot table and its conversion to RESP) is most of what the
-- script spends beyond GET + SET + TIME; the client can derive the same report exactly, in
-- integer arithmetic, in the pure core where it is unit-tested anyway.
--
-- KEYS[1]  the limited identity (already prefixed and length-bounded by the client)
-- ARGV[1]  emission interval T, in microseconds (integer >= 1)
-- ARGV[2]  burst B (integer >= 1)
-- ARGV[3]  cost n (integer, 0 <= n <= B; 0 peeks)
-- ARGV[4]  now in microseconds since the flowguard epoch, or "" to use the server's TIME
-- ARGV[5]  extra TTL in milliseconds added to the key's expiry (0 in server-time mode)
--
-- Returns {allowed (0/1), tat_us, now_us}: tat_us is the TAT after the call (the new one when
-- allowed, max(stored, now) when denied). With window = B*T the client computes:
--   remaining      = max(0, floor((now + window - tat) / T))
--   retry_after_us = tat + n*T - window - now        (denied only)
--   reset_after_us = tat - now
-- Integers below 2^53 throughout, as in gcra.lua.

local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
if not interval or interval < 1 or not burst or burst < 1 or not cost or cost < 0 then
  return redis.error_reply('ERR flowguard: invalid quota arguments')
end
if cost > burst then
  return redis.error_reply('ERR flowguard: cost exceeds burst')
end

local now
if ARGV[4] == nil or ARGV[4] == '' then
  local t = redis.call('TIME')
  now = (tonumber(t[1]) - 1700000000) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[4])
  if not now then
    return redis.error_reply('ERR flowguard: invalid explicit time')
  end
end

local window = interval * burst
local tat = now
local stored = redis.call('GET', KEYS[1])
if stored then
  local parsed = tonumber(stored)
  if not parsed then
    return redis.error_reply('ERR flowguard: key holds a value that is not a GCRA state')
  end
  if parsed > now then
    tat = parsed
  end
end

local candidate = tat + cost * interval
local allowed, at = 1, candidate
if candidate - now <= window then
  if cost > 0 then
    local ttl_ms = math.ceil((candidate - now) / 1000) + (tonumber(ARGV[5]) or 0)
    if ttl_ms < 1 then
      ttl_ms = 1
    end
    redis.call('SET', KEYS[1], string.format('%d', candidate), 'PX', string.format('%d', ttl_ms))
  end
else
  allowed, at = 0, tat
end

return {allowed, at, now}
