-- The breaker and the budget at fleet scale, in virtual time: N hosts
-- of 4 workers, each worker at 0.25 requests/s (1 request/s per host,
-- Poisson), one upstream dead (503 at once) from t = 10 s for 60 s.
-- Each host has backoff.breaker.recommended (its policy seeded) and,
-- with the fleet, backoff.fleet's guard over it, synced every
-- fl:period() (`interval`, 1 s; `open_interval`, 0.25 s, while the
-- fleet is open) at a phase of its own through the real Redis script
-- run on spec/fleet_fake_redis.lua.  Only the documented API is
-- driven: allow, record, fl:sync, fl:period.  No retries: the breaker alone.
--
--   luajit bench/fleet_model.lua [HOSTS [SEED [breaker]]]
--   (after make LUA_VERSION=luajit; SEED: 7; "breaker": its rows only)
--
-- Prints, per setting: attempts that reached the dead upstream (and
-- the requests of those 60 s: the load cut is their ratio), attempts
-- per minute that still reach it once the breakers have settled (its
-- last 50 s: probes, and hosts that have not opened), when the hosts
-- opened on their own (first, median, last), and when every host's
-- breaker allowed again after the upstream came back (checked every
-- 0.1 s with allows()).
package.path = "./lua/?.lua;" .. package.path
package.cpath = "./build/" .. (rawget(_G, "jit") and "luajit"
  or _VERSION:match("%d+%.%d+")) .. "/?.so;" .. package.cpath
local backoff = require "backoff"
local fleet = require "backoff.fleet"
local store = require "backoff.store"

local HOSTS = tonumber(arg[1]) or 1000
local SEED = tonumber(arg[2]) or 7
local ONLY_BREAKER = arg[3] == "breaker"
local RATE = 1                  -- requests/s per host (4 workers x 0.25)
local DEAD_FROM, DEAD_TO, STOP = 10, 70, 100
local DT = 0.005

-- a uniform draw in [0, 1): Park-Miller, the same on every Lua
local uniform = dofile("bench/uniform.lua")

local T = 0
local function clock() return T end

