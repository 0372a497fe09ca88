-- naive_gcra.lua: MEASUREMENT REFERENCE ONLY. Do not use it to limit anything.
--
-- A faithful copy of the naive GCRA Lua script that circulates in blog posts and gists
-- ("rate limiting with Redis and GCRA"), kept here so `examples/redis_cost.rs` can compare the
-- server CPU of flowguard's script (src/gcra/redis/gcra.lua) with it on the same server.
--
-- KEYS[1]  the limited identity
-- ARGV[1]  now, the CLIENT's clock, in seconds (float, e.g. 1764495532.123456)
-- ARGV[2]  emission interval T in seconds (float)
-- ARGV[3]  burst B
-- ARGV[4]  cost: accepted and ignored
--
-- Returns {allowed (0/1), retry_after_ms}.
--
-- Known bugs (the reasons flowguard does not do this):
-- * Cost is ignored: the only check is `now < tat - tau`, so a cost-50 batch passes with one
--   token left, and so does a cost larger than the burst (which can never be honest).
-- * Client time: every pod sends its own clock. Pods with skewed clocks disagree on the TAT; a pod
--   whose clock runs ahead pushes the TAT into the future for everyone, a pod that lags is denied
--   (or, seen the other way round, gets extra burst).
-- * The TTL is whole seconds (`EX`), rounded up: idle keys stay up to a second longer than the
--   state needs, and the sub-second state lives in a float that Redis formats with %.17g.
-- * A key holding a non-number makes tonumber() return nil and the script dies with a Lua
--   arithmetic error instead of a clear message.

local key = KEYS[1]
local now = tonumber(ARGV[1])
local emission_interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tau = emission_interval * (burst - 1)

local tat = redis.call('GET', key)
if tat then
  tat = tonumber(tat)
else
  tat = now
end

if now < tat - tau then
  return {0, math.ceil((tat - tau - now) * 1000)}
end

local new_tat = math.max(tat, now) + emission_interval
redis.call('SET', key, new_tat, 'EX', math.ceil(new_tat - now))
return {1, 0}
