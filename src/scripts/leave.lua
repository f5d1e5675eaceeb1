-- A waiter leaves the queues of KEYS (see `leave` in leaving.lua): sent
-- when a wait ends, won or not, to the masters that may have queued it.
-- Always 1.
for i = 1, #KEYS do
  leave(KEYS[i], ARGV[1])
end
return 1
