-- Retry storms: a matrix of outages, in virtual time, driving the backoff
-- module (the model is bench/outage_model.lua; doc/budget.md discusses
-- the figures).
--
-- * 100 clients, each a process issuing 10 requests per second, open
--   loop (Poisson): 1,000 requests per second; the server serves a FIFO
--   queue at 1,500 per second and refuses at once (a plain 503) what
--   would wait more than 1 s.  Every failed attempt is retried by a
--   backoff object of its own: exponential from 0.1 s to 20 s, full
--   jitter, at most 10 attempts.
-- * The events, each after 20 s of normal load and followed by 45 s
--   more: every attempt fails at once with probability 10, 30, 50, 80
--   or 100% (a full outage), for 10, 60 or 300 s; and a brownout: for
--   60 s the capacity is halved and whatever cannot be served at once
--   is refused with 503 and Retry-After: 1.
-- * The settings: no retries; retries without a budget; the token
--   bucket budget{} (the AWS SDKs' quota: 500 tokens, cost 5, refund 1)
--   per process and shared by the 4 workers of a host; budget.grpc{}
--   (gRFC A6's example: 10 tokens, ratio 0.1); budget.ratio{} (Finagle:
--   20% over 10 s + 10/s); budget.adaptive{} (SRE: k 2 over 120 s); and
--   budget.recommended() per process and per host of 4.  Each at its
--   defaults.  AWS standard mode (budget{} with retry_cost =
--   budget.aws_cost) is the token bucket here: no error is a timeout.
--   The recommended setting is told what the server said: a retry
--   after the brownout's 503 + Retry-After is withdrawn at
--   bud:throttle_cost().
--
-- Figures per event and setting:
-- * amp: attempts the server receives during the event / requests the
--   clients issue during it;
-- * succ: the share of the requests issued during the event that
--   eventually succeed;
-- * drain: from the end of the event to the end of the last 1-second bin
--   in which retries are more than 5% of the requests issued in that bin;
-- * overload: from the end of the event to the last moment the server
--   refuses a request or makes one wait more than 0.1 s (not counting
--   the first 0.1 s, when the queue left by a brownout drains).
--
--   luajit bench/outage.lua [--seed 1] [--clients 100] [--rate 10]
--     [--capacity 1500] [--policy full|decorrelated|equal]
--     [--attempts 10] [--host 4] [--retry-after 1] [--only a,b]
--     [--shares 10,30,50,80,100] [--lengths 10,60,300] [--no-brownout]
--     [--csv FILE] [--svg FILE] [--markdown] [--check]
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
                ["--sweep"] = true, ["--no-brownout"] = true }
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

-- the recommended setting's retry cost: what the server said
local function throttle_cost(err, _, bud)
  if err == "throttle" then return bud:throttle_cost() end
end

-- the settings (host: the workers sharing a budget per host)
local function settings_for(host)
  return {
    { id = "none", name = "no retries", retries = false },
    { id = "retries", name = "retries, no budget", retries = true },
    { id = "token", name = "budget{} (token bucket)", retries = true,
      budget = function() return budget {} end },
    { id = "token4", name = "budget{}, host of " .. host, retries = true,
      share = host,
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
      cost = throttle_cost,
      budget = function(c) return budget.recommended { clock = c.clock } end },
    { id = "rec4", name = "recommended, host of " .. host, retries = true,
      share = host, cost = throttle_cost,
      budget = function(c)
        return budget.recommended { shared = c.dict, clock = c.clock }
      end },
  }
end

local function keep_only(settings, ids)
  local keep = {}
  for id in ids:gmatch("[^,]+") do keep[id] = true end
  for i = #settings, 1, -1 do
    if not keep[settings[i].id] then table.remove(settings, i) end
  end
  return settings
end

