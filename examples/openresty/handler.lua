-- The handler of examples/openresty/nginx.conf.
local backoff = require "backoff"

local M = {}
local policy

function M.init()
  -- 50 ms, 100 ms, 200 ms ... with full jitter; at most 5 attempts and
  -- 3 s in all; each attempt gets half the time left as its timeout
  policy = backoff.exponential { initial_delay = 0.05, max_delay = 1,
    jitter = "full", max_attempts = 5, max_actual_duration = 3,
    adjust_timeout_factor = 0.5, min_adjust_timeout = 0.2 }
end

local function get(path, timeout)
  local sock = ngx.socket.tcp()
  sock:settimeout(timeout * 1000)
  local ok, err = sock:connect("127.0.0.1", tonumber(ngx.var.server_port))
  if not ok then return nil, err end
  sock:send("GET " .. path .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
  local status, rerr = sock:receive("*l")
  if not status then sock:close() return nil, rerr end
  local rest = sock:receive("*a") or ""
  sock:close()
  if not status:find(" 200 ", 1, true) then return nil, status end
  return rest:match("\r\n\r\n(.*)$")
end

function M.fetch()
  -- ngx.sleep is used between attempts: the worker keeps serving others
  local body, err, reason = backoff.retry(policy, function(attempt, timeout)
    ngx.log(ngx.INFO, "attempt ", attempt, " with timeout ", timeout)
    return get("/upstream", timeout)
  end, {
    on_retry = function(e, delay, attempt)
      ngx.log(ngx.WARN, "attempt ", attempt, " failed (", e,
              "), retrying in ", delay, " s")
    end,
  })
  if not body then
    ngx.status = 502
    ngx.say("gave up (", reason, "): ", err)
    return
  end
  ngx.print(body)
end

return M
