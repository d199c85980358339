-- Retry storms: a matrix of outages and the bad days around it, in
-- virtual time, driving the backoff module (the model is
-- bench/outage_model.lua; doc/budget.md discusses the figures).
--
-- * 100 clients, each a process issuing 10 requests per second, open
--   loop (Poisson): 1,000 requests per second; the server serves a FIFO
--   queue at 1,500 per second and refuses at once (a plain 503) what
--   would wait more than 1 s.  Every failed attempt is retried by a
--   backoff object of its own: exponential from 0.1 s to 20 s, full
--   jitter, at most 10 attempts.
-- * The matrix, each event after 20 s of normal load and followed by
--   45 s more: every attempt fails at once with probability 10, 30, 50,
--   80 or 100% (a full outage), for 10, 60 or 300 s; and a brownout:
--   for 60 s the capacity is halved and whatever cannot be served at
--   once is refused with 503 and Retry-After: 1.
-- * The bad days (--no-bad-days: none):
--   - timeouts: 50, 80 or 100% of the attempts hang and time out after
--     1 s (no server work), for 10 or 60 s;
--   - flapping: the upstream is down 5 s (every attempt fails at once)
--     and up 5 s, for 2 minutes;
--   - a metastable storm: capacity 1,050/s for the load of 1,000/s, and
--     each refusal costs the server half a request's work; a full
--     outage of 10 or 60 s, followed by 2 minutes;
--   - quiet processes: 1,000 requests/s from processes of 1, 2 and 5
--     requests/s each (1,000, 500 and 200 of them), failing 50, 80 or
--     100% for 10 or 60 s;
--   - a mixed fleet: 48 processes at 1 request/s and 48 at 20/s, 50% or
--     80% failing for 10 s; the success of each half.
-- * The settings: no retries; retries without a budget; the token
--   bucket budget{} (the AWS SDKs' quota: 500 tokens, cost 5, refund 1)
--   per process and shared by the 4 workers of a host; AWS standard
--   mode (budget{} with retry_cost = budget.aws_cost: a timeout's retry
--   costs 10), rows where failures are timeouts; budget.grpc{} (gRFC
--   A6's example: 10 tokens, ratio 0.1); budget.ratio{} (Finagle: 20%
--   over 10 s + 10/s); budget.adaptive{} (SRE: k 2 over 120 s); and
--   budget.recommended() per process and per host of 4; and the same
--   rule without its credit for recoveries (per_recovery = 0) and with
--   a timeout's retry at the cost of any other, as it was before them
--   (rows "rec., no credit, 1/timeout").  Each at its
--   defaults, driven as the runner drives a budget (see the model): a
--   retry after the brownout's 503 + Retry-After is withdrawn at
--   bud:throttle_cost(), one after a timeout at bud:timeout_cost(),
--   when the budget has the method (the recommended setting); rows
--   with a circuit breaker plug in at BREAKER_ROWS below.
--
-- Figures per event and setting:
-- * amp: attempts the server receives during the event / requests the
--   clients issue during it;
-- * succ: the share of the requests issued during the event that
--   eventually succeed;
-- * drain: from the end of the event to the end of the last 1-second bin
--   in which retries are more than 5% of the requests issued in that bin;
-- * overload (ovl): from the end of the event to the last moment the
--   server refuses a request or makes one wait more than 0.1 s (not
--   counting the first 0.1 s, when the queue left by a brownout drains);
-- * shed: requests the server refused (503), from the event's start on;
--   busy: seconds (in 0.1 s steps) from the event's start on in which
--   it refused one or made one wait more than 0.1 s.
--
--   luajit bench/outage.lua [--seed 1] [--clients 100] [--rate 10]
--     [--capacity 1500] [--policy full|decorrelated|equal]
--     [--attempts 10] [--host 4] [--retry-after 1] [--only a,b]
--     [--shares 10,30,50,80,100] [--lengths 10,60,300] [--no-brownout]
--     [--no-matrix] [--no-bad-days] [--csv FILE] [--svg FILE]
--     [--markdown] [--check]
--   luajit bench/outage.lua --sweep [--part I/N] [--rates 1,2,5,8,10,20]
--     [--sweep-csv FILE]     (the grid: see "The sweep" below)
--   luajit bench/outage.lua --by-rate 1,2,5,10,20   (see by_rate below)
--
-- --svg build/outage.svg writes build/outage-<event>.svg, one chart
-- file per kind of event.  --check exits 1 when the recommended setting
-- misses one of its targets (listed at the end of the output).
-- Seeded: the same figures on every run and every Lua.
local here = arg[0]:match("^(.-)[^/]*$")
local model = dofile(here .. "outage_model.lua")
local budget = require "backoff.budget"

local FLAGS = { ["--markdown"] = true, ["--check"] = true,
                ["--sweep"] = true, ["--no-brownout"] = true,
                ["--no-matrix"] = true, ["--no-bad-days"] = true }
local function option(name, default)
  for i = 1, #arg do
    if arg[i] == name then
      if FLAGS[name] then return true end
      return arg[i + 1]
    end
  end
  return default
end
local function number(name, default)
  local v = option(name, default)
  return assert(tonumber(v), name .. ": a number expected")
end
local function list(name, default)
  local out = {}
  for x in tostring(option(name, default)):gmatch("[^,]+") do
    out[#out + 1] = assert(tonumber(x), name .. ": numbers expected")
  end
  return out
end

-- a policy by name, with its attempts
local function policy_of(name, attempts)
  local p
  if name == "full" or name == "equal" then
    p = { "exponential", { initial_delay = 0.1, max_delay = 20,
      jitter = name } }
  elseif name == "decorrelated" then
    p = { "decorrelated", { initial_delay = 0.1, max_delay = 20 } }
  else
    error("--policy: full, equal or decorrelated")
  end
  p[2].max_attempts = attempts
  return p
end

-- the runner's cost of a retry (bench/outage_model.lua)
local runner_cost = model.runner_cost

-- AWS standard mode: ropts.retry_cost = budget.aws_cost
local function aws_cost(err) return budget.aws_cost(err) end

-- BREAKER_ROWS: the rows with a circuit breaker, "breaker alone" and
-- "budget + breaker", each a setting as below with `breaker = function(
-- ctx) -> a breaker` (the protocol the model drives: allows(), allow()
-- -> ok [, ticket], record(ok, ticket, seconds), release(ticket); one
-- object per process over the host's dict, ctx.dict and ctx.clock).
-- They appear when backoff.breaker can be loaded; its targets are not
-- checked here yet.
local function breaker_rows(host)
  local ok, breaker = pcall(require, "backoff.breaker")
  if not ok or type(breaker) ~= "table"
     or type(breaker.recommended) ~= "function" then
    return {}
  end
  -- seeded per process (the same figures on every run); a breaker
  -- that takes no seed (before 0.3.0) is built without one
  local function make(c)
    local o = { shared = c.dict, clock = c.clock, key = "upstream",
                seed = 7919 * c.client }
    local built, br = pcall(breaker.recommended, o)
    if built then return br end
    o.seed = nil
    return breaker.recommended(o)
  end
  return {
    { id = "brk4", name = "breaker alone, host of " .. host,
      retries = true, share = host, breaker = make },
    { id = "recbrk4", name = "rec. + breaker, host of " .. host,
      retries = true,
      share = host, cost = runner_cost, breaker = make,
      budget = function(c)
        return budget.recommended { shared = c.dict, clock = c.clock }
      end },
  }
end

-- the settings (host: the workers sharing a budget per host)
local function settings_for(host)
  local s = {
    { id = "none", name = "no retries", retries = false },
    { id = "retries", name = "retries, no budget", retries = true },
    { id = "token", name = "budget{} (token bucket)", retries = true,
      budget = function() return budget {} end },
    { id = "token4", name = "budget{}, host of " .. host, retries = true,
      share = host,
      budget = function(c) return budget { shared = c.dict } end },
    { id = "aws", name = "budget{} + aws_cost (AWS)", retries = true,
      cost = aws_cost, budget = function() return budget {} end },
    { id = "aws4", name = "AWS, host of " .. host, retries = true,
      share = host, cost = aws_cost,
      budget = function(c) return budget { shared = c.dict } end },
    { id = "grpc", name = "budget.grpc{} (A6)", retries = true,
      budget = function() return budget.grpc {} end },
    { id = "ratio", name = "budget.ratio{} (Finagle)", retries = true,
      budget = function(c) return budget.ratio { clock = c.clock } end },
    { id = "adaptive", name = "budget.adaptive{} (SRE)", retries = true,
      budget = function(c)
        return budget.adaptive { clock = c.clock, random = c.random }
      end },
    { id = "rec", name = "budget.recommended()", retries = true,
      cost = runner_cost,
      budget = function(c) return budget.recommended { clock = c.clock } end },
    { id = "rec4", name = "recommended, host of " .. host, retries = true,
      share = host, cost = runner_cost,
      budget = function(c)
        return budget.recommended { shared = c.dict, clock = c.clock }
      end },
  }
  -- the rule without its parts for the bad days: no credit for
  -- recoveries (so no first-retry rule), a timeout's retry at the cost
  -- of any other (the recommended setting before them)
  local function plain(err, _, bud)
    if err == "throttle" then return bud:throttle_cost() end
  end
  s[#s + 1] = { id = "rec0", name = "rec., no credit, 1/timeout",
    retries = true, cost = plain,
    budget = function(c)
      return budget.earned { clock = c.clock, per_recovery = 0 }
    end }
  s[#s + 1] = { id = "rec04", name = "the same, host of " .. host,
    retries = true, share = host, cost = plain,
    budget = function(c)
      return budget.earned { shared = c.dict, clock = c.clock,
                             per_recovery = 0 }
    end }
  for _, row in ipairs(breaker_rows(host)) do s[#s + 1] = row end
  return s
end

local function keep_only(settings, ids)
  local keep = {}
  for id in ids:gmatch("[^,]+") do keep[id] = true end
  for i = #settings, 1, -1 do
    if not keep[settings[i].id] then table.remove(settings, i) end
  end
  return settings
end

-- the settings of the matrix (AWS is the token bucket there: no
-- failure is a timeout)
local MATRIX_SKIP = { aws = true, aws4 = true }

-- The event kinds of the matrix, each with its events; a kind may
-- carry `params` (overriding the fleet's) and `only` (the settings it
-- runs, by id; default: all but MATRIX_SKIP)
local function kinds_for(shares, lengths, brownout)
  local kinds = {}
  for _, pct in ipairs(shares) do
    local p = pct / 100
    local kind = { id = ("fail%d"):format(pct), matrix = true,
      title = ("failing share %d%%"):format(pct), events = {} }
    for _, len in ipairs(lengths) do
      kind.events[#kind.events + 1] = { share = p, len = len }
    end
    kinds[#kinds + 1] = kind
  end
  if brownout then
    kinds[#kinds + 1] = { id = "brownout", matrix = true,
      events = { { brownout = 0.5, len = 60 } },
      title = "brownout: half the capacity, 503 + Retry-After" }
  end
  return kinds
end

local RECOVERY_ROWS = { none = true, retries = true, rec4 = true }

local QUIET_ROWS = { retries = true, token = true, token4 = true,
                     rec = true, rec4 = true, rec0 = true, rec04 = true }

-- The days of issue 31: a repeated outage, a ramp, a step of traffic, a
-- herd released at recovery, capacity below the load (the settings of
-- MORE_ROWS, and the breaker's rows)
local MORE_ROWS = { none = true, retries = true, token4 = true,
  aws4 = true, rec = true, rec4 = true, rec0 = true, rec04 = true }
local function more_days()
  return {
    { id = "repeat", repeated = true, only = MORE_ROWS,
      title = "a second outage 3 s after a 10 s one",
      events = { { share = 1, len = 23, flap = { 10, 3 }, second = 13 } } },
    { id = "ramp", ramp = true, only = MORE_ROWS,
      title = "failing share ramping 0 -> 100% over 60 s, 30 s at 100%, "
        .. "back over 60 s",
      events = { { share = 1, len = 150, ramp = { 60, 30, 60 } } } },
    { id = "step", step = true, only = MORE_ROWS,
      title = "10x the traffic for 10 s, 50% failing",
      events = { { share = 0.5, len = 10, step = 10 } } },
    { id = "herd", herd = true, only = MORE_ROWS,
      title = "a herd: the requests of a 10 s outage held, all sent at "
        .. "its end",
      events = { { share = 1, len = 10, hold = true } } },
    { id = "slowcap", slowcap = true, only = MORE_ROWS,
      title = "capacity down to 900/s for 60 s; clients give up after "
        .. "1 s, the server works on",
      params = { queue_max = 2 },
      events = { { slow = 0.6, len = 60 } } },
  }
end

-- The bad days, for a fleet of `load` requests/s
local function bad_days(load)
  local kinds = {}
  for _, pct in ipairs { 50, 80, 100 } do
    kinds[#kinds + 1] = { id = ("timeout%d"):format(pct), timeouts = true,
      title = ("timeouts: %d%% of the attempts hang 1 s"):format(pct),
      events = { { share = pct / 100, len = 10, timeout = 1 },
                 { share = pct / 100, len = 60, timeout = 1 } } }
  end
  kinds[#kinds + 1] = { id = "flap", flap = true,
    title = "flapping: down 5 s, up 5 s, for 2 minutes",
    events = { { share = 1, len = 120, flap = { 5, 5 } } } }
  -- recovery: full outages, then a minute: the seconds until every
  -- second's requests succeed again (rec), the minute after's success
  kinds[#kinds + 1] = { id = "recovery", recovery = true,
    only = RECOVERY_ROWS, params = { post = 60 },
    title = "full outages, then a minute: recovery",
    events = { { share = 1, len = 10 }, { share = 1, len = 60 },
               { share = 1, len = 300 } } }
  -- (the ramp is one of more_days': it has the breaker's rows too)
  kinds[#kinds + 1] = { id = "metastable", metastable = true,
    title = "metastable storm: capacity 1,050/s, a refusal costs half "
      .. "a request",
    params = { capacity = 1.05 * load, reject_cost = 0.5, post = 120 },
    events = { { share = 1, len = 10 }, { share = 1, len = 60 } } }
  for _, rate in ipairs { 1, 2, 5 } do
    for _, pct in ipairs { 50, 80, 100 } do
      kinds[#kinds + 1] = { id = ("quiet%d_%d"):format(rate, pct),
        quiet = rate, only = QUIET_ROWS,
        title = ("%g request/s per process (%d of them), %d%% failing")
          :format(rate, math.floor(load / rate + 0.5), pct),
        params = { clients = math.floor(load / rate + 0.5), rate = rate },
        events = { { share = pct / 100, len = 10 },
                   { share = pct / 100, len = 60 } } }
    end
  end
  for _, k in ipairs(more_days()) do kinds[#kinds + 1] = k end
  local half = math.floor(load / 21 + 0.5)
  kinds[#kinds + 1] = { id = "mixed", mixed = true, only = QUIET_ROWS,
    title = ("a mixed fleet: %d processes at 1/s, %d at 20/s")
      :format(half, half),
    params = { groups = { { clients = half, rate = 1 },
                          { clients = half, rate = 20 } } },
    events = { { share = 0.5, len = 10 }, { share = 0.8, len = 10 } } }
  return kinds
end

local function runs(kind, s)
  if kind.only then return kind.only[s.id] or s.breaker ~= nil end
  if kind.matrix then return not MATRIX_SKIP[s.id] end
  return true
end

local function kind_params(params, kind)
  if not kind.params then return params end
  local p = {}
  for k, v in pairs(params) do p[k] = v end
  for k, v in pairs(kind.params) do p[k] = v end
  if kind.params.groups then p.clients, p.rate = nil, nil end
  return p
end

-- results[kind][event][setting id]
local function run_matrix(params, settings, kinds)
  local results = {}
  for k, kind in ipairs(kinds) do
    results[k] = {}
    local p = kind_params(params, kind)
    for e, ev in ipairs(kind.events) do
      results[k][e] = {}
      for _, s in ipairs(settings) do
        if runs(kind, s) then
          results[k][e][s.id] = model.simulate(p, ev, s)
        end
      end
    end
  end
  return results
end

local M = dofile(here .. "outage_targets.lua")
local TARGETS, TARGET, measure = M.TARGETS, M.TARGET, M.measure

------------------------------------------------------------------------
-- the sweep: the targets over a grid of fleets, checked for the
-- recommended setting per process and per host
--
-- For each rate per client (--rates) and each of the 12 combinations of
-- policy (full jitter, decorrelated), attempts (5, 10, 20) and capacity
-- (1.5x and 3x the offered load): one run of the whole matrix, with the
-- seed (1-5) and the client count (20, 50, 100, 200, 400) cycling so
-- that each rate meets every seed and every client count.

local function sweep()
  local rates = list("--rates", "1,2,5,8,10,20")
  local part, parts = 1, 1
  if option("--part", nil) then
    part, parts = option("--part"):match("^(%d+)/(%d+)$")
    part, parts = assert(tonumber(part), "--part I/N"), tonumber(parts)
  end
  local host = number("--host", 4)
  local CLIENTS = { 20, 50, 100, 200, 400 }
  local grid = {}
  for a, rate in ipairs(rates) do
    local b = 0
    for _, pol in ipairs { "full", "decorrelated" } do
      for _, att in ipairs { 5, 10, 20 } do
        for _, capf in ipairs { 1.5, 3 } do
          grid[#grid + 1] = { rate = rate, policy = pol, attempts = att,
            capf = capf, seed = b % 5 + 1,
            clients = CLIENTS[(a + b) % 5 + 1] }
          b = b + 1
        end
      end
    end
  end
  local settings = keep_only(settings_for(host),
    option("--only", "none,retries,token,token4,rec,rec4"))
  local by_id = {}
  for _, s in ipairs(settings) do by_id[s.id] = s end
  local kinds = kinds_for(list("--shares", "10,30,50,80,100"),
    list("--lengths", "10,60,300"), not option("--no-brownout", false))
  local csv = assert(io.open(option("--sweep-csv",
    ("build/outage-sweep-%d.csv"):format(part)), "w"))
  csv:write("rate,clients,capacity,policy,attempts,seed,setting,target,"
    .. "value,ok,ref_overloaded,event\n")
  local worst, misses, checked = {}, {}, 0
  local t0 = os.clock()
  for g, cfg in ipairs(grid) do
    if (g - 1) % parts == part - 1 then
      local params = { seed = cfg.seed, clients = cfg.clients,
        rate = cfg.rate, capacity = cfg.capf * cfg.clients * cfg.rate,
        retry_after = number("--retry-after", 1),
        policy = policy_of(cfg.policy, cfg.attempts) }
      local results = run_matrix(params, settings, kinds)
      local label = ("rate %g x %d clients, capacity %gx, %s, %d attempts,"
        .. " seed %d"):format(cfg.rate, cfg.clients, cfg.capf, cfg.policy,
        cfg.attempts, cfg.seed)
      local missed = 0
      for _, m in ipairs(measure(results, kinds, by_id)) do
        local t = TARGET[m.target]
        for _, key in ipairs { m.rid .. "/" .. m.target,
            not m.ref_overloaded and m.rid .. "/" .. m.target .. "/clean"
            or nil } do
          local w = worst[key]
          if not w or (t.worst == "max" and m.value > w.value)
             or (t.worst == "min" and m.value < w.value) then
            worst[key] = { value = m.value, what = m.what, label = label }
          end
        end
        if m.ok ~= nil then
          checked = checked + 1
          if not m.ok then
            missed = missed + 1
            misses[#misses + 1] = label .. ": " .. m.what .. ": "
              .. t.text .. " = " .. (t.fmt):format(m.value)
              .. (m.ref_overloaded and (m.target == "ovl"
                  and " (no retries overloads too)"
                  or " (the token bucket overloads)") or "")
          end
        end
        csv:write(("%g,%d,%g,%s,%d,%d,%s,%s,%.6g,%s,%s,%q\n"):format(
          cfg.rate, cfg.clients, params.capacity, cfg.policy, cfg.attempts,
          cfg.seed, m.rid, m.target, m.value, tostring(m.ok),
          tostring(m.ref_overloaded or false), m.what))
      end
      print(("%3d/%d  %-66s %2d missed  (%.0f s CPU)"):format(g, #grid,
        label, missed, os.clock() - t0))
      io.stdout:flush()
    end
  end
  csv:close()
  print(("\nworst case per target (%d runs of %d, part %d/%d):")
    :format(math.ceil((#grid - part + 1) / parts), #grid, part, parts))
  for _, t in ipairs(TARGETS) do
    for _, rid in ipairs { "rec", "rec4" } do
      for _, sub in ipairs { "", "/clean" } do
        local w = worst[rid .. "/" .. t.id .. sub]
        local all = worst[rid .. "/" .. t.id]
        if w and (sub == "" or w.value ~= all.value) then
          print(("  %-5s %-56s %8s  (target %s)%s\n        at %s; %s")
            :format(rid, t.text, (t.fmt):format(w.value), t.limit or "none",
            sub == "" and "" or (t.id == "ovl"
              and "  where no retries does not overload"
              or "  where the token bucket does not overload"),
            w.label, w.what))
        end
      end
    end
  end
  print(("\n%d targets checked, %d missed"):format(checked, #misses))
  for _, m in ipairs(misses) do print("  missed: " .. m) end
  if option("--check", false) and #misses > 0 then os.exit(1) end
end

-- --by-rate 1,2,5,10,20: the recommended setting at other rates per
-- client, the offered load kept at 1,000 requests/s (clients = 1000 /
-- rate), 1,500/s of capacity: a markdown table of its amplification in
-- full outages and its success in half-failing events (no budget's in
-- brackets), per process and per host
local function by_rate()
  local host = number("--host", 4)
  local settings = keep_only(settings_for(host), "retries,rec,rec4")
  local kinds = kinds_for({ 50, 100 }, { 10, 60, 300 }, false)
  print("| requests/s per client (clients) | budget | full outage 10 s / "
    .. "60 s / 300 s: amp | 50% failing 10 s / 60 s / 300 s: succ (no "
    .. "budget's) |")
  print("|---|---|---|---|")
  for _, rate in ipairs(list("--by-rate", "1,2,5,10,20")) do
    local clients = math.floor(1000 / rate + 0.5)
    local params = { seed = number("--seed", 1), clients = clients,
      rate = rate, capacity = number("--capacity", 1500),
      retry_after = number("--retry-after", 1),
      policy = policy_of(option("--policy", "full"),
                         number("--attempts", 10)) }
    local res = run_matrix(params, settings, kinds)
    for _, rid in ipairs { "rec", "rec4" } do
      local amp, succ = {}, {}
      for e = 1, 3 do
        amp[e] = ("%.2f"):format(res[2][e][rid].amplification)
        succ[e] = ("%.1f%% (%.1f%%)"):format(100 * res[1][e][rid].success_in,
          100 * res[1][e].retries.success_in)
      end
      print(("| %g (%d) | %s | %s | %s |"):format(rate, clients,
        rid == "rec" and "per process" or "host of " .. host,
        table.concat(amp, " / "), table.concat(succ, " / ")))
    end
    io.stdout:flush()
  end
end

if option("--sweep", false) then
  sweep()
  os.exit(0)
end
if option("--by-rate", false) then
  by_rate()
  os.exit(0)
end

------------------------------------------------------------------------
-- one fleet: the tables, the targets, the summary, the CSV and the SVG

local policy_name = option("--policy", "full")
local policy = policy_of(policy_name, number("--attempts", 10))
local HOST = number("--host", 4)
local params = {
  seed = number("--seed", 1), clients = number("--clients", 100),
  rate = number("--rate", 10), capacity = number("--capacity", 1500),
  retry_after = number("--retry-after", 1), policy = policy,
}
local CSV = option("--csv", "build/outage.csv")
local SVG = option("--svg", nil)

local SETTINGS = settings_for(HOST)
if option("--only", nil) then keep_only(SETTINGS, option("--only")) end
local by_id = {}
for _, s in ipairs(SETTINGS) do by_id[s.id] = s end

local KINDS = {}
if not option("--no-matrix", false) then
  KINDS = kinds_for(list("--shares", "10,30,50,80,100"),
    list("--lengths", "10,60,300"), not option("--no-brownout", false))
end
if not option("--no-bad-days", false) then
  for _, k in ipairs(bad_days(params.clients * params.rate)) do
    KINDS[#KINDS + 1] = k
  end
end

local t0 = os.clock()
local results = run_matrix(params, SETTINGS, KINDS)
local elapsed = os.clock() - t0

print(("outage matrix: %d clients x %g requests/s (Poisson), capacity %g/s,"
  .. " %s jitter, %d attempts; seed %d; virtual time, %.1f s CPU")
  :format(params.clients, params.rate, params.capacity,
    policy_name, policy[2].max_attempts, params.seed,
    elapsed))
print("amp: attempts / requests during the event; succ: % of its requests"
  .. " that succeed;\ndr (drain), ovl (overload): seconds after the event;"
  .. " shed: requests refused,\nbusy: seconds overloaded from the event's"
  .. " start on (see the top of bench/outage.lua)")

M.print_tables(KINDS, results, SETTINGS)

local failures, checked = {}, 0
local measured = measure(results, KINDS, by_id)
-- the breaker's figures, each (recbrk4: the recommended budget and
-- breaker, host of 4, against the budget alone)
local first = true
for _, m in ipairs(measured) do
  if m.rid == "recbrk4" and m.target ~= "brk" then
    if first then
      print("\nthe recommended budget + breaker, host of " .. HOST
            .. " (target; ok):")
      first = false
    end
    local t = TARGET[m.target]
    print(("  %s: %s = " .. t.fmt .. " (%s; %s)"):format(m.what, t.text,
      m.value, t.limit or "reported", m.ok == nil and "-" or
      (m.ok and "ok" or "MISSED")))
  end
end
for _, m in ipairs(measured) do
  if m.ok ~= nil then
    checked = checked + 1
    if not m.ok then
      local t = TARGET[m.target]
      failures[#failures + 1] = m.what .. ": " .. t.text .. " = "
        .. (t.fmt):format(m.value) .. " (target " .. t.limit .. ")"
    end
  end
end
print(("\ntargets of the recommended setting: %d checked, %d missed")
  :format(checked, #failures))
-- flapping at <= 1.5x: reported (bench/flap_oracle.lua: no budget can)
for _, m in ipairs(measured) do
  if m.target == "flapload" and (m.rid == "rec" or m.rid == "rec4") then
    print(("  reported: %s: %s = %.3f"):format(m.what, TARGET.flapload.text,
      m.value))
  end
end
for _, f in ipairs(failures) do print("  missed: " .. f) end

if option("--markdown", false) then M.markdown(KINDS, results, SETTINGS) end

-- the CSV: one line per (event, setting, second)
local f = assert(io.open(CSV, "w"))
f:write("event,length,setting,second,issued,received\n")
for k, kind in ipairs(KINDS) do
  for e, ev in ipairs(kind.events) do
    for _, s in ipairs(SETTINGS) do
      local r = results[k][e][s.id]
      if r then
        for b = 1, r.bins do
          f:write(("%s,%d,%s,%d,%d,%d\n"):format(kind.id, ev.len, s.id,
            b - 1, r.issued[b] or 0, r.received[b] or 0))
        end
      end
    end
  end
end
f:close()
print("\nwrote " .. CSV)

if SVG then
  local draw = dofile(here .. "outage_svg.lua")
  local prefix = SVG:gsub("%.svg$", "")
  for k, kind in ipairs(KINDS) do
    local path = prefix .. "-" .. kind.id .. ".svg"
    draw(path, kind, results[k], SETTINGS, kind_params(params, kind))
    print("wrote " .. path)
  end
end

if option("--check", false) and #failures > 0 then os.exit(1) end
