-- floor_gcra.lua: MEASUREMENT REFERENCE ONLY. It decides nothing; do not use it to limit anything.
--
-- The least that any coalesced GCRA call on flowguard's data layout (one string key per limited
-- identity, holding its TAT, with its own expiry) has to ask of Redis for n requests: one MGET of
-- the n keys and, per key, one SET key value PX ttl. Every value and TTL is precomputed by the
-- client, so the script parses nothing and computes nothing. It bounds from below the server time
-- per decision of src/gcra/redis/gcra.lua's coalesced path (mode 't' or 'u', one kind, keys read
-- by one MGET, every request allowed), which must do this much and more (parse the stored values,
-- add, compare, format the new ones, build a reply per request). harness/scripts/cell_bench.sh runs it
-- beside that script, the naive script and redis-cell, and script_instructions.sh counts it.
--
-- KEYS     the n keys
-- ARGV[1]  the form of each write:
--            'set'  SET key value PX ttl
--            'get'  SET key value PX ttl GET, what gcra.lua sends for a key the MGET found no
--                   value for. Inside a script it costs less than the plain SET: the old value,
--                   nil for no key, is cheaper to hand to Lua than SET's status reply, which
--                   becomes a Lua table.
-- then     either value_1 .. value_n, ttl_1 .. ttl_n (each key's value and PX in milliseconds),
--          or one value and one TTL written to every key
--
-- Returns n, the number of keys written (one integer: the reply a real call builds per request is
-- not part of the floor).

local call, keys, argv = redis.call, KEYS, ARGV
local n = #keys
call('MGET', unpack(keys))
local form = argv[1]
if form ~= 'set' and form ~= 'get' then
  return redis.error_reply('ARGV[1] must be set or get')
end
if #argv == 3 then
  local value, ttl = argv[2], argv[3]
  if form == 'get' then
    for i = 1, n do
      call('SET', keys[i], value, 'PX', ttl, 'GET')
    end
  else
    for i = 1, n do
      call('SET', keys[i], value, 'PX', ttl)
    end
  end
elseif form == 'get' then
  for i = 1, n do
    call('SET', keys[i], argv[1 + i], 'PX', argv[1 + n + i], 'GET')
  end
else
  for i = 1, n do
    call('SET', keys[i], argv[1 + i], 'PX', argv[1 + n + i])
  end
end
return n
