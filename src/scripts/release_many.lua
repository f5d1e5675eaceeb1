-- Deletes every key that holds the token ARGV[1], handing each to the
-- first waiter of its queue. 1 if any did, else 0.
local n = 0
for i = 1, #KEYS do
  if redis.call("get", KEYS[i]) == ARGV[1] then
    n = n + redis.call("del", KEYS[i])
    handoff(KEYS[i])
  end
end
if n > 0 then
  return 1
end
return 0
