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

-- seconds per call of f(n): one timed run of n calls
local function time(f, n)
  collectgarbage()
  local t0 = clock()
  f(n)
  return (clock() - t0) / n
end

local OPTS = { initial_delay = 0.001, max_delay = 10, jitter = "full" }
-- Each loop is written out on purpose: a shared helper taking the call
-- as a function would add a Lua call to every measured iteration.  Each
-- row is divided by the empty C method call in a loop of the same shape
-- and arguments (key base; the row "empty C method call" is the one with
-- a timestamp).  Timestamps are floats, as clocks return them (on 5.4 an
-- integer argument takes a slower conversion in lua_tonumber, for the
-- baselines and the module alike).  failure() runs with no reset: its
-- cost does not grow with the attempt count.
local cases = {
  { "empty C method call (baseline)", key = "ts", function(n)
      local u = empty.new()
      for i = 1, n do u:noop(i + 0.5) end
    end },
  { key = "none", function(n)
      local u = empty.new()
      for _ = 1, n do u:noop() end
    end },
  { "  returning one number (floor)", base = "ts", function(n)
      local u = empty.new()
      for i = 1, n do u:number(i + 0.5) end
    end },
  { "  self + ts checks, one number (floor)", base = "ts", function(n)
      local u = empty.new()
      for i = 1, n do u:floor(i + 0.5) end
    end },
  { "  + an optional 3rd argument (floor)", base = "ts", function(n)
      local u = empty.new()
      for i = 1, n do u:floor_hint(i + 0.5) end
    end },
  { "  the same the usual way (floor)", base = "ts", function(n)
      local u = empty.new()
      for i = 1, n do u:usual(i + 0.5) end
    end },
  { "b:failure(ts)", base = "ts", function(n)
      local b = backoff.exponential(OPTS)
      for i = 1, n do b:failure(i + 0.5) end
    end },
  { "b:failure() (default clock)", base = "none", function(n)
      local b = backoff.exponential(OPTS)
      for _ = 1, n do b:failure() end
    end },
  { "b:success(ts)", base = "ts", function(n)
      local b = backoff.exponential(OPTS)
      for i = 1, n do b:success(i + 0.5) end
    end },
  { "b:timeout()", base = "none", function(n)
      local b = backoff.retry_timeouts()
      for _ = 1, n do b:timeout() end
    end },
  { "peer:failure(ts) (plain Lua)", key = "peer", base = "ts", function(n)
      local p = Peer.new(OPTS)
      for i = 1, n do p:failure(i + 0.5) end
    end },
  { "backoff.exponential{...}", base = "none", div = 20, function(n)
      for _ = 1, n do backoff.exponential(OPTS) end
    end },
  { "b:clone()", base = "none", div = 20, function(n)
      local b = backoff.exponential(OPTS)
      for _ = 1, n do b:clone() end
    end },
  -- the in-process token bucket (a Lua object over a dict of this Lua
  -- state, the same code as the shared one): a retry paid (capacity
  -- 2^40 tokens: never short here), the legacy deposit on a full budget
  -- (added, then taken back), and the good day's record of a success
  { "bud:withdraw() (token bucket)", base = "none", function(n)
      local bud = backoff.budget { capacity = 2 ^ 40, cost = 1 }
      for _ = 1, n do bud:withdraw() end
    end },
  { "bud:deposit() (token bucket, full)", base = "none", function(n)
      local bud = backoff.budget {}
      for _ = 1, n do bud:deposit() end
    end },
  { "bud:record(true) (token bucket, full)", base = "none", function(n)
      local bud = backoff.budget {}
      for _ = 1, n do bud:record(true) end
    end },
}

-- The happy path and allocation rows, each divided by a
-- same-process baseline of the same loop shape.  fn succeeds at once
-- (it counts its calls, so that no JIT can fold it away).
-- The hand loop is what a user would write instead of backoff.retry;
-- both are a function call per iteration.  Results go to an upvalue so
-- that LuaJIT cannot sink (drop) an allocation that nothing uses; the
-- allocating rows and their table baseline run the same count, and a
-- ratio to a table allocation includes the GC cost of both sides.
local sink
local calls = 0
local function fn() calls = calls + 1 return calls end
local sleep = backoff.sleep
local function hand_retry(f)
  for attempt = 1, 6 do
    local ok, r = pcall(f, attempt)
    if ok and r then return r end
    sleep(0.001 * 2 ^ attempt)
  end
end
local RETRY = backoff.exponential { initial_delay = 0.001, max_delay = 10,
  jitter = "full", max_attempts = 6 }
local CTOR = { initial_delay = 0.001, max_delay = 10, jitter = "full",
  max_attempts = 6 }
local retry = backoff.retry
local R = 20 -- divisor of N for the rows that allocate (and retry)
cases[#cases + 1] = { key = "pcall", function(n)
    for _ = 1, n do pcall(fn) end
  end }
cases[#cases + 1] = { key = "hand", function(n)
    for _ = 1, n do sink = hand_retry(fn) end
  end }
cases[#cases + 1] = { key = "table8", div = R, function(n)
    for i = 1, n do
      sink = { a = i, b = i + 1, c = i + 2, d = i + 3, e = i + 4,
        f = i + 5, g = i + 6, h = i + 7 }
    end
  end }
