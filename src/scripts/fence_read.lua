-- Read: the counter, an integer, when it exists without a loss id. Else
-- (the counter missing, the loss id then set now if absent, or started
-- from the clock with no fence raised since) the text
-- "<loss id> <server time in µs> <counter, or 0>".
local c, l, err = counters(true)
if err then
  return err
end
if c and not l then
  return tonumber(c)
end
local now = clock()
if not l then
  l = now
  redis.call("set", KEYS[2], l)
end
return l .. " " .. now .. " " .. (c or "0")
