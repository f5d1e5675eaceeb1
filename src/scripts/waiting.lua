-- What the acquires that wait share: `ARGV` holds the token, the TTL in
-- ms, the waiter's member (its queue entry), its place (µs of its
-- client's wall clock) and how long its queue entries must outlive the
-- keys that block it (ms).

-- Whether the turn of key `k` names the waiter `m` and has come (less
-- than its window left): then the entries before it, whose turns are
-- over, are dropped, and each waiter of theirs that a client hears is
-- told to try at once. The telling is for the waiters that came after the
-- turn began and stand before `m` all the same (places are not the order
-- of arrival, a second either way): nobody told them, and, queued again
-- by that attempt, they are first when `m` releases.
local function turn(k, m)
  local t = turn_key(k)
  if redis.pcall("get", t) ~= m then
    return false
  end
  local w = tonumber(string.match(m, "^(%d+)|"))
  local p = redis.pcall("pttl", t)
  if not w or type(p) ~= "number" or p > w then
    return false
  end
  local q = queue(k)
  local rk = redis.pcall("zrank", q, m)
  if type(rk) ~= "number" then
    return false
  end
  for _ = 1, rk do
    local h = redis.pcall("zrange", q, 0, 0)
    if type(h) ~= "table" or h.err or #h == 0 or redis.pcall("zrem", q, h[1]) ~= 1 then
      return false
    end
    local id, ch = string.match(h[1], "^%d+|(%d+)|(redlock%-mio:wake:%x+)$")
    if id then
      redis.pcall("publish", ch, id .. " 0")
    end
  end
  return true
end

-- How long the missing key `k` is kept from the waiter `m` by other
-- waiters first in its queue (ms), or nil if it is free for `m`. While a
-- turn runs, the waiters before the one it names have their windows (the
-- key is not handed again, which would give one of them a second
-- window); else the key is handed to the first of them, and is free only
-- if that is `m`.
local function others_first(k, m)
  local h = redis.pcall("zrange", queue(k), 0, 0)
  if type(h) ~= "table" or h.err or #h == 0 or h[1] == m or turn(k, m) then
    return nil
  end
  local t = turn_key(k)
  local p = redis.pcall("pttl", t)
  if type(p) == "number" and p > 0 then
    if redis.pcall("get", t) == m then
      local w = tonumber(string.match(m, "^(%d+)|")) or 0
      return math.max(p - w, 1)
    end
    return p
  end
  handoff(k)
  local v = redis.call("get", k)
  if v and v ~= "reserved " .. m then
    return redis.pcall("pttl", k)
  end
  return nil
end

-- Whether a key of `KEYS[first..]` keeps the waiter `m` out, the
-- longest time one does (ms, -1 if one has no TTL), and which do (by
-- index). A key is free for the waiter if it is missing or reserved for
-- it, and no other waiter is first in its queue (`others_first`).
local function blocked(first, m)
  local mine = "reserved " .. m
  local held, wait, blocks = false, 0, {}
  for i = first, #KEYS do
    local k = KEYS[i]
    local v = redis.call("get", k)
    local p
    if not v then
      p = others_first(k, m)
    elseif v ~= mine then
      p = redis.pcall("pttl", k)
    end
    if p then
      held = true
      blocks[i] = true
      if type(p) ~= "number" or p < 0 then
        wait = -1
      elseif wait >= 0 and p > wait then
        wait = p
      end
    end
  end
  return held, wait, blocks
end

-- The place `claimed` taken within a second of the master's clock, so
-- that a client's wrong wall clock moves it a second at most. A user
-- that may not run TIME keeps the claimed place.
local function place(claimed)
  local tm = redis.pcall("time")
  if type(tm) ~= "table" or tm.err then
    return claimed
  end
  local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  local c = tonumber(claimed)
  if c and c < now - 1000000 then
    return string.format("%d", now - 1000000)
  elseif c and c > now + 1000000 then
    return string.format("%d", now + 1000000)
  end
  return claimed
end

-- Queues the waiter `m` on the keys of `KEYS[first..]` that block it,
-- keeping its place across attempts (NX), and each queue until the keys
-- that block it expire plus the margin; the reply `+WAIT <ms>`. It leaves
-- the keys that are free for it: a waiter for several resources never
-- keeps one from others while another is held.
local function enqueue(first, m, wait, blocks)
  local keep = math.max(wait, 0) + tonumber(ARGV[5])
  local p = place(ARGV[4])
  for i = first, #KEYS do
    if blocks[i] then
      local q = queue(KEYS[i])
      -- A queue key of another type (not the crate's) refuses the ZADD,
      -- and its expiry is not the crate's to change.
      if type(redis.pcall("zadd", q, "NX", p, m)) == "number" then
        local t = redis.pcall("pttl", q)
        if type(t) == "number" and t < keep then
          redis.pcall("pexpire", q, keep)
        end
      end
    else
      leave(KEYS[i], m)
    end
  end
  return redis.status_reply("WAIT " .. string.format("%d", wait))
end

-- Sets every key of `KEYS[first..]` to the token for the TTL and takes
-- the waiter `m` off their queues.
local function take(first, m)
  for i = first, #KEYS do
    redis.call("set", KEYS[i], ARGV[1], "px", ARGV[2])
    redis.pcall("zrem", queue(KEYS[i]), m)
  end
end
