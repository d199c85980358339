-- The OpenResty side of spec/nginx/breaker_days.lua: a front that
-- retries an upstream with the recommended policy and budget, with the
-- recommended breaker (/with) or without it (/without), all shared by
-- the 4 workers; the upstream (ok, dead, flapping); and a driver that
-- sends the front an open-loop load from inside nginx (light threads,
-- one per request), counting per second what was issued and what
-- succeeded.
local backoff = require "backoff"

local app = {}
local up_port, policy, br, bud_with, bud_without

function app.init(up)
  up_port = up
  policy = backoff.recommended()
  local d = ngx.shared.protect
  bud_with = backoff.budget.recommended { shared = d, key = "with" }
  bud_without = backoff.budget.recommended { shared = d, key = "without" }
  local stats = ngx.shared.stats
  br = backoff.breaker.recommended { shared = d, key = "up",
    on_change = function(from, to, info)
      local n = stats:incr("tn", 1, 0)
      stats:set("t" .. n, ("%s %s %.3f"):format(from, to, info.at))
    end }
end

-- the upstream: mode "ok", "dead" (503 at once), or "flap D U" (down D
-- seconds, up U, from the time the mode was set)
function app.upstream()
  local m = ngx.shared.mode:get("m") or "ok"
  local d, u = m:match("^flap (%S+) (%S+)$")
  if d then
    local since = ngx.now() - (ngx.shared.mode:get("at") or 0)
    m = since % (d + u) < tonumber(d) and "dead" or "ok"
  end
  if m == "dead" then return ngx.exit(503) end
  ngx.say("ok")
end

function app.set_mode()
  ngx.update_time()
  ngx.shared.mode:set("at", ngx.now())
  ngx.shared.mode:set("m", ngx.unescape_uri(ngx.var.arg_m))
  ngx.say(("at=%.3f"):format(ngx.now()))
end

-- one try: GET on the upstream, its timeouts at most 1 s
local function fetch(_, timeout)
  local sock = ngx.socket.tcp()
  local ms = math.floor(math.min(timeout or 1, 1) * 1000)
  sock:settimeouts(ms, ms, ms)
  local ok, err = sock:connect("127.0.0.1", up_port)
  if not ok then return nil, err end
  sock:send("GET / HTTP/1.0\r\nHost: up\r\n\r\n")
  local line
  line, err = sock:receive("*l")
  sock:close()
  if line and line:find(" 200 ", 1, true) then return true end
  return nil, line or err
end

function app.front(with)
  local res = backoff.retry(policy, fetch, with
    and { budget = bud_with, breaker = br } or { budget = bud_without })
  ngx.say("ok=", res and 1 or 0)
end

-- one request of the driver's, counted in the second it was issued
local function one(route, tag, sec, port)
  local stats = ngx.shared.stats
  stats:incr(tag .. ":n:" .. sec, 1, 0)
  local sock = ngx.socket.tcp()
  sock:settimeout(20000)
  if not sock:connect("127.0.0.1", port) then return end
  sock:send("GET /" .. route .. " HTTP/1.0\r\nHost: front\r\n\r\n")
  local all = sock:receive("*a")
  sock:close()
  if all and all:find("ok=1", 1, true) then
    stats:incr(tag .. ":ok:" .. sec, 1, 0)
  end
end

-- /drive?route=with&tag=A&secs=S&rate=R: R requests a second for S
-- seconds (open loop), then waits for the last answers
function app.drive()
  local a = ngx.req.get_uri_args()
  local secs, rate = tonumber(a.secs), tonumber(a.rate)
  local port = tonumber(ngx.var.server_port)
  local threads = {}
  ngx.update_time()
  local t0 = ngx.now()
  for i = 0, secs * rate - 1 do
    local due = t0 + i / rate
    ngx.update_time()
    if due > ngx.now() then ngx.sleep(due - ngx.now()) end
    threads[#threads + 1] = ngx.thread.spawn(one, a.route, a.tag,
      math.floor(i / rate), port)
  end
  for _, th in ipairs(threads) do ngx.thread.wait(th) end
  ngx.say(("t0=%.3f"):format(t0))
end

-- the counts: "tag sec issued ok" lines, then the transitions
function app.stats()
  local s = ngx.shared.stats
  for _, tag in ipairs { "A", "W", "N" } do
    for sec = 0, 200 do
      local n = s:get(tag .. ":n:" .. sec)
      if n then
        ngx.say("c ", tag, " ", sec, " ", n, " ",
                s:get(tag .. ":ok:" .. sec) or 0)
      end
    end
  end
  for i = 1, s:get("tn") or 0 do ngx.say("t ", s:get("t" .. i)) end
end

return app
