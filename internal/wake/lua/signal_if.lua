-- signal_if.lua: set the wake signal KEYS[2] (its one member "w", see
-- package wake) only while KEYS[1] exists: a consumer hands a wake-up back
-- this way, so that one given back after the work is gone (taken by
-- another consumer, or the queue deleted) wakes no one for nothing and
-- does not outlive the queue's other keys.
--
-- KEYS[1] the key whose existence says there is work (a list queue's ready
--         LIST, a stream queue's STREAM)
-- KEYS[2] the wake signal, a ZSET
-- Reply: 1 when the signal was set, else 0.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], 0, 'w')
return 1
