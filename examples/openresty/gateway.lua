-- The handlers of examples/openresty/nginx.conf: one API route retried
-- with backoff.http, the recommended fleet budget, metrics.
local backoff = require "backoff"
local http = require "backoff.http"
local metrics = require "backoff.metrics"

local M = {}
local policy, budget, counters

local UPSTREAM_HOST, UPSTREAM_PORT = "127.0.0.1", 8081

-- init_by_lua: before the fork (port: the stand-in upstream's, when
-- gateway.sh was given another)
function M.init(port)
  UPSTREAM_PORT = port or UPSTREAM_PORT
  -- 50 ms, 100 ms, 200 ms ... with full jitter; at most 4 attempts and
  -- 3 s in all; each try gets half the time left as its timeout, at
  -- least 0.2 s (a try is not started with less than that left)
  policy = backoff.exponential { initial_delay = 0.05, max_delay = 1,
    jitter = "full", max_attempts = 4, max_actual_duration = 3,
    adjust_timeout_factor = 0.5, min_adjust_timeout = 0.2 }
  -- the fleet setting: one retry budget for every worker of the host.
  -- A retry after a 503 with Retry-After costs more than its reserve:
  -- the recommended setting does not retry a server that asks to wait.
  -- A retry after a timeout costs up to 6 while most recent attempts
  -- time out: a quiet host whose attempts hang does not retry them, on
  -- purpose; any other failure costs 1, and a fresh budget pays for one
  -- (doc/budget.md, "The recommended setting")
  budget = backoff.budget.recommended { shared = ngx.shared.retry_budget }
  counters = metrics.new("api", { shared = ngx.shared.backoff_metrics })
end

-- One try: the request over a cosocket with this try's timeouts.
-- lua-resty-http does the same in two lines:
--   local httpc = require("resty.http").new()
--   if t then httpc:set_timeouts(t.connect, t.send, t.read) end
--   return httpc:request_uri(url, { method = method, body = body,
--                                   headers = headers })
-- (a failed connect there comes back as nil, err: pass "connect" as a
-- third value yourself, by calling httpc:connect first, to let a POST
-- be retried after it)
local function try(t, method, path, headers, body)
  local sock = ngx.socket.tcp()
  if t then sock:settimeouts(t.connect, t.send, t.read) end
  local ok, err = sock:connect(UPSTREAM_HOST, UPSTREAM_PORT)
  if not ok then return nil, err, "connect" end  -- certainly not sent
  local req = { method, " ", path, " HTTP/1.0\r\nHost: upstream\r\n" }
  for k, v in pairs(headers) do
    if type(v) == "string" then req[#req + 1] = k .. ": " .. v .. "\r\n" end
  end
  req[#req + 1] = "Content-Length: " .. #body .. "\r\n\r\n"
  req[#req + 1] = body
  ok, err = sock:send(table.concat(req))
  if not ok then sock:close() return nil, err, "send" end
  local line
  line, err = sock:receive("*l")
  if not line then sock:close() return nil, err, "read" end
  local res = { status = tonumber(line:match("^HTTP/%d%.%d (%d%d%d)")),
                headers = {} }
  while true do
    line, err = sock:receive("*l")
    if not line then sock:close() return nil, err, "read" end
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then res.headers[k] = v end
  end
  res.body, err = sock:receive("*a")
  sock:close()
  if not res.body then return nil, err, "read" end
  return res
end

-- content_by_lua for /api/: the upstream's answer, or 502/503 when the
-- retries gave up
function M.route()
  ngx.req.read_body()
  local method = ngx.req.get_method()
  local body = ngx.req.get_body_data() or ""
  local headers = {
    ["Idempotency-Key"] = ngx.var.http_idempotency_key,
    ["Content-Type"] = ngx.var.http_content_type,
  }
  local path = ngx.var.request_uri:gsub("^/api", "")
  local res, err, reason, last = http.request(policy, function(_, t)
    return try(t, method, path, headers, body)
  end, {
    method = method,
    headers = headers,          -- an Idempotency-Key makes POST retryable
    budget = budget,
    metrics = counters,
    on_retry = function(e, delay, attempt)
      ngx.log(ngx.WARN, "try ", attempt, " failed (", e, "), next in ",
              ("%.3g"):format(delay), " s")
    end,
  })
  if not res then
    -- an expected outcome (the budget, the policy, the breaker said
    -- no): a warning, not an error the operator must chase
    ngx.log(ngx.WARN, "gave up (", reason, "): ", err)
    if last then                -- the upstream's own last answer
      ngx.status = last.status
      ngx.header["Retry-After"] = last.headers["Retry-After"]
      return ngx.print(last.body)
    end
    ngx.status = reason == "budget" and 503 or 502
    return ngx.say("upstream unavailable (", reason, ")")
  end
  ngx.status = res.status
  ngx.header["Content-Type"] = res.headers["Content-Type"]
  ngx.print(res.body)
end

-- the stand-in upstream: call n fails as n % 3 says (a 503 asking
-- for a second's wait, then a 502), the third works
function M.upstream()
  local n = ngx.shared.example:incr("n", 1, 0)
  if n % 3 == 1 then
    ngx.status = 503
    ngx.header["Retry-After"] = "1"
    return ngx.say("busy, come back in a second")
  elseif n % 3 == 2 then
    ngx.status = 502            -- its own upstream failed: retried
    return ngx.say("bad gateway")
  end
  ngx.header["Content-Type"] = "text/plain"
  ngx.say("hello from the upstream (call ", n, ", ",
          ngx.req.get_method(), " ", ngx.var.request_uri, ")")
end

return M
