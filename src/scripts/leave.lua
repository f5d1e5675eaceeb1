-- A waiter leaves the queues of KEYS: takes the member ARGV[1] off each;
-- a key reserved for it is handed on; a turn that named it passes to the
-- next waiter behind it whose client hears it, told to try when the
-- leaver would have. Always 1.
local m = ARGV[1]
local mine = "reserved " .. m
for i = 1, #KEYS do
  local k = KEYS[i]
  local q = queue(k)
  local t = turn_key(k)
  local rk = redis.pcall("zrank", q, m)
  redis.pcall("zrem", q, m)
  if redis.call("get", k) == mine then
    redis.call("del", k)
    handoff(k)
  elseif type(rk) == "number" and redis.pcall("get", t) == m then
    local p = redis.pcall("pttl", t)
    local w = tonumber(string.match(m, "^(%d+)|"))
    redis.pcall("del", t)
    if type(p) == "number" and w then
      tell(q, t, nil, math.max(p - w, 0), rk, true)
    end
  end
end
return 1
