-- Retry storms: a full outage, in virtual time, driving the backoff module.
--
-- The model (every number below is a constant of this file):
-- * 100 clients, each a process issuing 10 requests per second, open
--   loop: arrivals are Poisson (the users keep sending whatever the
--   server does; together they are 1,000 requests per second).
-- * The server fails every request at once from 60 s to 120 s (a full
--   outage: connection refused or an immediate 503), of a run in which
--   requests arrive during 180 s. Outside the outage it serves a FIFO
--   queue at 1,500 requests per second (the fleet runs at two thirds of
--   its capacity); a request that would wait more than 1 s in the queue
--   is rejected at once (a 503: load shedding). The network takes no time.
-- * Every failed attempt (outage or rejection) is retried as the policy
--   says, with one backoff object per request (seeded, timestamps =
--   virtual time): exponential, 0.1 s doubling to at most 20 s, full
--   jitter; or decorrelated, 0.1 s to at most 20 s; both at most 10
--   attempts per request.
-- * With the budget, each client process has its own backoff.budget{}
--   (500 tokens, a retry costs 5, a success refunds 1), as every AWS SDK
--   client has its own retry quota; or, as in OpenResty with
--   `shared = ngx.shared.DICT`, the client processes are the workers of
--   nginx hosts and the workers of a host share one budget (4 workers
--   per host in the main table; 1 to 8 in a table of its own; the
--   scenarios and the first table are those chosen before the first
--   run, the shared rows were added after it). Before each retry the client
--   withdraws the cost (no tokens: the request fails); on success it
--   deposits the cost of the retry that succeeded, or the refund (1) for
--   a first-try success.
--
-- Figures, per scenario:
-- * amplification: attempts the server receives from 60 s to 120 s
--   divided by the requests the clients issue in that window.
-- * drain: from the recovery (120 s) to the end of the last 1-second
--   bin in which retries are more than 5% of the requests the clients
--   issue in that bin (the retry backlog is gone after it); 0 if none.
-- * overload: from the recovery to the last moment the server rejects a
--   request or makes one wait more than 0.1 s (before the outage it never
--   does either); 0 if never.
-- * success: requests that eventually succeed, of all requests and of
--   those issued during the outage.
-- Then full jitter again, with and without the budget, for outages of 10
-- to 300 s (arrivals go on until 60 s after the recovery).
--
-- --csv FILE (default build/outage.csv): one line per scenario and second
-- (requests issued, attempts received, successes, rejections); --svg
-- FILE: the attempts the server receives per second, over time.
--
--   luajit bench/outage.lua [--seed 1] [--csv FILE] [--svg FILE]
--
-- The arrivals come from a generator of this file (Park-Miller), and the
-- jitter from seeded backoff objects, so the figures are the same on
-- every Lua.
local backoff = require "backoff"
local new_budget = backoff.budget

local function option(name, default)
  for i = 1, #arg - 1 do
    if arg[i] == name then return arg[i + 1] end
  end
  return default
end

local SEED = assert(tonumber(option("--seed", 1)), "--seed: a number")
local CSV = option("--csv", "build/outage.csv")
local SVG = option("--svg", nil)

local CLIENTS, RATE = 100, 10          -- processes, requests/s each
local ARRIVALS_END = 180               -- requests arrive in [0, 180)
local OUT_START, OUT_LEN = 60, 60      -- the outage: [60, 120)
local CAPACITY = 1500                  -- requests/s after recovery
local QUEUE_MAX = 1.0                  -- longest wait before a 503 (s)
local SLOW = 0.1                       -- a wait above this is overload
local COST = 5                         -- the default budget's cost

local POLICIES = {
  full = { "exponential", { initial_delay = 0.1, max_delay = 20,
    jitter = "full", max_attempts = 10 } },
  decorrelated = { "decorrelated", { initial_delay = 0.1, max_delay = 20,
    max_attempts = 10 } },
}