-- the event kinds, each with its events
local function kinds_for(shares, lengths, brownout)
  local kinds = {}
  for _, pct in ipairs(shares) do
    local p = pct / 100
    local kind = { id = ("fail%d"):format(pct),
      title = ("failing share %d%%"):format(pct), events = {} }
    for _, len in ipairs(lengths) do
      kind.events[#kind.events + 1] = { share = p, len = len }
    end
    kinds[#kinds + 1] = kind
  end
  if brownout then
    kinds[#kinds + 1] = { id = "brownout", events = { { brownout = 0.5,
      len = 60 } }, title = "brownout: half the capacity, 503 + Retry-After" }
  end
  return kinds
end

-- results[kind][event][setting id]
local function run_matrix(params, settings, kinds)
  local results = {}
  for k, kind in ipairs(kinds) do
    results[k] = {}
    for e, ev in ipairs(kind.events) do
      results[k][e] = {}
      for _, s in ipairs(settings) do
        results[k][e][s.id] = model.simulate(params, ev, s)
      end
    end
  end
  return results
end

-- The targets for the recommended setting (per process
-- against the per-process token bucket, per host against the host's).
-- Each measurement: { rid, target, value, ok, what [, ref_overloaded] }:
-- ref_overloaded, for the overload, when no retries overloads as well;
-- for success at 80%, when the token bucket overloads.
local TARGETS = {
  { id = "amp", text = "amplification in full outages (10, 60, 300 s)",
    limit = "<= 1.10", worst = "max", fmt = "%.3f" },
  { id = "succ", text = "failing 10-50%: success, points below no budget's",
    limit = "<= 2", worst = "max", fmt = "%.2f" },
  { id = "ovl", text = "overload after any event (s)", limit = "0",
    worst = "max", fmt = "%.1f" },
  { id = "drain", text = "drain after full outages and the brownout (s)",
    limit = "0", worst = "max", fmt = "%d" },
  { id = "drain_nob", text = "drain minus no budget's drain, any event (s)",
    limit = "<= 0", worst = "max", fmt = "%d" },
  { id = "s80", text = "failing 80%: success minus the token bucket's "
    .. "(points)", limit = ">= 0", worst = "min", fmt = "%.1f" },
  { id = "brown", text = "brownout: amplification (not a target: the "
    .. "retries made)", worst = "max", fmt = "%.3f" },
}
local TARGET = {}
for _, t in ipairs(TARGETS) do TARGET[t.id] = t end

local function measure(results, kinds, by_id)
  local out = {}
  local function add(rid, target, value, ok, what, extra)
    out[#out + 1] = { rid = rid, target = target, value = value, ok = ok,
                      what = what, ref_overloaded = extra }
  end
  for _, rid in ipairs { "rec", "rec4" } do
    local ref = rid == "rec" and "token" or "token4"
    if by_id[rid] then
      for k, kind in ipairs(kinds) do
        for e, ev in ipairs(kind.events) do
          local r = results[k][e][rid]
          local what = ("%s, %s, %d s"):format(by_id[rid].name, kind.title,
                                               ev.len)
          local nob = results[k][e].retries
          if ev.share == 1 then
            add(rid, "amp", r.amplification, r.amplification <= 1.10, what)
          end
          if ev.share == 1 or ev.brownout then
            add(rid, "drain", r.drain, r.drain == 0, what)
          end
          if ev.brownout then
            add(rid, "brown", r.amplification, nil, what)
          end
          -- the reference: no retries overloads too (a small fleet,
          -- whose queue passes `slow` by chance)
          local none = results[k][e].none
          add(rid, "ovl", r.overload, r.overload == 0, what,
              none and none.overload > 0)
          if nob then
            add(rid, "drain_nob", r.drain - nob.drain, r.drain <= nob.drain,
                what)
            if ev.share and ev.share <= 0.5 then
              local gap = 100 * (nob.success_in - r.success_in)
              add(rid, "succ", gap, r.success_in >= nob.success_in - 0.02,
                  what)
            end
          end
          local tb = results[k][e][ref]
          if ev.share == 0.8 and tb then
            add(rid, "s80", 100 * (r.success_in - tb.success_in),
                r.success_in >= tb.success_in, what, tb.overload > 0)
          end
        end
      end
    end
  end
  return out
end

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

local KINDS = kinds_for(list("--shares", "10,30,50,80,100"),
  list("--lengths", "10,60,300"), not option("--no-brownout", false))

local t0 = os.clock()
local results = run_matrix(params, SETTINGS, KINDS)
local elapsed = os.clock() - t0

print(("outage matrix: %d clients x %g requests/s (Poisson), capacity %g/s,"
  .. " %s jitter, %d attempts; seed %d; virtual time, %.1f s CPU")
  :format(params.clients, params.rate, params.capacity,
    policy_name, policy[2].max_attempts, params.seed,
    elapsed))
print("amp: attempts / requests during the event; succ: % of its requests"
  .. " that succeed;\ndrain, overld: seconds after the event (see the top"
  .. " of bench/outage.lua)")

local function cell(r)
  return ("%5.2f %5.1f %3d %4.1f"):format(r.amplification,
    100 * r.success_in, r.drain, r.overload)
end

for k, kind in ipairs(KINDS) do
  local head, sub = ("\n%-26s"):format(kind.title), ("%-26s"):format(
    "setting")
  if #kind.title > 26 then head, sub = "\n" .. kind.title .. "\n"
    .. (" "):rep(26), sub end
  for _, ev in ipairs(kind.events) do
    head = head .. ("  %-18s"):format(("---- %d s ----"):format(ev.len))
    sub = sub .. ("  %5s %5s %3s %4s"):format("amp", "succ", "dr", "ovl")
  end
  print(head)
  print(sub)
  for _, s in ipairs(SETTINGS) do
    local line = ("%-26s"):format(s.name)
    for e in ipairs(kind.events) do
      line = line .. "  " .. cell(results[k][e][s.id])
    end
    print(line)
  end
end

local failures, checked = {}, 0
for _, m in ipairs(measure(results, KINDS, by_id)) do
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
for _, f in ipairs(failures) do print("  missed: " .. f) end

-- a summary for the docs: one row per setting
if option("--markdown", false) then
  local cols = {
    { "10%, 60 s: succ", 1, 2, "succ" }, { "50%, 60 s: succ", 3, 2, "succ" },
    { "80%, 60 s: succ / amp", 4, 2, "both" },
    { "100%, 10 s: amp", 5, 1, "amp" }, { "100%, 60 s: amp", 5, 2, "amp" },
    { "100%, 300 s: amp", 5, 3, "amp" },
    { "brownout: succ / drain", 6, 1, "drain" },
  }
  local h, sep = "| setting |", "|---|"
  for _, c in ipairs(cols) do
    h, sep = h .. " " .. c[1] .. " |", sep .. "---|"
  end
  print("\n" .. h .. "\n" .. sep)
  for _, s in ipairs(SETTINGS) do
    local line = "| " .. s.name .. " |"
    for _, c in ipairs(cols) do
      local r = results[c[2]][c[3]][s.id]
      local v
      if c[4] == "succ" then v = ("%.1f%%"):format(100 * r.success_in)
      elseif c[4] == "amp" then v = ("%.2f"):format(r.amplification)
      elseif c[4] == "both" then
        v = ("%.1f%% / %.2f"):format(100 * r.success_in, r.amplification)
      else
        v = ("%.1f%% / %d s"):format(100 * r.success_in, r.drain)
      end
      line = line .. " " .. v .. " |"
    end
    print(line)
  end
end

-- the CSV: one line per (event, setting, second)
local f = assert(io.open(CSV, "w"))
f:write("event,length,setting,second,issued,received\n")
for k, kind in ipairs(KINDS) do
  for e, ev in ipairs(kind.events) do
    for _, s in ipairs(SETTINGS) do
      local r = results[k][e][s.id]
      for b = 1, r.bins do
        f:write(("%s,%d,%s,%d,%d,%d\n"):format(kind.id, ev.len, s.id, b - 1,
          r.issued[b] or 0, r.received[b] or 0))
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
    draw(path, kind, results[k], SETTINGS, params)
    print("wrote " .. path)
  end
end

if option("--check", false) and #failures > 0 then os.exit(1) end
