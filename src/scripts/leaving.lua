-- Leaving a queue, shared by the scripts that end a wait (after
-- handoff.lua). The waiter `m` leaves the queue of key `k`. A key
-- reserved for it is handed on, and so is a free key to whoever waits for it; a turn that
-- named it passes to the next waiter behind it whose client hears it,
-- told to try when the leaver would have (at once if that time has
-- passed).
local function leave(k, m)
  local q = queue(k)
  local t = turn_key(k)
  local rk = redis.pcall("zrank", q, m)
  redis.pcall("zrem", q, m)
  local v = redis.call("get", k)
  if v == "reserved " .. m then
    redis.call("del", k)
    handoff(k)
  elseif not v then
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
