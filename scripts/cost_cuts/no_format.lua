-- cost_cuts/no_format.lua: MEASUREMENT ONLY, not a proposal. flowguard's gcra.lua (redis branch version)
-- with numbers handed to redis.call as Lua numbers (Redis formats them, %.17g) instead of string.format('%d'), to price that part with
--   cargo run --release --features redis --example redis_cost -- --script no_format=scripts/cost_cuts/no_format.lua
-- KEYS/ARGV as gcra.lua.

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
local allowed, at, retry_after = 1, candidate, -1
if candidate - now <= window then
  if cost > 0 then
    local ttl_ms = math.ceil((candidate - now) / 1000) + (tonumber(ARGV[5]) or 0)
    if ttl_ms < 1 then
      ttl_ms = 1
    end
    redis.call('SET', KEYS[1], candidate, 'PX', ttl_ms)
  end
else
  allowed, at, retry_after = 0, tat, candidate - window - now
end

-- Tokens left: floor((now + window - at) / interval), never negative (an explicit clock that moved
-- backwards may leave a TAT beyond the window). The quotient of two integers below 2^53 can round
-- up to the next integer; the product check corrects that.
local room = now + window - at
local left = 0
if room > 0 then
  left = math.floor(room / interval)
  if left * interval > room then
    left = left - 1
  end
end
return {allowed, left, retry_after, at - now, now}
