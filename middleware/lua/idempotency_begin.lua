-- idempotency_begin.lua: claim an idempotency key for one run, or say why
-- not. The claim is SET NX PX: only one run holds a key at a time, and a
-- claim whose worker died expires by itself.
--
-- KEYS[1] <prefix>:idem:{<hash>}, <hash> the first 32 hex digits of the
--         SHA-256 of the idempotency key (middleware/keys.go)
--         STRING "running:<token>" (a run holds it; TTL = the lease, renewed
--         while the run lasts) or "done" (a run finished; TTL = retention)
-- ARGV[1] token of this run (random, unique per run)
-- ARGV[2] lease, ms
-- Reply: {"run", 0}      claimed: run the handler
--        {"done", pttl}  a run already finished: skip it (pttl ms left)
--        {"busy", pttl}  another run holds it now (pttl ms of its lease left)

local key = KEYS[1]
if redis.call('SET', key, 'running:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {'run', 0}
end
local v = redis.call('GET', key)
local pttl = redis.call('PTTL', key)
if v == 'done' then
  return {'done', pttl}
end
if not v then
  -- Expired between the two calls: impossible inside a script (time stands
  -- still for its keys), but claim it rather than reply something odd.
  redis.call('SET', key, 'running:' .. ARGV[1], 'PX', ARGV[2])
  return {'run', 0}
end
return {'busy', pttl}
