-- All or nothing: sets every key to the token ARGV[1] (PX ARGV[2]) if
-- none of them exists, else none. 1 if it did, else 0.
for i = 1, #KEYS do
  if redis.call("get", KEYS[i]) then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call("set", KEYS[i], ARGV[1], "px", ARGV[2])
end
return 1
