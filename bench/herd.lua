-- The thundering herd, in virtual time, driving the backoff module.
--
-- The model of "Exponential Backoff And Jitter" (Marc Brooker, AWS
-- Architecture Blog, 2015): N clients start together and each wants to
-- update one row once, with optimistic concurrency: read the version,
-- then write conditionally; a write with a stale version fails, and the
-- client waits its backoff before reading again.  Every network hop
-- takes |Normal(10 ms, 2 ms)|.  "work" is the number of write calls,
-- "time" is when the last message of the run is handled; both are
-- averaged over the runs.
--
--   luajit bench/herd.lua [--runs 100] [--max-clients 190]
--                         [--csv FILE] [--svg FILE]
local backoff = require "backoff"

local function option(name, default)
  for i = 1, #arg - 1 do
    if arg[i] == name then return arg[i + 1] end
  end
  return default
end

local RUNS = tonumber(option("--runs", 100))
local MAX_CLIENTS = tonumber(option("--max-clients", 190))
local CSV = option("--csv", "build/herd.csv")
local SVG = option("--svg", nil)

-- the strategies compared (seconds); exponential gives 10, 20, 40 ... ms
-- for the 1st, 2nd, 3rd ... consecutive failure, capped at 2 s
local STRATEGIES = {
  { "none", "constant", { delay = 0 } },
  { "exponential", "exponential", { initial_delay = 0.010, max_delay = 2 } },
  { "full jitter", "exponential", { initial_delay = 0.010, max_delay = 2,
    jitter = "full" } },
  { "equal jitter", "exponential", { initial_delay = 0.010, max_delay = 2,
    jitter = "equal" } },
  { "proportional 0.5", "exponential", { initial_delay = 0.010,
    max_delay = 2, jitter_factor = 0.5 } },
  { "decorrelated", "decorrelated", { initial_delay = 0.005, max_delay = 2,
    multiplier = 3 } },
}

-- |Normal(10 ms, 2 ms)| by Box-Muller, in seconds
local random, log, sqrt, cos, pi = math.random, math.log, math.sqrt,
  math.cos, math.pi
local function hop()
  local u = 1 - random()
  local d = 0.010 + 0.002 * sqrt(-2 * log(u)) * cos(2 * pi * random())
  return d < 0 and -d or d
end

-- events: a binary heap over parallel arrays (no table per event)
local new_heap = dofile((arg[0]:match("^(.-)[^/]*$")) .. "heap.lua")
local READ, READ_RSP, WRITE, WRITE_RSP = 1, 2, 3, 4

local function simulate(n, strategy, opts, run)
  local push, pop, empty = new_heap()

  local clients = {}
  for c = 1, n do
    opts.seed = run * 100003 + c       -- reproducible, distinct streams
    opts.start = 0
    clients[c] = backoff.new(strategy, opts)
    push(hop(), c, READ, 0)
  end
  local version, writes, now = 0, 0, 0
  while not empty() do
    local t, c, k, v = pop()
    now = t
    if k == READ then                   -- server: reply with the version
      push(t + hop(), c, READ_RSP, version)
    elseif k == READ_RSP then           -- client: write that version
      push(t + hop(), c, WRITE, v)
    elseif k == WRITE then              -- server: conditional write
      writes = writes + 1
      local ok = v == version
      if ok then version = version + 1 end
      push(t + hop(), c, WRITE_RSP, ok and 1 or 0)
    elseif v == 0 then                  -- client: failed, back off
      local delay = clients[c]:failure(t)
      push(t + hop() + delay, c, READ, 0)
    end
  end
  return writes, now
end

