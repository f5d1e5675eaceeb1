-- The sandbox a master's Lua state runs scripts in, set up once, after
-- the `redis` table, as Redis 7 sets it up.

local error, tostring = error, tostring

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
