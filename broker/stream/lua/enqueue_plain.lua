-- enqueue_plain.lua: append a batch of plain messages of one queue (stream
-- driver): none delayed, none with a unique key or a group, and the queue
-- without a cap. enqueue.lua does the same for such a batch, but carries
-- the timer and group libraries, whose functions every call defines again;
-- this one is what the common batch needs and no more. When the stream does
-- not exist it is created together with its consumer group (read from ID
-- 0), in this same script, so the group never misses an entry.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM, field "m" = encoded message
-- KEYS[2]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake), set
--          when entries are added
-- ARGV is enqueue.lua's for such a batch:
-- ARGV[1]  consumer group name
-- ARGV[2]  max length of the queue: 0 (the caller sends this script only
--          for a queue without a cap)
-- ARGV[3]  "1" (one item per message)
-- ARGV[4...] the encoded messages, in order
-- Reply: {} (nothing is refused).

if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
end
for i = 4, #ARGV do
  redis.call('XADD', KEYS[1], '*', 'm', ARGV[i])
end
redis.call('ZADD', KEYS[2], 0, 'w')
return {}
