-- The budget at fleet scale, for bench/fleet_model.lua: HOSTS hosts of
-- 4 workers, each worker a process at 0.25 requests/s (Poisson), the
-- recommended budget per host (shared by its 4 workers), with and
-- without backoff.fleet's grant on top (fl:budget, interval 1 s, the
-- real Redis script on spec/fleet_fake_redis.lua), driven by
-- bench/outage_model.lua as backoff.retry drives ropts.budget
-- (exponential 0.1-20 s, full jitter, 10 attempts).
--
--   local rows = dofile("bench/fleet_budget.lua")(HOSTS [, seed [,
--     events [, sides]]])
-- -> per event ({ share, len }: 50% failing and full outages of 60 and
-- 10 s by default) and side (false: per host, true: the fleet, both by
-- default) { share, len, fleet, r = the model's figures, cpu }
local fleet = require "backoff.fleet"
local budget = require "backoff.budget"

local here = debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./"
local model = dofile(here .. "outage_model.lua")
local fake = dofile(here .. "../spec/fleet_fake_redis.lua")

local runner_cost = model.runner_cost   -- as backoff.retry pays

-- a setting: the recommended budget per host, with the fleet or not.
-- The hosts' timers: each host syncs at k x interval + its phase; at
-- every budget call of any host, the syncs due by then run first, in
-- their order (an exact timer, as nginx's, for the budget calls: a
-- sync between two calls of the whole fleet changes nothing they see).
local function setting(with_fleet, interval, opts)
  local R, hosts, order = nil, {}, {}
  local due = { round = 0, i = 1 }
  local function host_of(ctx)
    local h = hosts[ctx.host]
    if h then return h end
    R = R or fake(ctx.clock)
    h = { phase = ctx.random() * interval }
    h.fl = fleet.new { shared = false, host = "h" .. ctx.host,
      clock = ctx.clock, client = R.client, interval = interval }
    h.fl.dict = ctx.dict
    hosts[ctx.host] = h
    order[#order + 1] = h
    return h
  end
  local function timers(now)
    if due.sorted == nil then
      table.sort(order, function(a, b) return a.phase < b.phase end)
      due.sorted = true
    end
    while true do
      local h = order[due.i]
      if due.round * interval + h.phase > now then return end
      h.fl:sync()
      due.i = due.i + 1
      if due.i > #order then due.i, due.round = 1, due.round + 1 end
    end
  end
  return { retries = true, share = 4, cost = runner_cost,
    budget = function(ctx)
      local bud = budget.recommended { shared = ctx.dict, clock = ctx.clock }
      if not with_fleet then return bud end
      local g = host_of(ctx).fl:budget(bud, opts)
      return setmetatable({}, { __index = function(_, k)
        timers(ctx.clock())
        local f = g[k]
        if type(f) ~= "function" then return f end
        return function(_, ...) return f(g, ...) end
      end })
    end }
end

return function(hosts, seed, events, sides)
  local params = { clients = 4 * hosts, rate = 0.25, seed = seed or 1,
                   capacity = 1500 * hosts / 1000 }
  local rows = {}
  events = events or { { share = 0.5, len = 60 }, { share = 1, len = 60 },
                       { share = 1, len = 10 } }
  for _, ev in ipairs(events) do
    for _, w in ipairs(sides or { false, true }) do
      local t0 = os.clock()
      local r = model.simulate(params, ev, setting(w, 1, { key = "api" }))
      rows[#rows + 1] = { share = ev.share, len = ev.len, fleet = w, r = r,
                          cpu = os.clock() - t0 }
    end
  end
  return rows
end
