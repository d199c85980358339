-- make bench-hedge: whether hedging cuts the slow tail, and is never
-- worse than one copy, in a real nginx on 127.0.0.1.  Three nginx: the
-- upstream (one worker, answering as the mix says: bench/hedge_mixes.lua),
-- the front (2 workers) with three routes, /r/none (one copy),
-- /r/fixed (hedged after DELAY) and /r/adaptive (after hedge.latency's
-- percentile), both hedged routes as doc/hedge.md recommends them
-- (budget.ratio { percent = PERCENT, min_per_second = MIN_PER_SECOND },
-- a shared hedge.pace, max_attempts 3; with the mix's peers as option
-- peers, the unhedged route taking them in turn), and a load generator
-- (one worker): an open loop, each request measured from the moment it
-- was due, so a slow answer cannot hide the requests queued behind it.
-- Request i draws the same latency on every route.  The upstream's
-- extra load is counted from its access log against the front's (also
-- per 1 s window, by when the requests started); the front workers'
-- CPU (utime + stime from /proc) per request of each route against the
-- unhedged route's, over each route's run and ROUNDS rounds of ROUND
-- seconds that take the routes in turn after the runs.  nginx runs
-- under `timeout`, stopped by its pid.
--   lua5.4 bench/hedge.lua ROOT
-- The down mix sends every copy to a port where nothing listens: its
-- extra load is the front's connects (counted per run) over its
-- requests.
-- Settings (environment): MIXES (all: c5,b10,slow,queue,peers,down),
-- SECONDS (each mix's own: 8), ROUNDS (2), ROUND (2), DELAY (0.01),
-- PERCENTILE (90), MIN_DELAY (0.005), MAX_DELAY (1), PERCENT (10),
-- MIN_PER_SECOND (1).
local ROOT = assert(arg[1], "usage: hedge.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local ALL = dofile(ROOT .. "/bench/hedge_mixes.lua")
local SUT = ROOT .. "/build/bench-hedge"
local UP = ROOT .. "/build/bench-hedge-up"
local LOAD = ROOT .. "/build/bench-hedge-load"

local function setting(name, default)
  return tonumber(os.getenv(name) or "") or default
end
local SECONDS = setting("SECONDS", nil)
local ROUNDS, ROUND = setting("ROUNDS", 2), setting("ROUND", 2)
local S = { DELAY = setting("DELAY", 0.01),
  PERCENTILE = setting("PERCENTILE", 90),
  MIN_DELAY = setting("MIN_DELAY", 0.005),
  MAX_DELAY = setting("MAX_DELAY", 1), PERCENT = setting("PERCENT", 10),
  MIN_PER_SECOND = setting("MIN_PER_SECOND", 1) }
local MIXES = {}
for name in (os.getenv("MIXES") or "c5,b10,slow,queue,peers,down")
            :gmatch("[^,]+") do
  MIXES[#MIXES + 1] = assert(ALL[name], "no mix " .. name)
end

local function ms(s) return ("%.1f"):format(s * 1000) end

local function start(prefix, template, vars, limit)
  local port = vars.PORT
  local ok, err = H.start_nginx(prefix, ROOT .. template, vars, limit,
    function() return H.get(port, "/ping", 5) and true end)
  if not ok then error("nginx did not start:\n" .. err) end
end

-- the front workers' CPU seconds so far (utime + stime, 100 ticks/s)
local function front_cpu()
  local master = H.read_file(SUT .. "/logs/nginx.pid"):match("%d+")
  local f = io.popen("cat /proc/[0-9]*/stat 2>/dev/null")
  local text = f:read("a")
  f:close()
  local ticks = 0
  for line in text:gmatch("[^\n]+") do
    local rest = line:match("%) (.*)$")
    if rest then
      local fields = {}
      for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
      -- after "(comm) ": state, ppid, ..., utime is field 12, stime 13
      if fields[2] == master then
        ticks = ticks + tonumber(fields[12]) + tonumber(fields[13])
      end
    end
  end
  return ticks / 100
end

-- one run of the load generator; the fields it answered
local function load(port, q)
  local body, status = H.get(port, ("/load?route=%s&mix=%s&phase=%s&tag=%s"
    .. "&bk=%s&rate=%s&seconds=%s&seq0=0"):format(q.route, q.mix, q.phase,
    q.tag, q.bk, q.rate, q.seconds), q.seconds + 60)
  if status ~= 200 then
    error(("load %s %s: %s %s"):format(q.route, q.mix, tostring(status),
                                       tostring(body)))
  end
  local r = H.fields(body, " \n")
  for k, v in pairs(r) do r[k] = tonumber(v) or v end
  return r
end

local function run_mix(ports, mix, results)
  local seconds = SECONDS or mix.seconds
  local by = {}
  local function go(route, phase, tag, rate, secs)
    return load(ports.load, { route = route, mix = mix.name, phase = phase,
      tag = tag, bk = mix.name, rate = rate, seconds = secs })
  end
  if not mix.calm then           -- the estimator learns the mix first
    go("adaptive", "run", "warm", mix.rate, 2)
  end
  for _, route in ipairs(mix.routes) do
    if mix.calm then             -- the same budget, pace and estimator
      go(route, "calm", mix.name .. "-calm-" .. route, mix.calm.rate,
         mix.calm.seconds)
    end
    local tag = mix.name .. "-" .. route
    local cpu0 = front_cpu()
    local r = go(route, "run", tag, mix.rate, seconds)
    r.cpu = front_cpu() - cpu0
    if mix.down then
      r.connects = tonumber((H.get(ports.front, "/connects?tag=" .. tag,
                                   5)))
      -- the requests that paid into this route's budget in the window
      -- before the run: the adaptive route's warm-up
      r.before = (route == "adaptive" and not mix.calm) and mix.rate * 2
                 or 0
    end
    r.mix, r.route, r.tag = mix, route, tag
    r.cpu_all, r.n_all = r.cpu, r.n
    results[#results + 1] = r
    by[route] = r
  end
  -- the CPU rounds: the routes in turn (then in reverse), ROUND seconds
  -- each, so that the machine's load, which drifts over a mix, weighs
  -- alike on every route; their CPU and requests are added to the runs'
  for k = 1, ROUNDS do
    local first, last, step = 1, #mix.routes, 1
    if k % 2 == 0 then first, last, step = last, first, -1 end
    for j = first, last, step do
      local route = mix.routes[j]
      local cpu0 = front_cpu()
      local q = go(route, "run", mix.name .. "-cpu-" .. route, mix.rate,
                   ROUND)
      local r = by[route]
      r.cpu_all = r.cpu_all + front_cpu() - cpu0
      r.n_all = r.n_all + q.n
    end
  end
end

local function main()
  local ports = { front = H.free_port(), up = H.free_port(),
                  load = H.free_port(), down = H.free_port() }
  local total = 600
  local vars = { ROOT = ROOT, PORT = ports.front, UP = ports.up,
                 DOWN = ports.down }
  for k, v in pairs(S) do vars[(k:gsub("_", ""))] = tostring(v) end
  start(UP, "/bench/hedge_up.conf.in", { ROOT = ROOT, PORT = ports.up },
        total)
  start(SUT, "/bench/hedge.conf.in", vars, total)
  start(LOAD, "/bench/hedge_load.conf.in", { ROOT = ROOT,
    PORT = ports.load, FRONT = ports.front }, total)
  print(("hedging: policy max_attempts 3; fixed delay %s s; adaptive "
    .. "hedge.latency { percentile = %s, min_delay = %s, max_delay = %s }; "
    .. "budget.ratio { percent = %s, min_per_second = %s, window = 10 } and "
    .. "hedge.pace { percent = %s } per mix and route, shared"):format(
    S.DELAY, S.PERCENTILE, S.MIN_DELAY, S.MAX_DELAY, S.PERCENT,
    S.MIN_PER_SECOND, S.PERCENT))
  print("front: 2 workers; upstream: 1 worker; load: 1 worker, open loop")
  print("load average before: " .. H.read_file("/proc/loadavg")
    :gsub("\n", ""))
  -- warm up: JIT traces, connection pools
  load(ports.load, { route = "none", mix = "c5", phase = "run",
    tag = "warm", bk = "warm", rate = 200, seconds = 2 })
  local results = {}
  for _, mix in ipairs(MIXES) do
    print(("mix %s: %s; %d req/s x %d s per route%s"):format(mix.name,
      mix.what, mix.rate, SECONDS or mix.seconds, mix.calm
      and (" (after %d s calm at %d req/s)"):format(mix.calm.seconds,
      mix.calm.rate) or ""))
    run_mix(ports, mix, results)
  end
  print("metrics (front): " .. (H.get(ports.front, "/metrics", 5) or "")
    :gsub("# [^\n]*\n", ""):gsub("\n", "; "))
  print("load average after: " .. H.read_file("/proc/loadavg")
    :gsub("\n", ""))
  return results
end

------------------------------------------------------------------------
-- the report

-- per tag: requests, and their starts (seconds) from the access log
local function starts(path)
  local t = {}
  for line in H.read_file(path):gmatch("[^\n]+") do
    local tag, msec, took = line:match("^(%S+) (%S+) (%S+)")
    local s = t[tag]
    if not s then s = { n = 0 } t[tag] = s end
    s.n = s.n + 1
    s[s.n] = tonumber(msec) - tonumber(took)
  end
  return t
end

-- the extra load per 1 s window after the first: the worst
local function worst_window(f, u)
  if not f or not u then return 0, 0 end
  local t0 = math.huge
  for i = 1, f.n do if f[i] < t0 then t0 = f[i] end end
  local fw, uw = {}, {}
  for i = 1, f.n do
    local w = math.floor(f[i] - t0)
    fw[w] = (fw[w] or 0) + 1
  end
  for i = 1, u.n do
    local w = math.floor(u[i] - t0)
    uw[w] = (uw[w] or 0) + 1
  end
  local worst, at = 0, 0
  for w, n in pairs(fw) do
    if w >= 1 and n >= 20 then
      local e = ((uw[w] or 0) - n) / n
      if e > worst then worst, at = e, w end
    end
  end
  return worst, at
end

-- the upstream down: errors no worse than one copy's (1% of the
-- requests for noise), and the extra connects bounded by the budget:
-- PERCENT% of the requests of the run and of the window before it, and
-- the reserve (MIN_PER_SECOND x its 10 s window) once per window the
-- run's 1 s slices reach into (a 10 s run spans 11 slices: its first
-- slice's withdrawals leave the window before its end)
local function down_targets(target, name, r, none)
  target(r.errors <= none.errors + 0.01 * r.n, ("%s: %d errors <= the "
    .. "unhedged %d + 1%%"):format(name, r.errors, none.errors))
  local most = (S.PERCENT / 100 * (r.front + r.before)
    + S.MIN_PER_SECOND * 10 * math.ceil((r.seconds + 1) / 10)) / r.front
  target(r.extra <= most, ("%s: %.1f%% extra connects <= %.1f%% (the "
    .. "budget: %s%% of %d requests, and its reserve)"):format(name,
    r.extra * 100, most * 100, S.PERCENT, r.front + r.before))
end

local function report(results)
  local front, up = starts(SUT .. "/logs/front.log"),
                    starts(UP .. "/logs/up.log")
  print(("%-6s %-9s %8s %8s %7s %8s %8s %9s %8s %6s %8s %6s"):format("mix",
    "route", "requests", "upstream", "extra", "p50 ms", "p99 ms",
    "p99.9 ms", "max ms", "errors", "cpu us/r", "x none"))
  local by = {}
  for _, r in ipairs(results) do
    local f, u = front[r.tag], up[r.tag]
    r.front, r.up = f and f.n or 0, u and u.n or 0
    if r.connects then r.up = r.connects end
    r.extra = r.front > 0 and (r.up - r.front) / r.front or 0
    r.us = r.n_all > 0 and r.cpu_all * 1e6 / r.n_all or 0
    r.window, r.window_at = worst_window(f, u)
    by[r.tag] = r
    local none = by[r.mix.name .. "-none"]
    print(("%-6s %-9s %8d %8d %6.1f%% %8s %8s %9s %8s %6d %8.0f %6s")
      :format(r.mix.name, r.route, r.front, r.up, r.extra * 100, ms(r.p50),
      ms(r.p99), ms(r.p999), ms(r.max), r.errors, r.us,
      none and none.us > 0 and ("%.2f"):format(r.us / none.us) or "-"))
  end
  local missed = 0
  local function target(ok, text)
    if not ok then missed = missed + 1 end
    print((ok and "met:    " or "MISSED: ") .. text)
  end
  for _, mix in ipairs(MIXES) do
    local none = by[mix.name .. "-none"]
    for _, route in ipairs { "fixed", "adaptive" } do
      local r = by[mix.name .. "-" .. route]
      local name = mix.name .. " " .. route
      if mix.cut then
        target(r.p99 <= none.p99 * mix.cut, ("%s: p99 %s ms <= %.2f x "
          .. "the unhedged %s ms"):format(name, ms(r.p99), mix.cut,
          ms(none.p99)))
      end
      if mix.never_worse then
        target(r.p50 <= none.p50 * 1.1 + 0.0005, ("%s: p50 %s ms <= 1.1 x "
          .. "the unhedged %s ms + 0.5 ms"):format(name, ms(r.p50),
          ms(none.p50)))
        target(r.p99 <= none.p99 * 1.1 + 0.002, ("%s: p99 %s ms <= 1.1 x "
          .. "the unhedged %s ms + 2 ms"):format(name, ms(r.p99),
          ms(none.p99)))
      end
      if mix.down then
        down_targets(target, name, r, none)
      else
        target(r.extra <= S.PERCENT / 100, ("%s: %.1f%% extra upstream "
          .. "requests <= %s%%"):format(name, r.extra * 100, S.PERCENT))
      end
      if mix.windows then
        target(r.window <= S.PERCENT / 100, ("%s: the worst 1 s window "
          .. "after the first: %.1f%% extra (second %d) <= %s%%"):format(
          name, r.window * 100, r.window_at, S.PERCENT))
      end
      if r.extra < 0.10 then
        target(r.us <= none.us * 1.3, ("%s: front CPU %.0f us per request "
          .. "<= 1.3 x the unhedged %.0f us (%.2f x)"):format(name, r.us,
          none.us, r.us / none.us))
      end
    end
  end
  local errors = 0
  for _, r in ipairs(results) do
    if not r.mix.down then errors = errors + r.errors end
  end
  print(("%d targets missed; %d requests failed (the down mix's "
    .. "excepted)"):format(missed, errors))
  return errors
end

local ok, results = pcall(main)
for _, p in ipairs { LOAD, SUT, UP } do H.stop_nginx(p) end
if not ok then
  io.stderr:write("bench-hedge: ", tostring(results), "\n")
  os.exit(1)
end
local errors = report(results)
local bad = {}
for _, p in ipairs { SUT, UP, LOAD } do
  for _, l in ipairs(H.errors_logged(p)) do bad[#bad + 1] = l end
end
if #bad > 0 then
  io.stderr:write("bench-hedge: nginx logged errors:\n",
    table.concat(bad, "\n", 1, math.min(#bad, 20)), "\n")
  os.exit(1)
end
if errors > 0 then os.exit(1) end
