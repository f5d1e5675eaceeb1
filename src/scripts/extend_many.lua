-- Extends every key to ARGV[2] ms if all hold the token ARGV[1], else
-- none; never shortens one (GT). 1 if it did, else 0.
for i = 1, #KEYS do
  if redis.call("get", KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call("pexpire", KEYS[i], ARGV[2], "GT")
end
return 1
