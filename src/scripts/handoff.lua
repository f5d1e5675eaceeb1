-- The hand-off, run by every script that frees a key. A key's queue
-- (`redlock-mio:queue:<key>`) is a sorted set of waiters ordered by their
-- places; an entry is `<window ms>|<waiter id>|redlock-mio:wake:<client id>`.
-- A key's turn (`redlock-mio:turn:<key>`) names the waiter that may take
-- the key once the waiters before it have had their windows.

local function queue(k)
  return "redlock-mio:queue:" .. k
end

local function turn_key(k)
  return "redlock-mio:turn:" .. k
end

-- Tells the waiters of queue `q` from rank `i` on to try at `at` ms, past
-- the waiters of the client `ch` the key is reserved for (the windows of
-- the one told and of seven more add up to `at`: with the reservation, a
-- stalled client holds the others up for nine windows at most, and the
-- waiter whose turn comes then passes over the rest), up to the first
-- waiter of another client whose client hears it: that one is told and
-- named in the turn `t`. Entries nobody hears, or of another form, are
-- dropped on the way. A client that runs many waiters (one client shared
-- by many tasks) puts long runs of its own entries in the way: the queue
-- is read a batch at a time, and past the seventh, such an entry is known
-- by its end alone.
local function tell(q, t, ch, at, i, told)
  local kept = 0
  local mine = ch and "|" .. ch
  while true do
    local batch = redis.pcall("zrange", q, i, i + 31)
    if type(batch) ~= "table" or batch.err or #batch == 0 then
      return
    end
    -- `i` stays the rank of the entry at hand: an entry dropped moves
    -- the ones after it up.
    for _, e in ipairs(batch) do
      if kept >= 7 and string.sub(e, -#mine) == mine then
        -- Another waiter of the stalled client, past the windows counted:
        -- only moves the search on. (One of another form with that end
        -- is dropped by the hand-off that finds it first in line.)
        kept = kept + 1
        i = i + 1
      else
        local w, eid, ech = string.match(e, "^(%d+)|(%d+)|(redlock%-mio:wake:%x+)$")
        if eid and told and ech == ch then
          -- Another waiter of the stalled client: kept, neither told nor dropped.
          if kept < 7 then
            at = at + tonumber(w)
          end
          kept = kept + 1
          i = i + 1
        else
          local n = 0
          if eid then
            n = redis.pcall("publish", ech, eid .. " " .. string.format("%d", at))
            if type(n) ~= "number" then
              return
            end
          end
          if n == 0 then
            if redis.pcall("zrem", q, e) ~= 1 then
              return
            end
          elseif ech ~= ch then
            redis.pcall("set", t, e, "px", string.format("%d", at + tonumber(w)))
            return
          else
            told = true
            at = at + tonumber(w)
            i = i + 1
          end
        end
      end
    end
  end
end

-- Hands the free key `k` to the first waiter of its queue whose client
-- hears it: reserves the key for that waiter's window and tells the next
-- waiter when to try should it never come. Waiters nobody hears, and
-- entries of another form, are dropped, however many there are.
local function handoff(k)
  local q = queue(k)
  -- A key nobody waits for has no queue: the cheapest look says so.
  if redis.pcall("exists", q) ~= 1 then
    return
  end
  local t = turn_key(k)
  redis.pcall("del", t)
  while true do
    local h = redis.pcall("zrange", q, 0, 0)
    if type(h) ~= "table" or h.err or #h == 0 then
      return
    end
    h = h[1]
    if redis.pcall("zrem", q, h) ~= 1 then
      return
    end
    -- At most nine digits: the reservation's PX always takes the window.
    local r, id, ch = string.match(h, "^([1-9]%d*)|(%d+)|(redlock%-mio:wake:%x+)$")
    if r and #r <= 9 then
      local n = redis.pcall("publish", ch, id)
      if type(n) ~= "number" then
        return
      end
      if n > 0 then
        redis.call("set", k, "reserved " .. h, "px", r)
        tell(q, t, ch, tonumber(r), 0, false)
        return
      end
    end
  end
end
