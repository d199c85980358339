-- The OpenResty side of the integration test (spec/nginx/run.lua).
local backoff = require "backoff"

local app = {}
local policies = {}

-- init_by_lua: the templates are built in the master, before the fork
function app.init()
  policies.default = backoff.exponential { initial_delay = 0.05,
    max_delay = 0.4, jitter = "full", max_attempts = 6 }
  policies.constant = backoff.constant { delay = 0.3, max_attempts = 6 }
  policies.timeouts = backoff.exponential { initial_delay = 0.05,
    adjust_timeout_factor = 0.5, max_actual_duration = 1,
    min_adjust_timeout = 0.1, max_attempts = 4 }
  -- issue 11: a one-second deadline, half the time left per attempt
  policies.deadline = backoff.exponential { initial_delay = 0.05,
    max_delay = 1, jitter = "full", max_actual_duration = 1,
    adjust_timeout_factor = 0.5, min_adjust_timeout = 0.05 }
end

-- init_worker_by_lua: each worker draws from the unseeded template
-- itself and from a clone, and records what it drew
function app.init_worker()
  local p = policies.default
  local c = p:clone()
  local own, cloned = {}, {}
  for i = 1, 5 do
    own[i] = ("%.17g"):format(p:failure(0))
    cloned[i] = ("%.17g"):format(c:failure(0))
  end
  p:reset()
  -- "Lua": failure() is the LuaJIT FFI fast path's wrapper, as it
  -- should be under OpenResty's LuaJIT
  local path = debug.getinfo(getmetatable(p).__index.failure, "S").what
  ngx.shared.draws:set(tostring(ngx.worker.pid()),
    table.concat(own, ",") .. " " .. table.concat(cloned, ",") .. " "
    .. path)
end

function app.draws()
  for _, pid in ipairs(ngx.shared.draws:get_keys()) do
    ngx.say(pid, " ", ngx.shared.draws:get(pid))
  end
end

-- an upstream that fails `fails` times per key, the first `slow` calls
-- taking a second
function app.flaky()
  local args = ngx.req.get_uri_args()
  local n = ngx.shared.calls:incr("flaky:" .. args.key, 1, 0)
  if n <= (tonumber(args.slow) or 0) then ngx.sleep(1) end
  if n <= (tonumber(args.fails) or 0) then
    ngx.status = 503
    ngx.say("HTTP 503 (call ", n, ")")
    return
  end
  ngx.say("ok after ", n)
end

function app.ping()
  ngx.shared.calls:incr("ping:" .. ngx.worker.pid(), 1, 0)
  ngx.say(ngx.worker.pid())
end

-- one HTTP/1.0 GET over a cosocket, with the attempt's timeout
local function fetch(path, timeout)
  local sock = ngx.socket.tcp()
  sock:settimeout(timeout and timeout * 1000 or 5000)
  local ok, err = sock:connect("127.0.0.1", tonumber(ngx.var.server_port))
  if not ok then return nil, err end
  sock:send("GET " .. path .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
  local status
  status, err = sock:receive("*l")
  if not status then sock:close() return nil, err end
  local rest = sock:receive("*a") or ""
  sock:close()
  local body = (rest:match("\r\n\r\n(.*)$") or ""):gsub("%s+$", "")
  if status:match("^HTTP/%d%.%d 200") then return body end
  return nil, body
end

function app.retry()
  local args = ngx.req.get_uri_args()
  local path = ("/flaky?key=%s&fails=%s&slow=%s"):format(args.key,
    args.fails or 0, args.slow or 0)
  local pings = "ping:" .. ngx.worker.pid()
  local pings_before = ngx.shared.calls:get(pings) or 0
  local delays, timeouts, errs, calls = {}, {}, {}, 0
  ngx.update_time()
  local t0 = ngx.now()
  local res, err, reason = backoff.retry(policies[args.p or "default"],
    function(attempt, timeout)
      calls = attempt
      timeouts[#timeouts + 1] = timeout or "none"
      return fetch(path, timeout)
    end, {
      on_retry = function(e, d)
        errs[#errs + 1] = e
        delays[#delays + 1] = d
      end,
    })
  ngx.update_time()
  ngx.say("result=", tostring(res))
  ngx.say("err=", tostring(err))
  ngx.say("reason=", tostring(reason))
  ngx.say("attempts=", calls)
  ngx.say("delays=", table.concat(delays, ","))
  ngx.say("timeouts=", table.concat(timeouts, ","))
  ngx.say("errs=", table.concat(errs, ","))
  ngx.say("elapsed=", ngx.now() - t0)
  ngx.say("pings=", (ngx.shared.calls:get(pings) or 0) - pings_before)
end

-- upstreams that fail: hang (until the caller gives up: the location has
-- lua_check_client_abort on), answer 503, close without an answer
function app.hang() ngx.sleep(2) end
function app.fail503() return ngx.exit(503) end
function app.close() return ngx.exit(444) end

-- one HTTP/1.0 GET whose connect, send and receives together take at
-- most `timeout` seconds
local function fetch_within(path, timeout)
  local now = backoff.now
  local deadline = now() + timeout
  local sock = ngx.socket.tcp()
  local function left()   -- ms; cosockets take whole ms, 0 = the default
    sock:settimeout(math.max(1, (deadline - now()) * 1000))
  end
  left()
  local ok, err = sock:connect("127.0.0.1", tonumber(ngx.var.server_port))
  if not ok then return nil, err end
  left()
  ok, err = sock:send("GET " .. path .. " HTTP/1.0\r\nHost: x\r\n\r\n")
  if not ok then sock:close() return nil, err end
  left()
  local status
  status, err = sock:receive("*l")
  if not status then sock:close() return nil, err end
  left()
  local rest
  rest, err = sock:receive("*a")
  sock:close()
  if not rest then return nil, err end
  if status:match("^HTTP/%d%.%d 200") then return rest end
  return nil, status
end

-- issue 11: retry a failing upstream under a 1 s deadline; report the
-- whole run's duration from the call of backoff.retry to its return (on
-- backoff's own clock; the runner starts its clock at attempt 1, a few
-- microseconds later), each attempt's start relative to that call and
-- the timeout it was given
function app.deadline()
  local path = "/up/" .. ngx.var.arg_up
  local now = backoff.now
  local starts, timeouts = {}, {}
  local t0 = now()
  local res, err, reason = backoff.retry(policies.deadline,
    function(_, timeout)
      starts[#starts + 1] = ("%.6f"):format(now() - t0)
      timeouts[#timeouts + 1] = ("%.6f"):format(timeout or -1)
      return fetch_within(path, timeout or 5)
    end)
  local total = now() - t0
  ngx.say("result=", tostring(res))
  ngx.say("err=", tostring(err))
  ngx.say("reason=", tostring(reason))
  ngx.say("total=", ("%.6f"):format(total))
  ngx.say("starts=", table.concat(starts, ","))
  ngx.say("timeouts=", table.concat(timeouts, ","))
end

return app
