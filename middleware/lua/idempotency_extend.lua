-- idempotency_extend.lua: renew the lease of a claim while its run goes on,
-- only if the claim is still this run's.
--
-- KEYS[1] <prefix>:idem:{<hash>} STRING (see idempotency_begin.lua)
-- ARGV[1] token of this run
-- ARGV[2] lease, ms
-- Reply: 1 when renewed, 0 when the claim is no longer this run's.

if redis.call('GET', KEYS[1]) == 'running:' .. ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
