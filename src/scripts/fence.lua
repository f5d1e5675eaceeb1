-- What the fence scripts share: KEYS[1] is the fence counter, KEYS[2] the
-- loss id (the clock-start mark), the resources from KEYS[3].

-- Whether `v`, read from the counter or the loss id, is what the crate
-- writes there: missing, or a positive integer without leading zeros
-- that a Lua number holds exactly (below 2^53).
local function ok(v)
  return v == false
    or (type(v) == "string" and #v <= 16 and string.find(v, "^[1-9]%d*$") ~= nil
      and tonumber(v) < 9007199254740992)
end

-- The counter and the loss id (the loss id read only where the counter
-- is missing, unless `both`), or the error for the first that holds what
-- the crate never writes there.
local function counters(both)
  local c = redis.pcall("get", KEYS[1])
  if not ok(c) then
    return nil, nil, redis.error_reply("FOREIGNKEY " .. KEYS[1])
  end
  local l = false
  if both or not c then
    l = redis.pcall("get", KEYS[2])
    if not ok(l) then
      return nil, nil, redis.error_reply("FOREIGNKEY " .. KEYS[2])
    end
  end
  return c, l, nil
end

-- The server's clock in µs, as text: a loss id, or the time a read
-- reports.
local function clock()
  local t = redis.call("time")
  return t[1] .. string.format("%06d", t[2])
end

-- The reply of an acquire that took its resources: the counter INCRed,
-- or, the counter missing, minus the loss id (set now if absent).
local function fence(c, l)
  if c then
    return redis.call("incr", KEYS[1])
  end
  if not l then
    l = clock()
    redis.call("set", KEYS[2], l)
  end
  return -tonumber(l)
end
