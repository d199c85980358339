-- A plain-Lua retry loop, two ways.  After `make` (or `make
-- LUA_VERSION=5.1`, `luajit`, ...), from anywhere:
--   lua5.4 examples/retry.lua
-- It finds the checkout's lua/ and build/<version>/ beside it, before
-- LUA_PATH and the defaults (where `make install` or LuaRocks put it).
do
  local root = ((arg and arg[0] or ""):match("^(.*/)") or "./") .. "../"
  local version = rawget(_G, "jit") and "luajit" or _VERSION:match("%d%.%d")
  package.path = root .. "lua/?.lua;" .. package.path
  package.cpath = root .. "build/" .. version .. "/?.so;" .. package.cpath
end
local backoff = require "backoff"

-- something that fails twice, then works
local calls = 0
local function connect()
  calls = calls + 1
  if calls < 3 then return nil, "connection refused" end
  return "connected"
end

-- 1. the runner: fn, sleep and all (backoff.sleep outside OpenResty)
local policy = backoff.exponential { initial_delay = 0.1, max_delay = 2,
  jitter = "equal", max_attempts = 5 }
local conn, err, reason = backoff.retry(policy, connect, {
  on_retry = function(e, delay, n)
    print(("attempt %d: %s; retrying in %.2f s"):format(n, e, delay))
  end,
})
print("runner:", conn or ("gave up (" .. reason .. "): " .. err))

-- 2. by hand, with the object
calls = 0
local b = policy:clone()
while true do
  local c, e = connect()
  if c then
    print("by hand:", c, "after " .. b:attempts() .. " failures")
    b:success()
    break
  end
  local delay, why = b:failure()
  if not delay then print("by hand: gave up (" .. why .. "): " .. e) break end
  backoff.sleep(delay)
end