local SCENARIOS = {
  { name = "no retries" },
  { name = "retries", jitter = "full" },
  { name = "retries", jitter = "decorrelated" },
  { name = "retries + budget", jitter = "full", budget = true },
  { name = "retries + budget", jitter = "decorrelated", budget = true },
  { name = "retries + host budget", jitter = "full", budget = true,
    share = 4 },
  { name = "retries + host budget", jitter = "decorrelated", budget = true,
    share = 4 },
}
local SHARES = { 1, 2, 4, 8 }          -- client processes per budget

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

local floor, log = math.floor, math.log

-- events: a binary heap over parallel arrays (no table per event)
local new_heap = dofile((arg[0]:match("^(.-)[^/]*$")) .. "heap.lua")
local ARRIVE, RETRY, DONE = 1, 2, 3

local function simulate(sc, out_len)
  local out_end = OUT_START + out_len
  local push, pop, empty = new_heap()

  local policy = sc.jitter and POLICIES[sc.jitter]
  local strategy, opts = policy and policy[1], {}
  if policy then
    for k, v in pairs(policy[2]) do opts[k] = v end
  end
  local budgets = {}                   -- by client: its host's budget
  if sc.budget then
    local share = sc.share or 1
    for c = 1, CLIENTS do
      budgets[c] = (c - 1) % share == 0 and new_budget {}
        or budgets[c - 1]
    end
  end

  -- per second (bin b covers [b - 1, b)): requests the clients issue,
  -- attempts the server receives, successes, rejections
  local issued, received, succeeded, rejected = {}, {}, {}, {}
  -- per request: client, issue time, retries so far, backoff object
  local rclient, rstart, rtries, robj = {}, {}, {}, {}
  local n, ok, ok_out, n_out, free_at, last_overload = 0, 0, 0, 0, 0, nil
  local in_window, out_window = 0, 0

  local function count(tbl, b) tbl[b] = (tbl[b] or 0) + 1 end

  local function fail(id, t)
    if not policy then return end
    local b = robj[id]
    if not b then                      -- built at the first failure
      opts.seed = SEED * 1000003 + id  -- the same per request everywhere
      opts.start = rstart[id]
      b = backoff.new(strategy, opts)
      robj[id] = b
    end
    local delay = b:failure(t)
    if delay and (not sc.budget or budgets[rclient[id]]:withdraw()) then
      rtries[id] = rtries[id] + 1
      push(t + delay, RETRY, id)
    else
      robj[id] = nil                   -- the request has failed
    end
  end

  local function attempt(id, t)
    local b = floor(t) + 1
    count(received, b)
    if t >= OUT_START and t < out_end then
      out_window = out_window + 1
      return fail(id, t)
    end
    local wait = free_at - t
    if wait > QUEUE_MAX then
      count(rejected, b)
      last_overload = t
      return fail(id, t)
    end
    if wait > SLOW then last_overload = t end
    free_at = (wait > 0 and free_at or t) + 1 / CAPACITY
    push(free_at, DONE, id)
  end

  local random = generator(SEED)
  local total_rate = CLIENTS * RATE
  push(-log(random()) / total_rate, ARRIVE, 0)
  local now = 0
  while not empty() do
    local t, k, id = pop()
    now = t
    if k == ARRIVE then
      n = n + 1
      rclient[n] = floor(random() * CLIENTS) + 1
      rstart[n], rtries[n] = t, 0
      count(issued, floor(t) + 1)
      if t >= OUT_START and t < out_end then
        in_window, n_out = in_window + 1, n_out + 1
      end
      local next_t = t - log(random()) / total_rate
      if next_t < ARRIVALS_END + out_len - OUT_LEN then
        push(next_t, ARRIVE, 0)
      end
      attempt(n, t)
    elseif k == RETRY then
      attempt(id, t)
    else                               -- DONE: the request succeeded
      ok = ok + 1
      count(succeeded, floor(t) + 1)
      if rstart[id] >= OUT_START and rstart[id] < out_end then
        ok_out = ok_out + 1
      end
      if sc.budget then
        local bud = budgets[rclient[id]]
        if rtries[id] > 0 then bud:deposit(COST) else bud:deposit() end
      end
      robj[id] = nil
    end
  end

  local bins = floor(now) + 1
  local drain = 0
  for b = floor(out_end) + 1, bins do
    local retries = (received[b] or 0) - (issued[b] or 0)
    if retries > 0.05 * (issued[b] or 0) then drain = b - out_end end
  end
  return {
    amplification = out_window / in_window,
    drain = drain,
    overload = last_overload and last_overload > out_end
      and last_overload - out_end or 0,
    success = ok / n, success_out = ok_out / n_out,
    requests = n,
    bins = bins, issued = issued, received = received,
    succeeded = succeeded, rejected = rejected,
  }