math.randomseed(2015)
local t0 = os.clock()
local rows = {}
for n = 10, MAX_CLIENTS, 10 do
  local row = { n = n }
  for s, st in ipairs(STRATEGIES) do
    local work, time = 0, 0
    for run = 1, RUNS do
      local w, t = simulate(n, st[2], st[3], run)
      work, time = work + w, time + t
    end
    row[s] = { work / RUNS, time / RUNS * 1000 }   -- time in ms
  end
  rows[#rows + 1] = row
end
local elapsed = os.clock() - t0

-- the table
local names = {}
for s, st in ipairs(STRATEGIES) do names[s] = st[1] end
print(("thundering herd: %d runs per point, virtual time, %.1f s CPU")
  :format(RUNS, elapsed))
for _, what in ipairs { { 1, "work (write calls)" }, { 2, "time (ms)" } } do
  print("\n" .. what[2])
  local head = { ("%7s"):format("clients") }
  for s = 1, #STRATEGIES do head[#head + 1] = ("%17s"):format(names[s]) end
  print(table.concat(head))
  for _, row in ipairs(rows) do
    local line = { ("%7d"):format(row.n) }
    for s = 1, #STRATEGIES do
      line[#line + 1] = ("%17.1f"):format(row[s][what[1]])
    end
    print(table.concat(line))
  end
end

-- the CSV: one line per (clients, strategy)
local f = assert(io.open(CSV, "w"))
f:write("clients,strategy,work,time_ms\n")
for _, row in ipairs(rows) do
  for s = 1, #STRATEGIES do
    f:write(("%d,%s,%.2f,%.2f\n"):format(row.n, names[s], row[s][1],
      row[s][2]))
  end
end
f:close()
print("\nwrote " .. CSV)

-- the SVG: work and time against clients, one line per strategy
if SVG then
  local colors = { "#555555", "#d62728", "#1f77b4", "#2ca02c", "#9467bd",
                   "#ff7f0e" }
  local W, H, M = 460, 300, 50
  local out = { ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" '
    .. 'height="%d" font-family="sans-serif" font-size="11">')
    :format(2 * W + 40, H + 90) }
  local function chart(ox, idx, title)
    local top = 0
    for _, row in ipairs(rows) do
      for s = 1, #STRATEGIES do top = math.max(top, row[s][idx]) end
    end
    local function x(n) return ox + M + (n - 10) / (MAX_CLIENTS - 10 + 1e-9)
      * (W - M - 10) end
    local function y(v) return 20 + (H - 40) * (1 - v / top) end
    out[#out + 1] = ('<text x="%d" y="14" font-weight="bold">%s</text>')
      :format(ox + M, title)
    out[#out + 1] = ('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>')
      :format(ox + M, H - 20, ox + W - 10, H - 20)
    out[#out + 1] = ('<line x1="%d" y1="20" x2="%d" y2="%d" stroke="black"/>')
      :format(ox + M, ox + M, H - 20)
    for k = 0, 4 do
      local v = top * k / 4
      out[#out + 1] = ('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>')
        :format(ox + M - 4, y(v) + 4, v)
    end
    for _, row in ipairs(rows) do
      if row.n % 50 == 0 or row.n == 10 then
        out[#out + 1] = ('<text x="%.1f" y="%d" text-anchor="middle">%d'
          .. '</text>'):format(x(row.n), H - 6, row.n)
      end
    end
    for s = 1, #STRATEGIES do
      local pts = {}
      for _, row in ipairs(rows) do
        pts[#pts + 1] = ("%.1f,%.1f"):format(x(row.n), y(row[s][idx]))
      end
      out[#out + 1] = ('<polyline fill="none" stroke="%s" stroke-width="2" '
        .. 'points="%s"/>'):format(colors[s], table.concat(pts, " "))
    end
  end
  chart(0, 1, "work (write calls) vs clients")
  chart(W + 40, 2, "time to last success (ms) vs clients")
  for s = 1, #STRATEGIES do
    local lx = 60 + (s - 1) * 150
    out[#out + 1] = ('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
      .. '<text x="%d" y="%d">%s</text>'):format(lx, H + 40, colors[s],
      lx + 16, H + 50, names[s])
  end
  out[#out + 1] = "</svg>"
  f = assert(io.open(SVG, "w"))
  f:write(table.concat(out, "\n"), "\n")
  f:close()
  print("wrote " .. SVG)
end
