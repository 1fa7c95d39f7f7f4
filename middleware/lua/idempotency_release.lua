-- idempotency_release.lua: give up a claim after a failed run, so that a
-- retry can run, but only if the claim is still this run's: a claim that
-- expired and was taken by another run, or a key another run marked done,
-- is left alone.
--
-- KEYS[1] <prefix>:idem:{<hash>} STRING (see idempotency_begin.lua)
-- ARGV[1] token of this run
-- Reply: 1 when the claim was deleted, 0 when it was not this run's.

if redis.call('GET', KEYS[1]) == 'running:' .. ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
