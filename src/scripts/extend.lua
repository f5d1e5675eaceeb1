-- Compare-and-PEXPIRE: extends KEYS[1] to ARGV[2] ms only if it holds the
-- token ARGV[1], and never shortens it (GT). 1 if it holds the token.
if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("pexpire", KEYS[1], ARGV[2], "GT")
  return 1
end
return 0
