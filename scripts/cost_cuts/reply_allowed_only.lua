-- cost_cuts/reply_allowed_only.lua: MEASUREMENT ONLY, not a proposal. flowguard's gcra.lua (redis branch version)
-- with a one-integer reply (allowed) instead of the five-element report, to price that part with
--   cargo run --release --features redis --example redis_cost -- --script reply_allowed_only=scripts/cost_cuts/reply_allowed_only.lua
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
    redis.call('SET', KEYS[1], string.format('%d', candidate), 'PX', string.format('%d', ttl_ms))
  end
else
  allowed, at, retry_after = 0, tat, candidate - window - now
end

return allowed