end

local function label(sc)
  return sc.jitter and ("%s (%s)"):format(sc.name, sc.jitter) or sc.name
end

-- the full jitter scenario with a budget shared by `share` clients
local function shared(share)
  return { name = "retries + budget", jitter = "full", budget = true,
    share = share }
end

local t0 = os.clock()
local results = {}
for s, sc in ipairs(SCENARIOS) do
  if sc.budget and not new_budget then
    io.stderr:write("no backoff.budget in this build: skipping ",
      label(sc), "\n")
  else
    results[s] = simulate(sc, OUT_LEN)
  end
end

-- the same for other outage lengths (full jitter, with and without the
-- budget): the budget allows capacity / cost = 100 retries per client
-- in all, so its amplification is about 1 + 100 / (requests per client
-- during the outage)
local SWEEP = { 10, 30, 60, 120, 300 }
local sweep = {}
for i, len in ipairs(SWEEP) do
  sweep[i] = {}
  for s = 2, #SCENARIOS do
    local sc = SCENARIOS[s]
    if sc.jitter == "full" and results[s] then
      sweep[i][#sweep[i] + 1] = len == OUT_LEN and results[s]
        or simulate(sc, len)
    end
  end
end
-- budgets shared by the workers of a host: the budget allows 100
-- retries per host, so about 1 + 100 / (share x requests per client
-- during the outage)
local by_share = {}
if new_budget then
  for i, share in ipairs(SHARES) do
    for s, sc in ipairs(SCENARIOS) do   -- a scenario above, if any
      if sc.budget and sc.jitter == "full" and (sc.share or 1) == share then
        by_share[i] = results[s]
      end
    end
    by_share[i] = by_share[i] or simulate(shared(share), OUT_LEN)
  end
end
local elapsed = os.clock() - t0

print(("outage: %d clients x %d requests/s (Poisson), server down %d-%d s,"
  .. " then %d requests/s; seed %d, virtual time, %.1f s CPU")
  :format(CLIENTS, RATE, OUT_START, OUT_START + OUT_LEN, CAPACITY, SEED,
    elapsed))
print(("\n%-38s %13s %9s %9s %9s %9s"):format("scenario", "amplification",
  "drain s", "overld s", "success", "in outage"))
for s, sc in ipairs(SCENARIOS) do
  local r = results[s]
  if r then
    print(("%-38s %13.2f %9d %9.1f %8.1f%% %8.1f%%"):format(label(sc),
      r.amplification, r.drain, r.overload, 100 * r.success,
      100 * r.success_out))
  end
end

print("\nfull jitter, other outage lengths (arrivals go on 60 s after"
  .. " the recovery)")
print(("%8s %14s %9s %16s %9s"):format("outage s", "amplification",
  "drain s", "with budget", "drain s"))
for i, len in ipairs(SWEEP) do
  local a, b = sweep[i][1], sweep[i][2]
  print(("%8d %14.2f %9d %16s %9s"):format(len, a.amplification, a.drain,
    b and ("%.2f"):format(b.amplification) or "-",
    b and ("%d"):format(b.drain) or "-"))
end

if by_share[1] then
  print(("\nfull jitter, %d s outage, one budget{} per host shared by its"
    .. " workers"):format(OUT_LEN))
  print(("%18s %14s %9s"):format("workers per host", "amplification",
    "drain s"))
  for i, share in ipairs(SHARES) do
    print(("%18d %14.2f %9d"):format(share, by_share[i].amplification,
      by_share[i].drain))
  end
end

-- the CSV: one line per (scenario, second)
local f = assert(io.open(CSV, "w"))
f:write("scenario,jitter,workers_per_budget,second,issued,received,"
  .. "succeeded,rejected\n")
for s, sc in ipairs(SCENARIOS) do
  local r = results[s]
  for b = 1, r and r.bins or 0 do
    f:write(("%s,%s,%s,%d,%d,%d,%d,%d\n"):format(sc.name, sc.jitter or "",
      sc.budget and (sc.share or 1) or "",
      b - 1, r.issued[b] or 0, r.received[b] or 0, r.succeeded[b] or 0,
      r.rejected[b] or 0))
  end
end
f:close()
print("\nwrote " .. CSV)

-- the SVG: attempts the server receives per second, over time, one chart
-- per jitter kind, the outage shaded, the capacity dashed
if SVG then
  local colors = { "#555555", "#d62728", "#1f77b4", "#2ca02c" }
  local W, H, M = 460, 300, 50
  local x_end, top = ARRIVALS_END, 0      -- arrivals stop at x_end
  for s = 1, #SCENARIOS do
    local r = results[s]
    for b = 1, r and x_end or 0 do
      top = math.max(top, r.received[b] or 0)
    end
  end
  top = 2000 * math.ceil(top / 2000)
  local out = { ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" '
    .. 'height="%d" font-family="sans-serif" font-size="11">')
    :format(2 * W + 40, H + 70) }
  local function add(fmt, ...) out[#out + 1] = fmt:format(...) end
  local function chart(ox, jitter, title)
    local function x(t) return ox + M + t / x_end * (W - M - 10) end
    local function y(v) return 20 + (H - 40) * (1 - v / top) end
    add('<rect x="%.1f" y="20" width="%.1f" height="%d" fill="#eeeeee"/>',
      x(OUT_START), x(OUT_START + OUT_LEN) - x(OUT_START), H - 40)
    add('<text x="%.1f" y="34" text-anchor="middle">outage</text>',
      x(OUT_START + OUT_LEN / 2))
    add('<text x="%d" y="14" font-weight="bold">%s</text>', ox + M, title)
    add('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>',
      ox + M, H - 20, ox + W - 10, H - 20)
    add('<line x1="%d" y1="20" x2="%d" y2="%d" stroke="black"/>',
      ox + M, ox + M, H - 20)
    for k = 0, 4 do
      local v = top * k / 4
      add('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>',
        ox + M - 4, y(v) + 4, v)
    end
    for t = 0, x_end, 20 do
      add('<text x="%.1f" y="%d" text-anchor="middle">%d</text>',
        x(t), H - 6, t)
    end
    add('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" '
      .. 'stroke-dasharray="4,3"/>', ox + M, y(CAPACITY), ox + W - 10,
      y(CAPACITY))
    add('<text x="%d" y="%.1f" text-anchor="end">capacity</text>',
      ox + W - 12, y(CAPACITY) - 4)
    for i = 1, #SCENARIOS do           -- 2, 3, ..., then 1 on top
      local s = i % #SCENARIOS + 1
      local r, sc = results[s], SCENARIOS[s]
      if r and (sc.jitter == nil or sc.jitter == jitter) then
        local pts = {}
        for b = 1, x_end do
          pts[#pts + 1] = ("%.1f,%.1f"):format(x(b - 0.5),
            y(r.received[b] or 0))
        end
        add('<polyline fill="none" stroke="%s" stroke-width="1.5" %s'
          .. 'points="%s"/>', colors[sc.share and 4 or sc.budget and 3
          or sc.jitter and 2 or 1],
          sc.jitter and "" or 'stroke-dasharray="3,3" ',
          table.concat(pts, " "))
      end
    end
  end
  chart(0, "full", "full jitter: server requests per second vs time (s)")
  chart(W + 40, "decorrelated",
    "decorrelated: server requests per second vs time (s)")
  for s, name in ipairs { "no retries", "retries (10 attempts)",
    "retries + budget{}", "budget{} per host of 4" } do
    local lx = 30 + (s - 1) * 230
    add('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
      .. '<text x="%d" y="%d">%s</text>', lx, H + 30, colors[s],
      lx + 16, H + 40, name)
  end
  out[#out + 1] = "</svg>"
  f = assert(io.open(SVG, "w"))
  f:write(table.concat(out, "\n"), "\n")
  f:close()
  print("wrote " .. SVG)
end
