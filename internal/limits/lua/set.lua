-- set.lua: set or remove one concurrency limit of a queue, and let in the
-- waiting jobs the new limit has room for (at most LET_IN_MAX a call; the
-- caller calls again while the reply says more could go in).
--
-- KEYS[1..6] the queue's limit keys (lib.lua)
-- KEYS[7]    the queue's ready structure (a LIST or a STREAM, per ARGV[3])
-- KEYS[8]    the queue's wake signal (internal/wake)
-- ARGV[1]    the class: "" for the queue, else a kind
-- ARGV[2]    the limit, >= 1; 0 removes it
-- ARGV[3]    "list" or "stream" (limit_push)
-- ARGV[4]    the stream's consumer group ("" for a list)
-- ARGV[5]    the jobs earlier calls of this change let in
-- Reply: {let in, still waiting}

local L = limit_keys(1)
local vs, admit = collect()
local let, left = limit_set(L, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5]), admit)
limit_push(KEYS[7], ARGV[3], ARGV[4], KEYS[8], vs)
return {let, left}
