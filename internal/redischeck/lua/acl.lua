-- acl.lua: which of the commands a driver sends the ACL user running this
-- script may not send, and why. Each command is first looked up in the
-- user's ACL with redis.acl_check_cmd (Redis 7.0), which runs nothing. Only
-- a command it refuses is then called, with redis.pcall, for Redis's reason
-- (the command, or its keys or channel): the ACL refuses that call before
-- it runs, so nothing is ever read or written.
--
-- KEYS: none (the keys named in ARGV are never touched).
-- ARGV: one group per command, as the driver sends it: n, then its n
--   words: name (and subcommand), arguments, keys and channels included.
-- Reply: one code per group, in order: 0 allowed; 1 the command itself is
--   refused; 2 refused for its keys or channel; 3 refused, reason unknown
--   (a command scripts may not call, such as SUBSCRIBE: the refusal
--   cannot be asked for its reason); 4 the server does not know the
--   command. The status "NO_ACL_CHECK" when the server has no
--   redis.acl_check_cmd.
-- Bounded: one iteration per group; the caller sends fewer than 100.

if not redis.acl_check_cmd then
  return redis.status_reply('NO_ACL_CHECK')
end
local out, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local known, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
  local code = 0
  if not known then
    code = 4
  elseif not allowed then
    local r = redis.pcall(unpack(ARGV, i + 1, i + n))
    local e = type(r) == 'table' and r.err or ''
    if string.find(e, 'not allowed from script', 1, true) then
      code = 3
    elseif string.find(e, 'key', 1, true) or string.find(e, 'channel', 1, true) then
      code = 2
    else
      code = 1
    end
  end
  out[#out + 1] = code
  i = i + 1 + n
end
return out
