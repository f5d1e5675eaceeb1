-- Compare-and-delete: deletes KEYS[1] only if it holds the token ARGV[1],
-- then hands it to the first waiter of its queue. 1 if it did, else 0.
if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("del", KEYS[1])
  handoff(KEYS[1])
  return 1
end
return 0
