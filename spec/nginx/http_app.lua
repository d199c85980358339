-- The OpenResty side of spec/nginx/http.lua: an upstream that fails as
-- told, and backoff.http.request driving it through ngx.location.capture
-- + proxy_pass and through raw cosockets.  /run?case=NAME runs one case
-- and answers key=value lines.
local backoff = require "backoff"
local http = require "backoff.http"
local metrics = require "backoff.metrics"

local app = {}
local UP, DEAD              -- the upstream's port, a port nobody serves

function app.init(up, dead)
  UP, DEAD = up, dead
end

------------------------------------------------------------------------
-- the upstream

local function hit(key)
  local calls = ngx.shared.calls
  calls:set("method:" .. key, ngx.req.get_method())
  return calls:incr("hits:" .. key, 1, 0)
end

-- /flaky?key=K&fails=N&status=S&ra=seconds|date&xr=epoch|delta&s=SECS:
-- the first N hits of key K answer S with the hint asked for, then 200
function app.flaky()
  local a = ngx.req.get_uri_args()
  local n = hit(a.key)
  if n > (tonumber(a.fails) or 0) then
    ngx.say("ok ", n)
    return
  end
  ngx.status = tonumber(a.status) or 503
  local s = tonumber(a.s) or 1
  if a.ra == "seconds" then
    ngx.header["Retry-After"] = tostring(s)
  elseif a.ra == "date" then
    ngx.header["Retry-After"] = ngx.http_time(ngx.time() + s)
  end
  if a.xr == "epoch" then
    ngx.header["X-RateLimit-Reset"] = tostring(ngx.time() + s)
    ngx.header["X-RateLimit-Remaining"] = "0"
  elseif a.xr == "delta" then
    ngx.header["RateLimit-Reset"] = tostring(s)
  end
  ngx.say("busy ", n)
end

-- /slow?key=K&s=SECS: counts, then answers after SECS
function app.slow()
  local a = ngx.req.get_uri_args()
  hit(a.key)
  ngx.sleep(tonumber(a.s) or 1)
  ngx.say("slow")
end

function app.hang()
  ngx.sleep(10)
  ngx.say("late")
end

------------------------------------------------------------------------
-- clients

