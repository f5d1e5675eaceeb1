-- What a master sets up in its Lua state before any script runs, as
-- Redis 7 does: `redis.call` and `redis.pcall`, then the sandbox.
-- `error_reply` and `status_reply` are set from Rust before this runs.
-- Returns the bridge whose `run` the master sets for each script's run:
-- it runs one command and gives its reply as Lua sees it, an error reply
-- as the table `{err = ...}`.

local bridge = {}
local error, type, tostring = error, type, tostring

-- An error reply is a value: the script decides what it means.
function redis.pcall(...)
  return bridge.run(...)
end

-- An error reply ends the script, raised as the table `redis.pcall`
-- would have returned; the writes before it stay.
function redis.call(...)
  local reply = bridge.run(...)
  if type(reply) == "table" and reply.err then
    error(reply)
  end
  return reply
end

-- What Redis 7 leaves out of a script's globals: files, the environment
-- functions, the output, and `math.random`, which would draw from the C
-- library's state shared by the whole process where Redis draws from its
-- own (no script calls it; one that does fails here instead of drawing
-- differently on every run).
print, dofile, loadfile, setfenv, getfenv, newproxy = nil, nil, nil, nil, nil, nil
math.random, math.randomseed = nil, nil

-- A script may neither set a global nor read one that does not exist:
-- the state outlives the script, and Redis refuses both. `KEYS` and
-- `ARGV` are set around this, with `rawset`.
setmetatable(_G, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function()
    error("Attempt to modify a readonly table", 2)
  end,
})

return bridge
