-- make bench-nginx: what backoff.retry costs a real nginx worker on the
-- happy path.  One worker, six handlers doing the same trivial work
-- (bench/nginx_app.lua): /retry through backoff.retry(policy, fn),
-- /budget through backoff.retry(policy, fn, { budget = the recommended
-- budget shared through a lua_shared_dict }), /breaker the same with the
-- recommended breaker too, /upstream through up:call(fn) of a declared
-- backoff.upstream (the recommended budget, breaker and metrics), /fleet
-- with the recommended breaker guarded by backoff.fleet (its timer not
-- started), /pcall through pcall(fn).
-- wrk drives each in turn for DURATION seconds, ROUNDS times, in a
-- rotating order; the worker's CPU time (utime + stime from
-- /proc/<pid>/stat) over each run is divided by the requests wrk counted.
-- nginx listens on 127.0.0.1 only, runs under `timeout` and is stopped
-- by its pid at the end, also after an error.
--   lua5.4 bench/nginx.lua ROOT [DURATION [ROUNDS]]
local ROOT = assert(arg[1], "usage: nginx.lua ROOT [DURATION [ROUNDS]]")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local DURATION = tonumber(arg[2]) or 5
local ROUNDS = tonumber(arg[3]) or 3
local PREFIX = ROOT .. "/build/bench-nginx"
local WRK = os.getenv("WRK") or "wrk"
local CONNECTIONS = 16
local K = 50            -- calls a request in the amplified measure
local read_file = H.read_file

