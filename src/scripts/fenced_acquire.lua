-- Fenced acquire, all or nothing: nil if a resource exists. Else sets
-- each to the token ARGV[1] (PX ARGV[2]) and replies with its fence.
for i = 3, #KEYS do
  if redis.call("exists", KEYS[i]) == 1 then
    return false
  end
end
local c, l, err = counters(false)
if err then
  return err
end
for i = 3, #KEYS do
  redis.call("set", KEYS[i], ARGV[1], "px", ARGV[2])
end
return fence(c, l)
