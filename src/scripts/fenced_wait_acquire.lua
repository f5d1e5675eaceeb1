-- The fenced acquire for a caller that waits: the resources from KEYS[3],
-- ARGV as for the acquire that waits. Held resources: the waiter is
-- queued, +WAIT <ms>. Free: the fenced acquire's checks, writes and reply.
local held, wait, blocks = blocked(3, ARGV[3])
if held then
  return enqueue(3, ARGV[3], wait, blocks)
end
local c, l, err = counters(false)
if err then
  return err
end
take(3, ARGV[3])
return fence(c, l)
