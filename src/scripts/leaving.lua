-- Leaving a queue, shared by the scripts that end a wait (after
-- handoff.lua).

-- The waiter `m` leaves the queue of key `k`, and what it was owed goes
-- on:
-- - a key reserved for it is handed to the next waiter;
-- - a turn that named it passes to the next waiter behind it whose
--   client hears it, told to try when the leaver would have (at once if
--   that time has passed);
-- - if it was first in line while the key waits for a waiter (reserved
--   for another, or free while a turn runs), it was the waiter told to
--   come next: the telling starts again from the new first waiter, so
--   that a waiter its client's told waiter stood for is told in its
--   stead;
-- - a free key that no turn keeps goes to whoever waits for it.
local function leave(k, m)
  local q = queue(k)
  local t = turn_key(k)
  local rk = redis.pcall("zrank", q, m)
  redis.pcall("zrem", q, m)
  local v = redis.call("get", k)
  if v == "reserved " .. m then
    redis.call("del", k)
    handoff(k)
    return
  end
  local named = redis.pcall("get", t)
  local turning = type(named) == "string"
  if type(rk) == "number" and named == m then
    local p = redis.pcall("pttl", t)
    local w = tonumber(string.match(m, "^(%d+)|"))
    redis.pcall("del", t)
    if type(p) == "number" and w then
      tell(q, t, nil, math.max(p - w, 0), rk, true)
    end
  elseif rk == 0 and ((not v and turning) or (v and string.find(v, "reserved ", 1, true) == 1)) then
    local at = 0
    if v then
      local p = redis.pcall("pttl", k)
      if type(p) == "number" and p > 0 then
        at = p
      end
    end
    tell(q, t, string.match(m, "|(redlock%-mio:wake:%x+)$"), at, 0, false)
  elseif not v and not turning then
    handoff(k)
  end
end
