-- Acquire for a caller that waits, all or nothing over KEYS: if every key
-- is free for the waiter, takes them and replies +OK; else queues the
-- waiter on the keys that block it and replies +WAIT <ms>.
local held, wait, blocks = blocked(1, ARGV[3])
if held then
  return enqueue(1, ARGV[3], wait, blocks)
end
take(1, ARGV[3])
return redis.status_reply("OK")