local function capture(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read("*a")
  p:close()
  return s
end

-- returns the port and the pid of the only worker (it answers /pid)
local function start_nginx()
  local port = H.free_port()
  -- six handlers a round, each warmed up first, then each amplified:
  -- the runs, with room
  local limit = math.ceil((2 * DURATION * ROUNDS + 1) * 6 * 1.5 + 60)
  local pid, err = H.start_nginx(PREFIX, ROOT .. "/bench/nginx.conf.in",
    { ROOT = ROOT, PORT = port }, limit, function()
      local body = H.get(port, "/pid", 5)
      return body and assert(tonumber(body:match("%d+")))
    end)
  if not pid then error("nginx did not start:\n" .. err) end
  return port, pid
end

local TICK = tonumber(capture("getconf CLK_TCK")) or 100

-- utime + stime of a process, in seconds
local function cpu_time(pid)
  local stat = read_file("/proc/" .. pid .. "/stat")
  -- fields after the command name (which may hold spaces): state is 3
  local rest = assert(stat:match("%) (.*)$"), "no /proc/" .. pid .. "/stat")
  local f = {}
  for x in rest:gmatch("%S+") do f[#f + 1] = x end
  return (tonumber(f[12]) + tonumber(f[13])) / TICK  -- fields 14 and 15
end

-- one wrk run; returns requests served, requests/s, worker CPU seconds
local function run(port, worker, path, seconds)
  local before = cpu_time(worker)
  local out = capture(("%s -t1 -c%d -d%ds http://127.0.0.1:%d%s 2>&1")
    :format(WRK, CONNECTIONS, seconds, port, path))
  local after = cpu_time(worker)
  local requests = tonumber(out:match("(%d+) requests in"))
  local rps = tonumber(out:match("Requests/sec:%s*([%d.]+)"))
  if not requests or not rps or out:match("Non%-2xx")
     or out:match("Socket errors") then
    error("wrk on " .. path .. " failed:\n" .. out)
  end
  return requests, rps, after - before
end

local function median(list)
  local t = {}
  for i, x in ipairs(list) do t[i] = x end
  table.sort(t)
  local m = (#t + 1) / 2
  return (t[math.floor(m)] + t[math.ceil(m)]) / 2
end

local HANDLERS = { "/retry", "/budget", "/breaker", "/upstream", "/fleet",
                   "/pcall" }
local TARGETS = { ["/retry"] = 1.05, ["/budget"] = 1.03,
                  ["/breaker"] = 1.06, ["/upstream"] = 1.06,
                  ["/fleet"] = 1.08 }

local function list(t)
  local out = {}
  for i, x in ipairs(t) do out[i] = ("%.3f"):format(x) end
  return table.concat(out, " ")
end

local function bench(port, worker)
  print(("nginx 1 worker (pid %d), wrk -t1 -c%d, %d s per run, %d "
    .. "rounds, CPU from /proc (%d ticks/s)"):format(worker, CONNECTIONS,
    DURATION, ROUNDS, TICK))
  print("load average before: " .. read_file("/proc/loadavg"):gsub("\n", ""))
  -- warm up (JIT traces, connection pools) before measuring
  for _, path in ipairs(HANDLERS) do run(port, worker, path, 1) end
  local cpu_ratios, rps_ratios, pooled = {}, {}, {}
  for _, path in ipairs(HANDLERS) do
    cpu_ratios[path], rps_ratios[path] = {}, {}
    pooled[path] = { n = 0, cpu = 0 }
  end
  print(("%-6s %-8s %10s %10s %12s"):format("round", "handler",
    "requests", "req/s", "CPU us/req"))
  for round = 1, ROUNDS do
    -- rotate which handler goes first
    local this = {}
    for i = 1, #HANDLERS do
      local path = HANDLERS[(round + i - 2) % #HANDLERS + 1]
      local n, rps, cpu = run(port, worker, path, DURATION)
      this[path] = { cpu = cpu / n, rps = rps }
      pooled[path].n = pooled[path].n + n
      pooled[path].cpu = pooled[path].cpu + cpu
      print(("%-6d %-8s %10d %10.0f %12.2f"):format(round, path, n, rps,
        cpu / n * 1e6))
    end
    for path in pairs(TARGETS) do
      local c, r = cpu_ratios[path], rps_ratios[path]
      c[#c + 1] = this[path].cpu / this["/pcall"].cpu
      r[#r + 1] = this[path].rps / this["/pcall"].rps
    end
  end
  -- the amplified measure: each handler's call made K times a request,
  -- so that the library's own cost per call stands out of the request
  -- around it (whose CPU moves by several percent from run to run);
  -- the ratio a request would see is then 1 + (call - pcall's call) /
  -- pcall's whole request, all measured in this worker
  local per_call = {}
  for round = 1, ROUNDS do
    for i = 1, #HANDLERS do
      local path = HANDLERS[(round + i - 2) % #HANDLERS + 1]
      local n, _, cpu = run(port, worker, path .. "?k=" .. K, DURATION)
      local t = per_call[path] or {}
      per_call[path] = t
      t[#t + 1] = cpu / n
    end
  end
  local p = pooled["/pcall"].cpu / pooled["/pcall"].n
  local base = median(per_call["/pcall"])
  print(("amplified: each call %d times a request, %d rounds; /pcall's "
    .. "request %.2f us, its %d calls %.2f us"):format(K, ROUNDS, p * 1e6,
    K, base * 1e6))
  for _, path in ipairs(HANDLERS) do
    if TARGETS[path] then
      local extra = (median(per_call[path]) - base) / K
      print(("amplified, %s / pcall: %.3f (the call costs %+.3f us more "
        .. "than pcall's; target <= %.2f)"):format(path:sub(2),
        1 + extra / p, extra * 1e6, TARGETS[path]))
    end
  end
  for _, path in ipairs(HANDLERS) do
    if TARGETS[path] then
      local r = pooled[path].cpu / pooled[path].n
      print(("worker CPU per request: %s %.2f us, /pcall %.2f us "
        .. "(all rounds), %+.2f us per request"):format(path, r * 1e6,
        p * 1e6, (r - p) * 1e6))
      print(("worker CPU per request, %s / pcall: %.3f (median of the "
        .. "rounds: %s; target <= %.2f)"):format(path:sub(2),
        median(cpu_ratios[path]), list(cpu_ratios[path]), TARGETS[path]))
      print(("requests/s, %s / pcall: %.3f (median of the rounds: %s)")
        :format(path:sub(2), median(rps_ratios[path]),
        list(rps_ratios[path])))
    end
  end
end

local ok, err = pcall(function()
  local port, worker = start_nginx()
  bench(port, worker)
end)
H.stop_nginx(PREFIX)
local bad = H.errors_logged(PREFIX)
if not ok then
  io.stderr:write("bench-nginx: ", tostring(err), "\n")
  os.exit(1)
end
if #bad > 0 then
  io.stderr:write("bench-nginx: nginx logged errors:\n",
    table.concat(bad, "\n"), "\n")
  os.exit(1)
end