-- an HTTP/1.0 request over a cosocket; the stage of a failure is
-- returned third, so that backoff.http knows a refused connection
local function cosocket(port, method, path, headers, t)
  local sock = ngx.socket.tcp()
  if t then sock:settimeouts(t.connect, t.send, t.read) end
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return nil, err, "connect" end
  local req = { method, " ", path, " HTTP/1.0\r\nHost: localhost\r\n" }
  for k, v in pairs(headers or {}) do
    req[#req + 1] = k .. ": " .. v .. "\r\n"
  end
  req[#req + 1] = "Content-Length: 2\r\n\r\n{}"
  ok, err = sock:send(table.concat(req))
  if not ok then sock:close() return nil, err, "send" end
  local line
  line, err = sock:receive("*l")
  if not line then sock:close() return nil, err, "read" end
  local res = { status = tonumber(line:match("^HTTP/%d%.%d (%d+)")),
                headers = {} }
  while true do
    line, err = sock:receive("*l")
    if not line then sock:close() return nil, err, "read" end
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then res.headers[k] = v end
  end
  res.body = sock:receive("*a")
  sock:close()
  return res
end

-- ngx.location.capture of the upstream (or of the dead port)
local function capture(prefix, path, method)
  return function()
    return ngx.location.capture(prefix .. path,
      { method = method or ngx.HTTP_GET, body = "{}" })
  end
end

------------------------------------------------------------------------
-- the cases: each returns the request's options and do_request; the
-- policy is `fast` unless the case names another

local policies = {
  -- short delays of its own, so that the hints show; 5 s in all
  fast = { strategy = "exponential", initial_delay = 0.01,
           max_delay = 0.05, max_attempts = 3, max_actual_duration = 5 },
  -- per-try timeouts: 0.3 s first
  post = { strategy = "exponential", initial_delay = 0.01,
           max_attempts = 3, max_actual_duration = 2,
           adjust_timeout_factor = 0.15, min_adjust_timeout = 0.05 },
  -- per-try timeouts shrinking towards a 1.2 s deadline
  shrink = { strategy = "exponential", initial_delay = 0.02,
             max_actual_duration = 1.2, adjust_timeout_factor = 0.5,
             min_adjust_timeout = 0.1, max_attempts = 8 },
}

local cases = {}

local function flaky(key, q) return "/flaky?key=" .. key .. "&" .. q end

cases.get_retry_after_seconds = function(key)
  return {}, capture("/proxy", flaky(key, "fails=1&ra=seconds&s=1"))
end
cases.get_retry_after_date = function(key)
  return {}, capture("/proxy", flaky(key, "fails=1&ra=date&s=2"))
end
cases.get_429_x_ratelimit_reset = function(key)
  return {}, capture("/proxy",
    flaky(key, "fails=1&status=429&xr=epoch&s=2"))
end
cases.get_429_ratelimit_reset = function(key)
  return {}, capture("/proxy",
    flaky(key, "fails=1&status=429&xr=delta&s=1"))
end
cases.get_refused = function()
  return {}, capture("/dead", "/x")
end
cases.max_hint = function(key)
  return { max_hint = 5 }, capture("/proxy",
    flaky(key, "fails=1&status=429&ra=seconds&s=120"))
end
cases.post_read_timeout = function(key)
  return { method = "POST", policy = "post" }, function(_, t)
    return cosocket(UP, "POST", "/slow?s=1&key=" .. key, nil, t)
  end
end
cases.post_refused = function(key)
  return { method = "POST" }, function(attempt, t)
    local port = attempt == 1 and DEAD or UP
    return cosocket(port, "POST", flaky(key, "fails=0"), nil, t)
  end
end
cases.post_idempotency_key = function(key)
  local h = { ["Idempotency-Key"] = "k-" .. key }
  return { method = "POST", headers = h }, function(_, t)
    return cosocket(UP, "POST", flaky(key, "fails=2"), h, t)
  end
end
cases.post_capture_503 = function(key)
  return { method = ngx.HTTP_POST }, capture("/proxy",
    flaky(key, "fails=1"), ngx.HTTP_POST)
end
cases.shrinking_timeouts = function(key)
  return { policy = "shrink" }, function(_, t)
    return cosocket(UP, "GET", "/hang?key=" .. key, nil, t)
  end
end
cases.odd_name = function(key)
  return { name = 'we"ird \\ name ☕' }, capture("/proxy",
    flaky(key, "fails=0"))
end

-- /run?case=NAME&key=K: one request through backoff.http.request
function app.run()
  local a = ngx.req.get_uri_args()
  local o, do_request = cases[a.case](a.key)
  local reads, delays, starts = {}, {}, {}
  ngx.update_time()
  local t0 = ngx.now()
  local opts = {
    -- request never guesses the method: the GET cases say it
    method = o.method or "GET", headers = o.headers, max_hint = o.max_hint,
    metrics = metrics.new(o.name or a.case, { shared = ngx.shared.metrics }),
    on_retry = function(_, d) delays[#delays + 1] = d end,
  }
  local res, err, reason = http.request(policies[o.policy or "fast"],
    function(attempt, t)
      ngx.update_time()
      starts[#starts + 1] = ngx.now() - t0
      reads[#reads + 1] = t and t.read or -1
      return do_request(attempt, t)
    end, opts)
  ngx.update_time()
  local calls = ngx.shared.calls
  ngx.say("status=", res and res.status or "nil")
  ngx.say("err=", tostring(err))
  ngx.say("reason=", tostring(reason))
  ngx.say("attempts=", #starts)
  ngx.say("delays=", table.concat(delays, ","))
  ngx.say("reads=", table.concat(reads, ","))
  ngx.say("starts=", table.concat(starts, ","))
  ngx.say("elapsed=", ngx.now() - t0)
  ngx.say("hits=", calls:get("hits:" .. a.key) or 0)
  ngx.say("method=", calls:get("method:" .. a.key) or "")
end

------------------------------------------------------------------------
-- a full lua_shared_dict: incr evicts other keys to make room

-- /evict: three rounds of the key "probe" (new each time: the fillers
-- after it evict it, the least recently used) and 300 metric keys; the
-- probe is added by store.incr itself, the fillers by backoff.metrics
function app.evict()
  local store = require "backoff.store"
  local d = ngx.shared.tiny
  d:flush_all()
  local forced, lost = 0, 0
  for round = 1, 3 do
    local v, _, forcible = store.incr(d, "probe", 1, 0)
    if forcible then forced = forced + 1 end
    if v ~= 1 then lost = lost + 1 end      -- it was there still
    for i = 1, 300 do
      metrics.new(("r%dn%d"):format(round, i), { shared = d })
        :add("attempts", 1)
    end
  end
  ngx.say("forced=", forced)
  ngx.say("stale=", lost)
  ngx.say("keys=", #d:get_keys(0))
end

-- /plant: what another writer may leave under the metrics prefix: a
-- key that is not UTF-8, a reason that is not one, and a string where
-- a count of "foreign" lives (then that recorder runs once)
function app.plant()
  local d = ngx.shared.metrics
  d:set("backoff\tattempts\t\255\254", 1)
  d:set("backoff\tgiveups\tget_refused\t\255", 1)
  d:set("backoff\tretries\tforeign", "not a count")
  metrics.new("foreign", { shared = d }):run(true, 2)
  ngx.say("ok")
end

------------------------------------------------------------------------
-- retries asked for in header_filter and log, where nginx cannot wait

function app.late(phase)
  ngx.update_time()
  local t0 = ngx.now()
  local ok, err = pcall(backoff.retry, backoff.constant { delay = 2,
    max_attempts = 3 }, function() return nil, "down" end)
  ngx.update_time()
  local calls = ngx.shared.calls
  calls:set(phase .. ":ok", tostring(ok))
  calls:set(phase .. ":err", tostring(err))
  calls:set(phase .. ":took", ngx.now() - t0)
  local sok, serr = pcall(backoff.sleep, 1)
  calls:set(phase .. ":sleep", tostring(sok) .. " " .. tostring(serr))
end

function app.late_result()
  local calls = ngx.shared.calls
  for _, phase in ipairs { "filter", "log" } do
    for _, k in ipairs { "ok", "err", "took", "sleep" } do
      ngx.say(phase, k, "=", tostring(calls:get(phase .. ":" .. k)))
    end
  end
end

return app