cases[#cases + 1] = { key = "retry", div = R, function(n)
    for _ = 1, n do sink = retry(RETRY, fn) end
  end }
cases[#cases + 1] = { key = "clone", div = R, function(n)
    local b = backoff.exponential(OPTS)
    for _ = 1, n do sink = b:clone() end
  end }
cases[#cases + 1] = { key = "ctor", div = R, function(n)
    for _ = 1, n do sink = backoff.exponential(CTOR) end
  end }

-- the targets: row, baseline, target on 5.4, target on LuaJIT
-- (nil: no target on that VM)
local ratios = {
  { "backoff.retry(b, fn), fn succeeds", "retry", "pcall(fn)", "pcall",
    3 },
  { "backoff.retry(b, fn), fn succeeds", "retry", "hand pcall loop",
    "hand", nil, 1.5 },
  { "b:clone()", "clone", "plain 8-field table", "table8", 1.5, 3 },
  { "backoff.exponential{4 options}", "ctor", "plain 8-field table",
    "table8", 4, 8 },
}

-- ROUNDS rounds, each timing every row once; each row keeps its best.
-- A noisy moment then spoils one round of every row, not every run of
-- one row, so the ratios stay comparable.
local ROUNDS = 7
local best, by_key = {}, {}
for i = 1, #cases do best[i] = math.huge end
for _ = 1, ROUNDS do
  for i, c in ipairs(cases) do
    local t = time(c[#c], math.floor(N / (c.div or 1)))
    if t < best[i] then best[i] = t end
  end
end
for i, c in ipairs(cases) do
  if c.key then by_key[c.key] = best[i] end
end
assert(sink ~= nil, "bench: nothing reached the sink")

-- LuaJIT: how the retry row's loop ran, read from the bytecode and the
-- traces (not from its time): "loop trace N" when the loop, with
-- backoff.retry inline, is one loop trace; else what kept it from one
-- (a loop never compiled ran inside another trace or interpreted)
local function retry_loop_state()
  local jutil = require "jit.util"
  local vmdef = require "jit.vmdef"
  local f
  for _, c in ipairs(cases) do
    if c.key == "retry" then f = c[#c] end
  end
  for pc = 1, 100 do
    local ins = jutil.funcbc(f, pc)
    if not ins then break end
    local o = ins % 256
    local op = vmdef.bcnames:sub(o * 6 + 1, o * 6 + 6):gsub(" ", "")
    if op == "JFORL" then
      local tr = math.floor(ins / 65536)
      local info = jutil.traceinfo(tr)
      if info and info.linktype == "loop" then return "loop trace " .. tr end
      return ("trace %d, linked as %s, not a loop trace"):format(tr,
        info and info.linktype or "?")
    elseif op == "FORL" then
      return "never compiled (not a loop trace)"
    elseif op == "IFORL" then
      return "blacklisted (not a loop trace)"
    end
  end
  return "not found"
end
local retry_loop = rawget(_G, "jit") and retry_loop_state()

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
    b:failure(i + 0.5)
    if i % 16 == 0 then b:success(i + 0.5) end
  end
  local after = collectgarbage("count")
  collectgarbage("restart")
  return (after - before) * 1024 / n
end

local vm = rawget(_G, "jit") and rawget(_G, "jit").version or _VERSION
print(("backoff benchmark on %s (%d calls per row, best of %d rounds)")
  :format(vm, N, ROUNDS))
print(("%-38s %12s %12s"):format("call", "x empty call", "x plain Lua"))
for i, c in ipairs(cases) do
  if type(c[1]) == "string" then
    print(("%-38s %12.2f %12.2f"):format(c[1],
      best[i] / by_key[c.base or c.key], best[i] / by_key.peer))
  end
end
print()
local jit_vm = rawget(_G, "jit") ~= nil
print(("%-34s %-20s %8s %8s"):format("ratio (same process)", "to",
  "measured", "target"))
for _, r in ipairs(ratios) do
  local ratio = by_key[r[2]] / by_key[r[4]]
  local target = r[jit_vm and 6 or 5]
  local verdict = ""
  if target then verdict = ratio <= target and "  met" or "  MISSED" end
  print(("%-34s %-20s %8.2f %8s%s"):format(r[1], r[3], ratio,
    target and ("<= " .. target) or "-", verdict))
end
print(("(baselines per call: pcall(fn) %.1f ns, hand loop %.1f ns, "
  .. "plain 8-field table %.0f ns)"):format(by_key.pcall * 1e9,
  by_key.hand * 1e9, by_key.table8 * 1e9))
if retry_loop then
  print("LuaJIT: the retry row's loop ran as " .. retry_loop)
end
-- for bench/jit_check.lua, which runs this file in fresh processes
if os.getenv("BENCH_MACHINE") then
  local line = {}
  for _, r in ipairs(ratios) do
    line[#line + 1] = ("%s/%s=%.4f"):format(r[2], r[4],
      by_key[r[2]] / by_key[r[4]])
  end
  print("machine: " .. table.concat(line, " ") .. " retry_loop="
    .. (retry_loop and (retry_loop:match("^loop trace") and "loop" or "other")
        or "-"))
end
local bytes = bytes_per_object()
print(("bytes per object (10^5 objects):   %.0f"):format(bytes))
print(("garbage per b:failure(ts) call:    %.4f bytes (10^6 calls)")
  :format(garbage_per_call(1000000)))