-- fail: the share of attempts that fail while the upstream is bad (1:
-- dead)
local function run(with_fleet, seed, fail)
  local rand = uniform(seed)
  local R = dofile("spec/fleet_fake_redis.lua")(clock)
  local hosts = {}
  for i = 1, HOSTS do
    local p = backoff.breaker.default_policy():config()
    p.seed = seed * 100003 + i
    local h = { i = i, opened = nil, back = nil,
      next_req = -math.log(1 - rand()) / RATE, next_sync = rand() }
    h.br = backoff.breaker.new { policy = backoff.new(p.strategy, p),
      clock = clock, on_change = function(_, to)
        if to == "open" and not h.opened and T >= DEAD_FROM then
          h.opened = T
        end
      end }
    h.guard = h.br
    if with_fleet then
      h.fl = fleet.new { shared = false, host = "h" .. i, clock = clock,
                         client = R.client }
      h.fl.dict = store.dict(nil, clock)
      -- fl:soon() is a timer at 0 in nginx: a sync right away here
      function h.fl.soon(fl) fl:sync() end
      h.guard = h.fl:breaker(h.br)
    end
    hosts[i] = h
  end
  local c = { requests = 0, reached = 0, late = 0, syncs = 0,
              refused = 0, ok = 0 }
  local step = 0
  while T < STOP do
    T = T + DT
    step = step + 1
    local dead = T >= DEAD_FROM and T < DEAD_TO
    for i = 1, HOSTS do
      local h = hosts[i]
      -- back: the first time (checked every 0.1 s) its breaker allows
      if T >= DEAD_TO and not h.back and step % 20 == 0
         and h.guard:allows() then
        h.back = T
      end
      if h.fl and T >= h.next_sync then
        h.next_sync = h.next_sync + h.fl:period()
        h.fl:sync()
        c.syncs = c.syncs + 1
      end
      while T >= h.next_req do
        h.next_req = h.next_req - math.log(1 - rand()) / RATE
        if dead then c.requests = c.requests + 1 end
        local ok, ticket = h.guard:allow()
        if dead and not ok then c.refused = c.refused + 1 end
        if ok then
          if dead then
            c.reached = c.reached + 1
            if T >= DEAD_FROM + 10 then c.late = c.late + 1 end
          end
          local good = not dead or fail < 1 and rand() >= fail
          if dead and good then c.ok = c.ok + 1 end
          h.guard:record(good, ticket, 0.01)
        end
      end
    end
  end
  local opened = {}
  for _, h in ipairs(hosts) do
    if h.opened then opened[#opened + 1] = h.opened - DEAD_FROM end
  end
  table.sort(opened)
  local last_back = 0
  for _, h in ipairs(hosts) do
    last_back = math.max(last_back, (h.back or STOP) - DEAD_TO)
  end
  c.opened_n = #opened
  c.first, c.median, c.last = opened[1], opened[math.ceil(#opened / 2)],
    opened[#opened]
  c.last_back = last_back
  c.evals = R.calls
  return c
end

local function f(v) return v and ("%.1f s"):format(v) or "-" end

print(("%d hosts x 4 workers at 0.25 requests/s each (1/s per host), "
  .. "an upstream dead for %d s; the recommended breaker"):format(HOSTS,
  DEAD_TO - DEAD_FROM))
print("")
print("| setting | requests in the 60 s | attempts that reached it | "
  .. "load cut | attempts per minute in its last 50 s (the fleet's) | "
  .. "hosts opened on their own (first / median / last) | every host's "
  .. "breaker allows again after |")
print("|---|---|---|---|---|---|---|")
for _, w in ipairs({ false, true }) do
  T = 0
  local t0 = os.clock()
  local c = run(w, SEED, 1)
  print(("| %s | %d | %d | %.2fx | %.0f | %d (%s / %s / %s) | %s |"):format(
    w and "fleet (interval 1 s, quorum 0.25, suspects 3 x 0.5)"
      or "per host",
    c.requests, c.reached, c.requests / math.max(c.reached, 1),
    c.late / ((DEAD_TO - DEAD_FROM - 10) / 60), c.opened_n, f(c.first),
    f(c.median), f(c.last), f(c.last_back)))
  io.stderr:write(("  (%s: %.1f s of CPU, %d syncs)\n"):format(
    w and "fleet" or "per host", os.clock() - t0, c.evals))
end

print("")
print("The same hosts, the upstream failing 50% of attempts at random for "
  .. "60 s (it must never open):")
print("")
print("| setting | requests in the 60 s | refused by the breaker | "
  .. "succeeded |")
print("|---|---|---|---|")
for _, w in ipairs({ false, true }) do
  T = 0
  local c = run(w, SEED, 0.5)
  print(("| %s | %d | %d | %.1f%% |"):format(w and "fleet" or "per host",
    c.requests, c.refused, 100 * c.ok / c.requests))
end

if ONLY_BREAKER then return end
-- the budget (bench/fleet_budget.lua): the same hosts with retries
-- (exponential 0.1-20 s, full jitter, 10 attempts) and the recommended
-- budget per host, alone or with the fleet's grant (fl:budget, interval
-- 1 s, lend 32, capacity 8)
print("")
print("The same hosts with retries and the recommended budget per host "
  .. "(shared by its 4 workers), alone or with fl:budget on top:")
print("")
print("| event | setting | requests in the run (20 s before, the event, "
  .. "60 s after) | succeeded (of the event's) | amplification |")
print("|---|---|---|---|---|")
local brows = dofile("bench/fleet_budget.lua")(HOSTS, 1,
  { { share = 0.5, len = 60 }, { share = 0.8, len = 60 },
    { share = 1, len = 60 }, { share = 1, len = 10 } })
for _, x in ipairs(brows) do
  print(("| %s for %d s | %s | %d | %.2f%% | %.3fx |"):format(
    x.share < 1 and ("%d%% failing"):format(x.share * 100) or "dead",
    x.len, x.fleet and "fleet (fl:budget)" or "per host",
    x.r.requests, 100 * x.r.success_in, x.r.amplification))
  io.stderr:write(("  (%s: %.1f s of CPU)\n"):format(
    x.fleet and "fleet" or "per host", x.cpu))
end
