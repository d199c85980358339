-- Integration test against a real nginx with the Lua module (Debian's
-- nginx + libnginx-mod-http-lua, LuaJIT 2.1 from luajit2).  Starts nginx
-- on 127.0.0.1 under `timeout` (it stops by itself even if this script
-- dies), runs the checks, stops it.  Prints TAP.
--   lua5.4 spec/nginx/run.lua ROOT
local socket = require "socket"

local ROOT = assert(arg[1], "usage: run.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local PREFIX = ROOT .. "/build/nginx"

local tap = H.tap()
local check = tap.check

-- one GET on a new connection, 10 s timeouts: body (nil, err on failure)
local get = H.get

-- key=value lines (a value may hold spaces)
local function fields(body)
  return H.fields(body, "\n")
end

local function numbers(list)
  local t = {}
  for x in (list or ""):gmatch("[^,]+") do t[#t + 1] = tonumber(x) or x end
  return t
end

local function start_nginx(workers)
  local port = H.free_port()
  return H.start_nginx(PREFIX, ROOT .. "/spec/nginx/nginx.conf.in",
    { ROOT = ROOT, PORT = port, WORKERS = workers }, 120,
    function() return get(port, "/ping") and port end)
end

local function sum(t)
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return s
end

------------------------------------------------------------------------
-- one worker: retries, give-up, timeouts, a worker that keeps serving

local function one_worker_checks(port)
  local r = fields(get(port, "/retry?key=a&fails=3"))
  local delays = numbers(r.delays)
  check(r.result == "ok after 4" and r.attempts == "4",
    "retry: 3 failures then success takes 4 attempts", r.result)
  local in_range = #delays == 3
  for i, d in ipairs(delays) do
    local cap = math.min(0.05 * 2 ^ (i - 1), 0.4)
    in_range = in_range and d >= 0 and d <= cap
  end
  check(in_range, "retry: 3 delays, each within the policy's full-jitter "
    .. "range", r.delays)
  check(tonumber(r.elapsed) >= sum(delays) - 0.003 * #delays,
    "retry: the handler really slept its delays (ngx.sleep)",
    r.elapsed .. " < " .. sum(delays))
  check(r.errs == "HTTP 503 (call 1),HTTP 503 (call 2),HTTP 503 (call 3)",
    "retry: each failure's error reached on_retry", r.errs)

  r = fields(get(port, "/retry?key=b&fails=100"))
  check(r.result == "nil" and r.err == "HTTP 503 (call 6)"
    and r.reason == "max_attempts" and r.attempts == "6",
    "give up: nil, the last error, max_attempts after 6 attempts",
    ("%s %s %s %s"):format(r.result, r.err, r.reason, r.attempts))

  r = fields(get(port, "/retry?key=c&fails=0&slow=1&p=timeouts"))
  local timeouts = numbers(r.timeouts)
  check(r.result == "ok after 2" and r.errs == "timeout",
    "timeouts: attempt 1 runs into its cosocket timeout, attempt 2 works",
    r.result .. " / " .. r.errs)
  check(timeouts[1] == 0.5 and type(timeouts[2]) == "number"
    and timeouts[2] < 0.5 and timeouts[2] >= 0.1,
    "timeouts: fn got the policy's per-attempt timeouts", r.timeouts)

  -- while a handler sleeps 3 x 0.3 s, the only worker serves pings
  local finish, err = H.start_get(port, "/retry?key=d&fails=3&p=constant")
  assert(err == nil, err)
  socket.sleep(0.05)
  local served = 0
  for _ = 1, 10 do
    if get(port, "/ping") then served = served + 1 end
  end
  r = fields(finish())
  check(served == 10 and r.pings == "10" and r.result == "ok after 4",
    "one worker served 10 other requests while the retry slept",
    ("served %d, during the retry %s, result %s"):format(served,
      tostring(r.pings), tostring(r.result)))
end

-- two workers: jitter streams differ even for a template made in
-- init_by_lua before the fork
local function two_worker_checks(port)
  local lines = {}
  for _ = 1, 40 do
    lines = {}
    for pid, own, cloned, path in (get(port, "/draws") or "")
        :gmatch("(%d+) (%S+) (%S+) (%S+)") do
      lines[#lines + 1] = { pid = pid, own = own, cloned = cloned,
                            path = path }
    end
    if #lines >= 2 then break end
    socket.sleep(0.05)
  end
  check(#lines == 2 and lines[1].pid ~= lines[2].pid,
    "two workers reported their draws", #lines)
  if #lines == 2 then
    check(lines[1].own ~= lines[2].own,
      "workers draw different jitter from the pre-fork template",
      lines[1].own .. "\n" .. lines[2].own)
    check(lines[1].cloned ~= lines[2].cloned,
      "workers draw different jitter from clones of it",
      lines[1].cloned .. "\n" .. lines[2].cloned)
    check(lines[1].path == "Lua" and lines[2].path == "Lua",
      "workers run failure() through the LuaJIT FFI fast path",
      lines[1].path .. " " .. lines[2].path)
  end
end

------------------------------------------------------------------------
-- issue 11: the deadline under load.  2 workers; `concurrency` requests
-- to /deadline?up=KIND in flight at once until `total` have answered,
-- while /ping is asked every 20 ms (one at a time).  Bounded: every
-- socket times out after 10 s, the whole load after `limit` seconds.

local MAX_DURATION = 1          -- the policy's max_actual_duration

-- returns the bodies of the answers, the ping latencies (s), and an
-- error message when the load did not complete
local function load(port, path, total, concurrency, limit)
  local now = socket.gettime
  local t_end = now() + limit
  local active, n_active = {}, 0   -- socket -> { parts, sent at }
  local started, bodies, pings = 0, {}, {}
  local ping, next_ping = nil, now()
  local function open(what)
    local c = socket.tcp()
    c:settimeout(2)
    local ok, err = c:connect("127.0.0.1", port)
    if ok then ok, err = c:send("GET " .. what
      .. " HTTP/1.0\r\nHost: localhost\r\n\r\n") end
    if not ok then c:close() return nil, err end
    c:settimeout(0)
    return c
  end
  -- reads what is there; returns the whole answer once the peer closed
  local function pump(c, st)
    local data, err, partial = c:receive(65536)
    st.parts[#st.parts + 1] = data or partial
    if err == "closed" then
      c:close()
      return table.concat(st.parts)
    elseif err and err ~= "timeout" then
      c:close()
      return false
    end
  end
  local function finish(err)
    for c in pairs(active) do c:close() end
    return bodies, pings, err
  end
  while #bodies < total do
    local t = now()
    if t > t_end then
      return finish(("load not done after %d s: %d of %d answered")
        :format(limit, #bodies, total))
    end
    while started < total and n_active < concurrency do
      local c, err = open(path)
      if not c then return finish("connect: " .. tostring(err)) end
      active[c] = { parts = {}, at = now() }
      n_active, started = n_active + 1, started + 1
    end
    if not ping and t >= next_ping then
      local at = now()
      ping = open("/ping")
      if ping then
        active[ping] = { parts = {}, at = at, ping = true }
      else
        pings[#pings + 1] = math.huge   -- could not even connect
      end
      next_ping = t + 0.02
    end
    local set = {}
    for c in pairs(active) do set[#set + 1] = c end
    local readable = socket.select(set, nil, 0.005)
    for _, c in ipairs(readable) do
      local st = active[c]
      local all = pump(c, st)
      if all ~= nil then
        active[c] = nil
        if st.ping then
          ping = nil
          pings[#pings + 1] = all and now() - st.at or math.huge
        else
          n_active = n_active - 1
          bodies[#bodies + 1] = all and all:match("\r\n\r\n(.*)$")
            or "no answer"
        end
      end
    end
    for _, st in pairs(active) do
      if now() - st.at > 10 then
        return finish("no answer after 10 s")
      end
    end
  end
  return finish(nil)
end

local function quantile(sorted, q)
  if #sorted == 0 then return 0 / 0 end
  return sorted[math.max(1, math.ceil(q * #sorted))]
end

local function deadline_figures(bodies)
  local f = { n = #bodies, reasons = {}, over = {}, attempts = 0,
    min_attempts = math.huge, max_attempts = 0, late = 0, past = 0,
    timeout_past = -math.huge, bad = {} }
  for _, body in ipairs(bodies) do
    local r = fields(body)
    local total = tonumber(r.total)
    local starts, timeouts = numbers(r.starts), numbers(r.timeouts)
    if not total or #starts == 0 or #starts ~= #timeouts then
      f.bad[#f.bad + 1] = body
    else
      f.reasons[r.reason] = (f.reasons[r.reason] or 0) + 1
      f.over[#f.over + 1] = total - MAX_DURATION
      if total > MAX_DURATION then f.past = f.past + 1 end
      f.attempts = f.attempts + #starts
      f.max_attempts = math.max(f.max_attempts, #starts)
      f.min_attempts = math.min(f.min_attempts, #starts)
      for i, s in ipairs(starts) do
        if s >= 0.9 * MAX_DURATION then f.late = f.late + 1 end
        f.timeout_past = math.max(f.timeout_past,
          s + timeouts[i] - MAX_DURATION)
      end
    end
  end
  table.sort(f.over)
  return f
end

local function deadline_checks(port)
  local runs = {
    { kind = "hang", total = 1000 },
    { kind = "503", total = 300 },
    { kind = "close", total = 300 },
  }
  local concurrency = 120
  local all_pings = {}
  for _, run in ipairs(runs) do
    local kind = run.kind
    local bodies, pings, err = load(port, "/deadline?up=" .. kind,
      run.total, concurrency, 40)
    for _, p in ipairs(pings) do all_pings[#all_pings + 1] = p end
    if not check(err == nil and #bodies == run.total,
        ("%s: %d requests, %d at a time, all answered"):format(kind,
          run.total, concurrency), err) then
      return
    end
    local f = deadline_figures(bodies)
    local nreq = f.n - #f.bad
    local reasons = {}
    for k, v in pairs(f.reasons) do reasons[#reasons + 1] = k .. " " .. v end
    check(#f.bad == 0 and f.reasons.max_actual_duration == nreq,
      kind .. ": every request gave up, reason max_actual_duration",
      table.concat(reasons, ", ") .. "\n" .. table.concat(f.bad, "\n"))
    local p100 = f.over[#f.over]
    local figures = ("%d requests; past the deadline: %d; by p50 %.1f ms, "
      .. "p99 %.1f ms, p100 %.1f ms; attempts/request %.2f (max %d); in "
      .. "the last 10%% of the budget %.2f/request; a timeout reaching "
      .. "past the deadline by up to %.1f ms"):format(nreq, f.past,
      quantile(f.over, 0.5) * 1e3, quantile(f.over, 0.99) * 1e3,
      p100 * 1e3, f.attempts / nreq, f.max_attempts, f.late / nreq,
      f.timeout_past * 1e3)
    print("# " .. kind .. ": " .. figures)
    check(f.min_attempts >= 2, kind .. ": every request retried (at "
      .. "least 2 attempts)", "fewest attempts: " .. f.min_attempts)
    -- past the deadline by what the library planned (the timeouts,
    -- checked below) plus what the machine added: a worker that a busy
    -- machine schedules late answers its /ping late by as much, so the
    -- slowest ping of the same run is allowed on top of the 10 ms
    table.sort(pings)
    local lag = pings[#pings] or 0
    check(p100 <= 0.010 + lag, kind .. ": no retry ran more than 10 ms "
      .. "past its 1 s deadline (p100), beyond the worker's own lag",
      ("%s; the slowest /ping of the run %.1f ms"):format(figures,
        lag * 1e3))
    check(f.timeout_past <= 0.001, kind .. ": no attempt's timeout reached "
      .. "past the deadline", figures)
    check(f.late / nreq <= 2, kind .. ": at most 2 attempts per request in "
      .. "the last 10% of the budget, on average", figures)
  end
  table.sort(all_pings)
  local pmax = all_pings[#all_pings] or math.huge
  check(#all_pings >= 100 and pmax < 0.050,
    "/ping answered in under 50 ms during the load", ("%d pings, p50 "
    .. "%.1f ms, p99 %.1f ms, max %.1f ms"):format(#all_pings,
    quantile(all_pings, 0.5) * 1e3, quantile(all_pings, 0.99) * 1e3,
    pmax * 1e3))
  print(("# /ping under load: %d pings, p50 %.1f ms, p99 %.1f ms, max "
    .. "%.1f ms"):format(#all_pings, quantile(all_pings, 0.5) * 1e3,
    quantile(all_pings, 0.99) * 1e3, pmax * 1e3))
end

-- warnings about ngx.sleep (a zero or sub-millisecond sleep)
local function sleep_warnings()
  local log = H.read_file(PREFIX .. "/logs/error.log")
  local count, first = 0, nil
  for line in log:gmatch("[^\n]+") do
    if line:match("%[warn%]") and line:match("sleep") then
      count = count + 1
      first = first or line
    end
  end
  return count, first
end

local function with_nginx(workers, fn)
  local port, err = start_nginx(workers)
  if not check(port ~= nil, ("nginx with %d worker(s) and the Lua module "
      .. "starts on 127.0.0.1"):format(workers), err) then
    return
  end
  local ok, e = pcall(fn, port)
  check(ok, "checks ran without a Lua error", e)
  H.stop_nginx(PREFIX)
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
  local warned, first = sleep_warnings()
  check(warned == 0, "nginx logged no warning about ngx.sleep",
    warned .. " warnings, the first:\n" .. tostring(first))
end

with_nginx(1, one_worker_checks)
with_nginx(2, two_worker_checks)
with_nginx(2, deadline_checks)
tap.plan()
