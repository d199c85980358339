-- The recommended breaker (backoff.breaker.recommended's setting, its
-- policy seeded) in a small virtual-time model of one host, driving
-- only the documented API:
-- requests arrive (Poisson) at a rate per host, each retried by
-- backoff.recommended()'s policy (4 attempts, exponential from 0.1 s,
-- full jitter) with br:allow() before each attempt and br:record(ok,
-- ticket, seconds) when it ends; an attempt the breaker refuses ends
-- the request (circuit_open).  No budget: the breaker alone.
--
--   luajit bench/breaker_model.lua   (from the top of the tree, after
--                                     make LUA_VERSION=luajit; any Lua)
--
-- Part 1: an upstream failing 10-50% of attempts at random, one hour
-- (ten minutes above 20 requests/s, scaled to an hour): openings per
-- hour and success with and without the breaker.
-- Part 2: an upstream that dies (503 at once) or hangs (each attempt
-- times out after 1 s) for 60 s, then recovers: when it opens, how many
-- attempts still reach it (and, hung, how many requests wait out a
-- timeout), when it closes after recovery.
package.path = "./lua/?.lua;" .. package.path
package.cpath = "./build/" .. (rawget(_G, "jit") and "luajit"
  or _VERSION:match("%d+%.%d+")) .. "/?.so;" .. package.cpath
local backoff = require "backoff"
local heap = dofile("bench/heap.lua")

-- a uniform draw in [0, 1): Park-Miller, the same on every Lua
local uniform = dofile("bench/uniform.lua")

-- Runs the host for `duration` seconds.  upstream(t) -> fails (bool),
-- seconds the attempt takes.  Returns the counts.
-- c.reached / c.waited: attempts made between from and to, and those
-- that waited out a timeout.
local function run(rate, duration, upstream, with_breaker, seed, from, to)
  local rand = uniform(seed)
  local now = 0
  local clock = function() return now end
  local c = { requests = 0, ok = 0, attempts = 0, refused = 0,
              openings = 0, waited = 0, reached = 0, events = {} }
  from, to = from or 0, to or math.huge
  -- the recommended breaker (no rule given: the recommended rules),
  -- its default policy seeded so that every run gives the same figures
  local p = backoff.breaker.default_policy():config()
  p.seed = seed
  local br = with_breaker and backoff.breaker.new {
    policy = backoff.new(p.strategy, p), clock = clock,
    on_change = function(_, state)
      if state == "open" then c.openings = c.openings + 1 end
      c.events[#c.events + 1] = { now, state }
    end }
  local policy = backoff.recommended { clock = clock,
                                       seed = seed % 1000 + 1 }
  local push, pop, empty = heap()
  -- kinds: 1 a request arrives, 2 an attempt starts, 3 an attempt ends
  push(-math.log(1 - rand()) / rate, 1, 0, 0)
  local objs, tickets, sent = {}, {}, {}
  local id = 0
  while not empty() do
    local t, kind, r, a = pop()
    now = t
    if kind == 1 then
      if t < duration then
        id = id + 1
        c.requests = c.requests + 1
        objs[id] = policy:clone(t)
        push(t, 2, id, 1)
        push(t - math.log(1 - rand()) / rate, 1, 0, 0)
      end
    elseif kind == 2 then
      local ok, ticket = true, nil
      if br then ok, ticket = br:allow() end
      if not ok then
        c.refused = c.refused + 1
        objs[r] = nil
      else
        tickets[r], sent[r] = ticket, t
        c.attempts = c.attempts + 1
        local fails, took = upstream(t, rand)
        if t >= from and t < to then
          c.reached = c.reached + 1
          if took >= 1 then c.waited = c.waited + 1 end
        end
        push(t + took, 3, r, fails and a or -a)
      end
    else
      local fails = a > 0
      a = fails and a or -a
      -- the seconds it took: a hung probe lengthens the next interval
      if br then br:record(not fails, tickets[r], t - sent[r]) end
      tickets[r] = nil
      if not fails then
        c.ok = c.ok + 1
        objs[r] = nil
      else
        local d = objs[r]:failure(t)
        if d then push(t + d, 2, r, a + 1) else objs[r] = nil end
      end
    end
  end
  return c
end

local function pct(a, b) return 100 * a / math.max(b, 1) end

print("Part 1: random failures; the recommended breaker (opens at 90% of "
      .. ">= 20 calls in 10 s, or 50 failures in a row)")
print("| failing | requests/s per host | openings per hour | success "
      .. "without | success with |")
print("|---|---|---|---|---|")
for _, p in ipairs { 0.1, 0.3, 0.5 } do
  for _, rate in ipairs { 1, 2, 5, 20, 100, 500 } do
    local duration = rate <= 20 and 3600 or 600
    local function up(_, rand) return rand() < p, 0.01 end
    local without = run(rate, duration, up, false, 11)
    local with = run(rate, duration, up, true, 11)
    print(("| %d%% | %d | %.2f | %.2f%% | %.2f%% |"):format(p * 100, rate,
      with.openings * 3600 / duration, pct(without.ok, without.requests),
      pct(with.ok, with.requests)))
  end
end

print()
print("Part 2: 60 s healthy, 60 s dead (503 at once) or hung (1 s "
      .. "timeouts), 60 s healthy")
print("| upstream | requests/s per host | opened after | attempts that "
      .. "reached it during the outage (without) | timeouts waited "
      .. "(without) | closed after recovery |")
print("|---|---|---|---|---|---|")
for _, mode in ipairs { "dead", "hung" } do
  for _, rate in ipairs { 2, 5, 20, 100, 500 } do
    local function up(t)
      if t >= 60 and t < 120 then
        if mode == "dead" then return true, 0.005 end
        return true, 1
      end
      return false, 0.01
    end
    local function during(c)
      local opened, closed
      for _, e in ipairs(c.events) do
        if e[2] == "open" and not opened and e[1] >= 60 then opened = e[1] end
        if e[2] == "closed" and e[1] >= 120 and not closed then
          closed = e[1]
        end
      end
      return opened, closed
    end
    local full = run(rate, 180, up, true, 5, 60, 120)
    local none = run(rate, 180, up, false, 5, 60, 120)
    local opened, closed = during(full)
    print(("| %s | %d | %s | %d (%d) | %d (%d) | %s |"):format(mode, rate,
      opened and ("%.2f s"):format(opened - 60) or "never",
      full.reached, none.reached, full.waited, none.waited,
      closed and ("%.2f s"):format(closed - 120) or "never"))
  end
end
