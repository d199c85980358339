-- Integration test against a real nginx with the Lua module (Debian's
-- nginx + libnginx-mod-http-lua, LuaJIT 2.1 from luajit2).  Starts nginx
-- on 127.0.0.1 under `timeout` (it stops by itself even if this script
-- dies), runs the checks, stops it.  Prints TAP.
--   lua5.4 spec/nginx/run.lua ROOT
local socket = require "socket"

local ROOT = assert(arg[1], "usage: run.lua ROOT")
local PREFIX = ROOT .. "/build/nginx"
local NGINX = os.getenv("NGINX") or "/usr/sbin/nginx"

local n = 0
local function check(ok, what, detail)
  n = n + 1
  print((ok and "ok " or "not ok ") .. n .. " - " .. what)
  if not ok and detail then
    for line in tostring(detail):gmatch("[^\n]+") do print("# " .. line) end
  end
  return ok
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function free_port()
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return port
end

local function read_file(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- one GET on a new connection; returns the body (nil, err on failure)
local function get(port, path)
  local c = socket.tcp()
  c:settimeout(10)
  local ok, err = c:connect("127.0.0.1", port)
  if not ok then return nil, err end
  c:send("GET " .. path .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
  local all = c:receive("*a")
  c:close()
  if not all then return nil, "no response" end
  local status = all:match("^HTTP/%d%.%d (%d+)")
  return all:match("\r\n\r\n(.*)$"), status
end

-- send a request now, read its answer later
local function start_get(port, path)
  local c = socket.tcp()
  c:settimeout(10)
  assert(c:connect("127.0.0.1", port))
  c:send("GET " .. path .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
  return function()
    local all = c:receive("*a")
    c:close()
    return all and all:match("\r\n\r\n(.*)$")
  end
end

local function fields(body)
  local t = {}
  for k, v in (body or ""):gmatch("(%w+)=([^\n]*)") do t[k] = v end
  return t
end

local function numbers(list)
  local t = {}
  for x in (list or ""):gmatch("[^,]+") do t[#t + 1] = tonumber(x) or x end
  return t
end

local function start_nginx(workers)
  local port = free_port()
  sh("rm -rf '" .. PREFIX .. "' && mkdir -p '" .. PREFIX .. "/conf' '"
     .. PREFIX .. "/logs'")
  local conf = read_file(ROOT .. "/spec/nginx/nginx.conf.in")
    :gsub("@ROOT@", ROOT):gsub("@PORT@", tostring(port))
    :gsub("@WORKERS@", tostring(workers))
  local f = assert(io.open(PREFIX .. "/conf/nginx.conf", "w"))
  f:write(conf)
  f:close()
  sh(("timeout 120 %s -p '%s/' -c conf/nginx.conf -g 'daemon off;' "
      .. ">'%s/logs/stdout' 2>&1 &"):format(NGINX, PREFIX, PREFIX))
  for _ = 1, 100 do
    if get(port, "/ping") then return port end
    socket.sleep(0.05)
  end
  return nil, read_file(PREFIX .. "/logs/stdout")
    .. read_file(PREFIX .. "/logs/error.log")
end

local function stop_nginx()
  local pid = read_file(PREFIX .. "/logs/nginx.pid"):match("%d+")
  if not pid then return end
  sh("kill -QUIT " .. pid .. " 2>/dev/null")
  for _ = 1, 100 do
    if not sh("kill -0 " .. pid .. " 2>/dev/null") then return end
    socket.sleep(0.05)
  end
  sh("kill -KILL " .. pid .. " 2>/dev/null")
end

local function errors_logged()
  local log = read_file(PREFIX .. "/logs/error.log")
  local bad = {}
  for line in log:gmatch("[^\n]+") do
    if line:match("%[error%]") or line:match("%[alert%]")
       or line:match("%[crit%]") or line:match("%[emerg%]") then
      bad[#bad + 1] = line
    end
  end
  return bad
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
  local finish = start_get(port, "/retry?key=d&fails=3&p=constant")
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

local function with_nginx(workers, fn)
  local port, err = start_nginx(workers)
  if not check(port ~= nil, ("nginx with %d worker(s) and the Lua module "
      .. "starts on 127.0.0.1"):format(workers), err) then
    return
  end
  local ok, e = pcall(fn, port)
  check(ok, "checks ran without a Lua error", e)
  stop_nginx()
  local bad = errors_logged()
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

with_nginx(1, one_worker_checks)
with_nginx(2, two_worker_checks)
print("1.." .. n)
