-- Raise: if every resource holds the token ARGV[1], raises the counter to
-- at least ARGV[2], deletes the loss id and returns 1; 0 if a resource
-- does not hold the token; -1 if the counter is missing (nothing done).
for i = 3, #KEYS do
  if redis.pcall("get", KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
local c, l, err = counters(true)
if err then
  return err
end
if not c then
  return -1
end
if l then
  redis.call("del", KEYS[2])
end
if tonumber(c) < tonumber(ARGV[2]) then
  redis.call("set", KEYS[1], ARGV[2])
end
return 1
