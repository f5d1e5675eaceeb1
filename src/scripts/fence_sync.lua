-- Sync: 1 if the counter exists without a loss id. Else, if the loss id
-- is one of ARGV[3..]: sets the counter to the larger of ARGV[1] and
-- itself, deletes the loss id unless ARGV[2] is "start" (a clock start
-- keeps it beside the counter until a raise), and returns 1. Else 0.
local c, l, err = counters(true)
if err then
  return err
end
if c and not l then
  return 1
end
for i = 3, #ARGV do
  if ARGV[i] == l then
    if not c or tonumber(c) < tonumber(ARGV[1]) then
      redis.call("set", KEYS[1], ARGV[1])
    end
    if ARGV[2] ~= "start" then
      redis.call("del", KEYS[2])
    end
    return 1
  end
end
return 0
