-- The model of bench/outage.lua: a fleet of clients, a server, one event
-- (a partial or full outage, failures that are timeouts, a flapping
-- upstream, a brownout), in virtual time, with this module's backoff
-- objects and budgets driving every retry.
--
--   local model = dofile("bench/outage_model.lua")
--   local r = model.simulate(params, event, setting)
--
-- params (every field has a default, see DEFAULTS):
--   clients, rate      client processes, requests/s each (Poisson, open
--                      loop: the users keep sending whatever happens)
--   groups             instead of clients and rate, a mixed fleet:
--                      { { clients = n, rate = r }, ... }; a host of
--                      `share` processes never mixes groups; the
--                      results have success_in per group
--   capacity           requests/s the server serves (a FIFO queue)
--   queue_max          a request that would wait longer is refused at
--                      once (a plain 503: load shedding)
--   reject_cost        the server work of one such refusal, in services
--                      of a request (0: free; a metastable server pays)
--   slow               a wait above this is overload
--   client_timeout     with a `slow` event: the clients' timeout (1 s)
--   pre, post          seconds of arrivals before and after the event
--   seed               arrivals, failures and jitter all derive from it
--   policy             { strategy, options }: one object per request
--   retry_after        the brownout's Retry-After (seconds)
-- event:
--   { share = p, len = L }   each attempt in [pre, pre + L) fails with
--                            probability p (1: a full outage), at once
--   ... timeout = T          ... or after T seconds, error "timeout"
--                            (the upstream hangs: no server work)
--   ... flap = { D, U }      ... only in the down phases: D seconds
--                            down, U up, D down, ... from pre
--   ... ramp = { U, H, D }   ... with probability p x a ramp: rising
--                            from 0 over U seconds, H at the top, back
--                            to 0 over D (len = U + H + D)
--   ... step = k             ... and the clients send k times their
--                            rate during the event
--   ... hold = true          ... and the requests issued during the
--                            event are held, all sent at its end (a
--                            herd released at recovery)
--   { brownout = f, len = L }  capacity x f during [pre, pre + L); an
--                            attempt the server cannot take at once is
--                            refused with 503 and Retry-After
--   { slow = f, len = L }    capacity x f during [pre, pre + L), and
--                            the clients give up on an attempt after
--                            client_timeout (error "timeout") while the
--                            server still does its work (wasted); pass
--                            a queue_max above client_timeout
-- setting:
--   { retries = false }      no retries
--   { retries = true [, budget = make] [, share = n] [, cost = fn]
--     [, breaker = make] }
--     make(ctx) -> a budget; ctx = { client, host, dict, clock, random }:
--     `dict` is one fake ngx.shared dict per host of `share` clients of
--     a group (share 1 or nil: one per client; spec/budget_dict.lua, expiring
--     on the virtual clock), clock() the virtual time, random() a
--     seeded uniform draw.  The budget is driven as backoff.retry drives
--     ropts.budget (doc/budget.md, "With backoff.retry"): after every
--     attempt record(ok, attempt, paid) when the budget has record, and
--     right after a failure's record its retry's withdraw(cost(err,
--     attempt, bud)) (cost nil: the budget's own); else the legacy
--     deposit on success (the retry's cost, or nothing for a
--     first attempt: deposit() with no argument).  err is "fail" (the
--     event), "timeout" (the event, a hung attempt), "shed" (a plain
--     503 from the queue) or "throttle" (the brownout's 503 with
--     Retry-After).
--     breaker(ctx) -> an object with the breaker protocol (allows(),
--     allow() -> ok [, ticket], record(ok, ticket, seconds),
--     release(ticket)), one per host as the budget: an attempt it does
--     not allow is not made and ends its request (a retry's budget
--     payment is given back with deposit); a retry is not paid for when
--     allows() says no at the failure.  See bench/outage.lua's
--     BREAKER_ROWS.
--
-- Returns the figures of the event (see bench/outage.lua) and, per
-- second, the requests issued and the attempts received.
local backoff = require "backoff"

local floor, log = math.floor, math.log

-- the seconds a breaker holds a run it refuses (its hold(); nil: none)
local function holds(brk)
  local f = brk.hold
  local s = type(f) == "function" and f(brk)
  if type(s) == "number" and s > 0 then return s end
  return nil
end
local here = debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./"
local new_dict = dofile(here .. "../spec/budget_dict.lua")
local new_heap = dofile(here .. "heap.lua")

local DEFAULTS = {
  clients = 100, rate = 10, capacity = 1500, queue_max = 1.0, slow = 0.1,
  pre = 20, post = 60, seed = 1, retry_after = 1, reject_cost = 0,
  client_timeout = 1,
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

local RETRY, TIMEOUT = 2, 3

-- the fleet: per client its group; groups' cumulative rates for the
-- arrivals (one draw picks the client: with one group, as before)
local function fleet(P)
  local groups = P.groups or { { clients = P.clients, rate = P.rate } }
  local client_group, cum, first = {}, {}, {}
  local n, total = 0, 0
  for g, grp in ipairs(groups) do
    first[g] = n
    for _ = 1, grp.clients do
      n = n + 1
      client_group[n] = g
    end
    total = total + grp.clients * grp.rate
    cum[g] = total
  end
  local function pick(u)
    local x = u * total
    for g = 1, #groups do
      if x < cum[g] or g == #groups then
        local before = g > 1 and cum[g - 1] or 0
        local i = floor((x - before) / groups[g].rate)
        if i >= groups[g].clients then i = groups[g].clients - 1 end
        return first[g] + i + 1
      end
    end
  end
  return n, total, client_group, #groups, pick
end

local function simulate(params, event, setting)
  local P = {}
  for k, v in pairs(DEFAULTS) do P[k] = v end
  for k, v in pairs(params or {}) do P[k] = v end
  local CLIENTS, total_rate, client_group, NGROUPS, pick = fleet(P)
  local CAP = P.capacity
  local ev_start = P.pre
  local ev_end = ev_start + event.len
  local arrivals_end = ev_end + P.post
  local share_fail = event.share or 0
  local brown = event.brownout
  local hang = event.timeout
  local flap_down, flap_cycle
  if event.flap then
    flap_down = event.flap[1]
    flap_cycle = event.flap[1] + event.flap[2]
  end
  local HINT = P.retry_after
  local ramp, step, hold = event.ramp, event.step, event.hold
  local slowcap = event.slow
  local CT = slowcap and P.client_timeout
  local REJECT = (P.reject_cost or 0) / CAP

  local push, pop, empty, peek = new_heap()
  local random = generator(P.seed)
  local fail_draw = generator(P.seed * 7919 + 17)
  local now = 0
  local function clock() return now end

  local retries = setting.retries
  local strategy, opts = P.policy[1], {}
  for k, v in pairs(P.policy[2]) do opts[k] = v end

  -- by client: its budget and breaker (nil: none); one per host of
  -- `share` clients of the same group
  local budgets, breakers, has_record = {}, {}, false
  local cost_of = setting.cost
  if retries and (setting.budget or setting.breaker) then
    local share = setting.share or 1
    local dict, host, k = nil, 0, 0
    for c = 1, CLIENTS do
      if k == share or client_group[c] ~= client_group[c - 1] then k = 0 end
      if k == 0 then
        dict, host = new_dict(), host + 1
        dict.now = clock
      end
      k = k + 1
      -- each process builds its own objects over the host's dict
      local ctx = { client = c, host = host, dict = dict, clock = clock,
        random = generator(P.seed * 104729 + c), group = client_group[c] }
      budgets[c] = setting.budget and setting.budget(ctx)
      breakers[c] = setting.breaker and setting.breaker(ctx)
    end
    has_record = budgets[1] ~= nil and budgets[1].record ~= nil
  end

  -- per second (bin b covers [b - 1, b)): requests issued, attempts the
  -- server receives
  local issued, received, succeeded = {}, {}, {}
  local served, wasted = 0, 0           -- from the event's start on
  -- per request: client, issue time, attempt number, backoff object,
  -- what the last withdrawal paid, the breaker's ticket and the
  -- attempt's start
  local rclient, rstart, rattempt, robj, rpaid = {}, {}, {}, {}, {}
  local rticket, rsent = {}, {}
  local n, ok_all, ok_in, n_in, free_at = 0, 0, 0, 0, 0
  local g_ok, g_n = {}, {}
  for g = 1, NGROUPS do g_ok[g], g_n[g] = 0, 0 end
  local last_overload
  local in_window, att_window = 0, 0
  local refused, shed, opened = 0, 0, 0
  local ovl_bins = {}                   -- 0.1 s bins with overload

  local function overloaded(t)
    last_overload = t
    ovl_bins[floor(t * 10)] = true
  end

  local function record(id, ok)
    local c = rclient[id]
    local brk = breakers[c]
    if brk then brk:record(ok, rticket[id], now - rsent[id]) end
    local bud = budgets[c]
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

  -- a paid retry not made: what withdraw took, given back
  local function give_back(bud, id)
    local paid = rpaid[id]
    if paid == nil and bud.cost then paid = bud:cost() end
    if paid ~= nil then bud:deposit(paid) end
  end

  local function fail(id, t, err, hint)
    record(id, false)
    if not retries then return end
    local c = rclient[id]
    local bud = budgets[c]
    local brk = breakers[c]
    -- open: no retry, nothing paid (a breaker that holds is asked
    -- after the wait, as the engine does)
    if brk and not holds(brk) and not brk:allows() then
      robj[id] = nil
      return
    end
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
    if not delay then
      if paid then give_back(bud, id) end
      robj[id] = nil
      return
    end
    if bud and not paid and not pay(id, err, bud) then return end
    rattempt[id] = rattempt[id] + 1
    push(t + delay, RETRY, id)
  end

  -- successes leave the FIFO queue in order: a plain array of
  -- (time, id) instead of the heap
  local done_t, done_id, dhead, dtail = {}, {}, 1, 0

  -- the failing share at t (in the event), on the ramp if any
  local function share_at(t)
    if not ramp then return share_fail end
    local x = t - ev_start
    if x < ramp[1] then return share_fail * x / ramp[1] end
    x = x - ramp[1] - ramp[2]
    if x < 0 then return share_fail end
    return share_fail * (1 - x / ramp[3])
  end

  local function failing(t)
    if t < ev_start or t >= ev_end or share_fail == 0 then return false end
    if flap_cycle and (t - ev_start) % flap_cycle >= flap_down then
      return false
    end
    return fail_draw() < share_at(t)
  end

  -- A run the breaker refuses is held as the engine holds it
  -- (lua/backoff/engine/hold.lua): it waits its policy's next delay and
  -- asks again while that ask comes within hold() seconds of its start
  -- (a retry keeps its payment; a first attempt pays nothing).
  local function held(id, t, brk)
    local hold_s = retries and holds(brk)
    if not hold_s then return false end
    local b = robj[id]
    if not b then
      opts.seed = P.seed * 1000003 + id
      opts.start = rstart[id]
      b = backoff.new(strategy, opts)
      robj[id] = b
    end
    local delay = b:failure(t)
    if not delay or delay <= 0 or t + delay - rstart[id] > hold_s then
      return false
    end
    push(t + delay, RETRY, id)
    return true
  end

  local function attempt(id, t)
    local c = rclient[id]
    local brk = breakers[c]
    if brk then
      local ok, ticket = brk:allow()
      if not ok then                    -- not made: held, or the end
        opened = opened + 1
        if held(id, t, brk) then return end
        local bud = budgets[c]
        if bud and rattempt[id] > 1 then give_back(bud, id) end
        robj[id] = nil
        return
      end
      rticket[id] = ticket
    end
    rsent[id] = t
    local b = floor(t) + 1
    received[b] = (received[b] or 0) + 1
    local during = t >= ev_start and t < ev_end
    if during then att_window = att_window + 1 end
    if failing(t) then
      if hang then return push(t + hang, TIMEOUT, id) end
      return fail(id, t, "fail")
    end
    local wait = free_at - t
    if during and brown then            -- shed at once what would wait
      if wait + 1 / (CAP * brown) > P.slow - 1e-6 then  -- past `slow`
        return fail(id, t, "throttle", HINT)
      end
    elseif wait > P.queue_max then
      overloaded(t)
      shed = shed + 1
      if REJECT > 0 then free_at = free_at + REJECT end
      return fail(id, t, "shed")
    end
    if wait > P.slow then overloaded(t) end
    local rate = (during and brown) and CAP * brown
      or (during and slowcap) and CAP * slowcap or CAP
    free_at = (wait > 0 and free_at or t) + 1 / rate
    if t >= ev_start then served = served + 1 end
    if CT and free_at - t > CT then    -- the client gives up first: the
      if t >= ev_start then wasted = wasted + 1 end  -- work is wasted
      return push(t + CT, TIMEOUT, id)
    end
    dtail = dtail + 1
    done_t[dtail], done_id[dtail] = free_at, id
  end

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
      local c = pick(random())
      rclient[n] = c
      rstart[n], rattempt[n] = ta, 1
      local b = floor(ta) + 1
      issued[b] = (issued[b] or 0) + 1
      if ta >= ev_start and ta < ev_end then
        in_window, n_in = in_window + 1, n_in + 1
        local g = client_group[c]
        g_n[g] = g_n[g] + 1
      end
      local during = ta >= ev_start and ta < ev_end
      next_arrival = ta - log(random()) / (step and during and
        total_rate * step or total_rate)
      if next_arrival >= arrivals_end then next_arrival = huge end
      if hold and during then           -- held: sent at the event's end
        push(ev_end, RETRY, n)
      else
        attempt(n, ta)
      end
    elseif td <= tr then               -- a success leaves the queue
      now = td
      local id = done_id[dhead]
      done_t[dhead], done_id[dhead] = nil, nil
      dhead = dhead + 1
      ok_all = ok_all + 1
      local sb = floor(rstart[id]) + 1
      succeeded[sb] = (succeeded[sb] or 0) + 1
      if rstart[id] >= ev_start and rstart[id] < ev_end then
        ok_in = ok_in + 1
        local g = client_group[rclient[id]]
        g_ok[g] = g_ok[g] + 1
      end
      record(id, true)
      robj[id], rpaid[id], rticket[id] = nil, nil, nil
    else
      local t, kind, id = pop()
      now = t
      if kind == TIMEOUT then
        fail(id, t, "timeout")
      else
        attempt(id, t)
      end
    end
  end

  local bins = floor(now) + 1
  local drain, peak = 0, 0
  for b = floor(ev_end) + 1, bins do
    local r = (received[b] or 0) - (issued[b] or 0)
    if r > 0.05 * (issued[b] or 0) then drain = b - ev_end end
    if (received[b] or 0) > peak then peak = received[b] or 0 end
  end
  local ovl_total = 0
  for i in pairs(ovl_bins) do
    if i >= floor(ev_start * 10) then ovl_total = ovl_total + 0.1 end
  end
  -- back: from the event's end to the end of the last second whose
  -- requests did not all succeed (99%; recover: 100%); after: the
  -- success of the requests of the minute after it (as much of it as
  -- the run has)
  local back, recover, a_n, a_ok = 0, 0, 0, 0
  for b = floor(ev_end) + 1, bins do
    local k = issued[b] or 0
    if k > 0 and (succeeded[b] or 0) < 0.99 * k then back = b - ev_end end
    if (succeeded[b] or 0) < k then recover = b - ev_end end
    if b <= ev_end + 60 then
      a_n, a_ok = a_n + k, a_ok + (succeeded[b] or 0)
    end
  end
  local g_succ = {}
  for g = 1, NGROUPS do g_succ[g] = g_n[g] > 0 and g_ok[g] / g_n[g] or 1 end
  return {
    amplification = att_window / in_window,
    drain = drain,
    -- the queue the event itself left (up to `slow` deep in a
    -- brownout) drains within `slow`: only later waits count
    overload = last_overload and last_overload > ev_end + P.slow
      and last_overload - ev_end or 0,
    -- seconds (in 0.1 s bins) from the event's start on in which the
    -- server refused a request or made one wait more than `slow`
    overloaded = ovl_total,
    shed = shed, peak_after = peak, opened = opened,
    back = back, recover = recover, after = a_n > 0 and a_ok / a_n or 1,
    wasted = served > 0 and wasted / served or 0,
    success = ok_all / n, success_in = ok_in / n_in, group_success = g_succ,
    requests = n, refused = refused,
    bins = bins, issued = issued, received = received,
    succeeded = succeeded,
    start = ev_start, stop = ev_end, budgets = budgets,
  }
end

-- the runner's cost of a retry (doc/budget.md, "With backoff.retry"):
-- after a hint (the brownout's Retry-After) bud:throttle_cost(), after
-- a timeout bud:timeout_cost(), when the budget has them; else nil,
-- the budget's own.  A setting's `cost`, for the drivers that pay as
-- backoff.retry pays (bench/outage.lua, bench/fleet_budget.lua)
local function runner_cost(err, _, bud)
  if err == "throttle" and bud.throttle_cost then
    return bud:throttle_cost()
  end
  if err == "timeout" and bud.timeout_cost then return bud:timeout_cost() end
end

return { simulate = simulate, defaults = DEFAULTS, generator = generator,
         new_dict = new_dict, runner_cost = runner_cost }
