-- make bench: the cost of backoff's calls as ratios measured in this
-- one process: to an empty C method call (the floor for any binding)
-- and to a plain-Lua exponential-with-jitter object (what a user would
-- otherwise write).  Also bytes per object and garbage per call.
local backoff = require "backoff"
local empty = require "bench_empty"

local clock = os.clock
local N = tonumber(arg and arg[1]) or 2000000

-- the peer: exponential backoff with full jitter, max delay and attempt
-- bookkeeping, as a user would write it in Lua
local Peer = {}
Peer.__index = Peer
function Peer.new(o)
  return setmetatable({ initial = o.initial_delay, base = 2,
    max = o.max_delay, attempts = 0, last = 0, prev = 0 }, Peer)
end
function Peer:failure(ts)
  self.attempts = self.attempts + 1
  local d = self.initial * self.base ^ (self.attempts - 1)
  if d > self.max then d = self.max end
  d = d * math.random()
  if d < 0 then d = 0 end
  self.last, self.prev = ts, d
  return d
end
function Peer:success(ts)
  self.attempts = 0
  self.last, self.prev = ts, 0
  return 0
end

-- seconds per call of f(n): best of 5 runs of n calls
local function time(f, n)
  local best = math.huge
  for _ = 1, 5 do
    collectgarbage()
    local t0 = clock()
    f(n)
    local t = clock() - t0
    if t < best then best = t end
  end
  return best / n
end

local OPTS = { initial_delay = 0.001, max_delay = 10, jitter = "full" }
-- failure() at a fixed attempt count: reset every 16 calls so that the
-- work per call stays the same whatever N is.  Each loop is written out on
-- purpose: a shared helper taking the call as a function would add a
-- Lua call to every measured iteration.
local cases = {
  { "empty C method call (baseline)", function(n)
      local u = empty.new()
      for i = 1, n do           -- the same loop shape as the rows below
        u:noop(i)
        if i % 16 == 0 then u:noop(i) end
      end
    end },
  { "b:failure(ts)", function(n)
      local b = backoff.exponential(OPTS)
      for i = 1, n do
        b:failure(i)
        if i % 16 == 0 then b:success(i) end
      end
    end },
  { "b:failure() (default clock)", function(n)
      local b = backoff.exponential(OPTS)
      for i = 1, n do
        b:failure()
        if i % 16 == 0 then b:success() end
      end
    end },
  { "b:success(ts)", function(n)
      local b = backoff.exponential(OPTS)
      for i = 1, n do b:success(i) end
    end },
  { "b:timeout()", function(n)
      local b = backoff.retry_timeouts()
      for _ = 1, n do b:timeout() end
    end },
  { "peer:failure(ts) (plain Lua)", function(n)
      local p = Peer.new(OPTS)
      for i = 1, n do
        p:failure(i)
        if i % 16 == 0 then p:success(i) end
      end
    end },
  { "backoff.exponential{...}", function(n)
      for _ = 1, n do backoff.exponential(OPTS) end
    end, 20 },
  { "b:clone()", function(n)
      local b = backoff.exponential(OPTS)
      for _ = 1, n do b:clone() end
    end, 20 },
}

local results = {}
for _, c in ipairs(cases) do
  results[#results + 1] = { c[1], time(c[2], math.floor(N / (c[3] or 1))) }
end
local base = results[1][2]
local peer
for _, r in ipairs(results) do
  if r[1]:find("^peer") then peer = r[2] end
end

local function bytes_per_object()
  local n = 100000
  local keep = {}
  for i = 1, n do keep[i] = true end
  collectgarbage() collectgarbage()
  local before = collectgarbage("count")
  for i = 1, n do keep[i] = backoff.exponential(OPTS) end
  collectgarbage() collectgarbage()
  local after = collectgarbage("count")
  return (after - before) * 1024 / n, keep
end

local function garbage_per_call(n)
  local b = backoff.exponential(OPTS)
  collectgarbage() collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for i = 1, n do
    b:failure(i)
    if i % 16 == 0 then b:success(i) end
  end
  local after = collectgarbage("count")
  collectgarbage("restart")
  return (after - before) * 1024 / n
end

local vm = rawget(_G, "jit") and rawget(_G, "jit").version or _VERSION
print(("backoff benchmark on %s (%d calls per row, best of 5)"):format(vm, N))
print(("%-34s %12s %12s"):format("call", "x empty call", "x plain Lua"))
for _, r in ipairs(results) do
  print(("%-34s %12.2f %12.2f"):format(r[1], r[2] / base, r[2] / peer))
end
local bytes = bytes_per_object()
print(("bytes per object (10^5 objects):   %.0f"):format(bytes))
print(("garbage per b:failure(ts) call:    %.4f bytes (10^6 calls)")
  :format(garbage_per_call(1000000)))
