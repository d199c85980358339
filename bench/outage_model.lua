-- The model of bench/outage.lua: a fleet of clients, a server, one event
-- (a partial or full outage, or a brownout), in virtual time, with this
-- module's backoff objects and budgets driving every retry.
--
--   local simulate = dofile("bench/outage_model.lua")
--   local r = simulate(params, event, setting)
--
-- params (every field has a default, see DEFAULTS):
--   clients, rate      client processes, requests/s each (Poisson, open
--                      loop: the users keep sending whatever happens)
--   capacity           requests/s the server serves (a FIFO queue)
--   queue_max          a request that would wait longer is refused at
--                      once (a plain 503: load shedding)
--   slow               a wait above this is overload
--   pre, post          seconds of arrivals before and after the event
--   seed               arrivals, failures and jitter all derive from it
--   policy             { strategy, options }: one object per request
--   retry_after        the brownout's Retry-After (seconds)
-- event:
--   { share = p, len = L }   each attempt in [pre, pre + L) fails at
--                            once with probability p (1: a full outage)
--   { brownout = f, len = L }  capacity x f during [pre, pre + L); an
--                            attempt the server cannot take at once is
--                            refused with 503 and Retry-After
-- setting:
--   { retries = false }      no retries
--   { retries = true [, budget = make] [, share = n] [, cost = fn] }
--     make(ctx) -> a budget; ctx = { client, host, dict, clock, random }:
--     `dict` is one fake ngx.shared dict per host of `share` clients
--     (share 1 or nil: one per client), clock() the virtual time,
--     random() a seeded uniform draw.  The budget is driven as
--     backoff.retry drives ropts.budget (lua/backoff.lua): before each
--     retry withdraw(cost(err, attempt)); after every attempt
--     record(ok, attempt, paid) when the budget has record, else the
--     legacy deposit on success (the retry's cost, or nothing for a
--     first attempt: deposit() with no argument).  err is "fail" (the
--     event), "shed" (a plain 503 from the queue) or "throttle" (the
--     brownout's 503 with Retry-After).
--
-- Returns the figures of the event (see bench/outage.lua) and, per
-- second, the requests issued and the attempts received.
local backoff = require "backoff"

local floor, log = math.floor, math.log

local DEFAULTS = {
  clients = 100, rate = 10, capacity = 1500, queue_max = 1.0, slow = 0.1,
  pre = 20, post = 45, seed = 1, retry_after = 1,
  policy = { "exponential", { initial_delay = 0.1, max_delay = 20,
    jitter = "full", max_attempts = 10 } },
}

-- Park-Miller "minimal standard" (multiplier 48271): exact in doubles,
-- so the same stream on every Lua
local M31 = 2147483647
local function generator(seed)
  local x = seed % (M31 - 1) + 1
  return function()
    x = x * 48271 % M31
    return x / M31                     -- in (0, 1)
  end
end

-- a fake ngx.shared dict with the semantics bench/outage.lua needs
-- (lua-resty-core's incr with init, get, set, add); single-threaded, as
-- the workers of a host take turns in virtual time
local function fake_dict()
  local data = {}
  local d = {}
  function d.incr(_, key, value, init)
    local v = data[key]
    if v == nil then
      if init == nil then return nil, "not found" end
      v = init
    elseif type(v) ~= "number" then
      return nil, "not a number"
    end
    v = v + value
    data[key] = v
    return v
  end
  function d.get(_, key) return data[key] end
  function d.set(_, key, v) data[key] = v return true end
  function d.add(_, key, v)
    if data[key] ~= nil then return false, "exists" end
    data[key] = v
    return true
  end
  return d
end

local new_heap = dofile((debug.getinfo(1, "S").source:match("^@(.-)[^/]*$")
  or "./") .. "heap.lua")
local RETRY = 2

local function simulate(params, event, setting)
  local P = {}
  for k, v in pairs(DEFAULTS) do P[k] = v end
  for k, v in pairs(params or {}) do P[k] = v end
  local CLIENTS, RATE, CAP = P.clients, P.rate, P.capacity
  local ev_start = P.pre
  local ev_end = ev_start + event.len
  local arrivals_end = ev_end + P.post
  local share_fail = event.share or 0
  local brown = event.brownout
  local HINT = P.retry_after

  local push, pop, empty, peek = new_heap()
  local random = generator(P.seed)
  local fail_draw = generator(P.seed * 7919 + 17)
  local now = 0
  local function clock() return now end

  local retries = setting.retries
  local strategy, opts = P.policy[1], {}
  for k, v in pairs(P.policy[2]) do opts[k] = v end

  -- by client: its budget (nil: none)
  local budgets, has_record = {}, false
  local cost_of = setting.cost
  if retries and setting.budget then
    local share = setting.share or 1
    local dict
    for c = 1, CLIENTS do
      local host = floor((c - 1) / share) + 1
      if (c - 1) % share == 0 then dict = fake_dict() end
      budgets[c] = setting.budget { client = c, host = host, dict = dict,
        clock = clock, random = generator(P.seed * 104729 + c) }
    end
    has_record = budgets[1].record ~= nil
  end

  -- per second (bin b covers [b - 1, b)): requests issued, attempts the
  -- server receives
  local issued, received = {}, {}
  -- per request: client, issue time, attempt number, backoff object,
  -- what the last withdrawal paid
  local rclient, rstart, rattempt, robj, rpaid = {}, {}, {}, {}, {}
  local n, ok_all, ok_in, n_in, free_at = 0, 0, 0, 0, 0
  local last_overload
  local in_window, att_window = 0, 0
  local refused = 0                     -- retries the budget refused

  local function record(id, ok)
    local bud = budgets[rclient[id]]
    if not bud then return end
    if has_record then
      bud:record(ok, rattempt[id], rpaid[id])
    elseif ok then                      -- the legacy path
      if rattempt[id] == 1 then bud:deposit()
      else bud:deposit(rpaid[id] or bud:cost()) end
    end
  end

  local max_attempts = opts.max_attempts or 0

  -- the retry is paid as the runner pays it: after the policy's delay,
  -- before the sleep (withdraw(cost) with cost from the setting)
  local function pay(id, err, bud)
    local cost = cost_of and cost_of(err, rattempt[id], bud) or nil
    if not bud:withdraw(cost) then
      refused = refused + 1
      robj[id] = nil
      return false
    end
    rpaid[id] = cost                   -- nil: the budget's own cost
    return true
  end

  local function fail(id, t, err, hint)
    record(id, false)
    if not retries then return end
    local bud = budgets[rclient[id]]
    local b = robj[id]
    local paid = false
    if not b then                      -- built at the first failure
      -- a first failure never makes the policy give up (no deadline,
      -- max_attempts > 1): pay first, so that a refused retry costs no
      -- object (the same decisions, in less time)
      if max_attempts ~= 1 and bud then
        if not pay(id, err, bud) then return end
        paid = true
      end
      opts.seed = P.seed * 1000003 + id  -- the same per request everywhere
      opts.start = rstart[id]
      b = backoff.new(strategy, opts)
      robj[id] = b
    end
    local delay = b:failure(t, hint)
    if not delay then robj[id] = nil return end
    if bud and not paid and not pay(id, err, bud) then return end
    rattempt[id] = rattempt[id] + 1
    push(t + delay, RETRY, id)
  end

  -- successes leave the FIFO queue in order: a plain array of
  -- (time, id) instead of the heap
  local done_t, done_id, dhead, dtail = {}, {}, 1, 0

  local function attempt(id, t)
    local b = floor(t) + 1
    received[b] = (received[b] or 0) + 1
    local during = t >= ev_start and t < ev_end
    if during then att_window = att_window + 1 end
    if during and share_fail > 0 and fail_draw() < share_fail then
      return fail(id, t, "fail")
    end
    local wait = free_at - t
    if during and brown then            -- shed at once what would wait
      if wait + 1 / (CAP * brown) > P.slow - 1e-6 then  -- past `slow`
        return fail(id, t, "throttle", HINT)
      end
    elseif wait > P.queue_max then
      last_overload = t
      return fail(id, t, "shed")
    end
    if wait > P.slow then last_overload = t end
    local rate = (during and brown) and CAP * brown or CAP
    free_at = (wait > 0 and free_at or t) + 1 / rate
    dtail = dtail + 1
    done_t[dtail], done_id[dtail] = free_at, id
  end

  local total_rate = CLIENTS * RATE
  local huge = math.huge
  -- the next arrival is kept apart: there is only ever one
  local next_arrival = -log(random()) / total_rate
  while true do
    local ta = next_arrival
    local td = dhead <= dtail and done_t[dhead] or huge
    local tr = empty() and huge or peek()
    if ta <= td and ta <= tr then
      if ta == huge then break end
      now = ta
      n = n + 1
      rclient[n] = floor(random() * CLIENTS) + 1
      rstart[n], rattempt[n] = ta, 1
      local b = floor(ta) + 1
      issued[b] = (issued[b] or 0) + 1
      if ta >= ev_start and ta < ev_end then
        in_window, n_in = in_window + 1, n_in + 1
      end
      next_arrival = ta - log(random()) / total_rate
      if next_arrival >= arrivals_end then next_arrival = huge end
      attempt(n, ta)
    elseif td <= tr then               -- a success leaves the queue
      now = td
      local id = done_id[dhead]
      done_t[dhead], done_id[dhead] = nil, nil
      dhead = dhead + 1
      ok_all = ok_all + 1
      if rstart[id] >= ev_start and rstart[id] < ev_end then
        ok_in = ok_in + 1
      end
      record(id, true)
      robj[id], rpaid[id] = nil, nil
    else
      local t, _, id = pop()
      now = t
      attempt(id, t)
    end
  end

  local bins = floor(now) + 1
  local drain = 0
  for b = floor(ev_end) + 1, bins do
    local r = (received[b] or 0) - (issued[b] or 0)
    if r > 0.05 * (issued[b] or 0) then drain = b - ev_end end
  end
  return {
    amplification = att_window / in_window,
    drain = drain,
    -- the queue the event itself left (up to `slow` deep in a
    -- brownout) drains within `slow`: only later waits count
    overload = last_overload and last_overload > ev_end + P.slow
      and last_overload - ev_end or 0,
    success = ok_all / n, success_in = ok_in / n_in,
    requests = n, refused = refused,
    bins = bins, issued = issued, received = received,
    start = ev_start, stop = ev_end, budgets = budgets,
  }
end

return { simulate = simulate, defaults = DEFAULTS, generator = generator,
         fake_dict = fake_dict }
