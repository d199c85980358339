-- The OpenResty side of spec/nginx/hedge.lua: an upstream whose every
-- copy answers as its query string says, and backoff.hedge.request
-- driving it through raw cosockets (with a keepalive pool), a
-- lua-resty-http-shaped client and a plain function.  /run?case=NAME&
-- key=K runs one case and answers key=value lines.
local backoff = require "backoff"
local budget = require "backoff.budget"
local hedge = require "backoff.hedge"
local metrics = require "backoff.metrics"

local app = {}
local UP                    -- the upstream's port

local policies, latency

function app.init(up)
  UP = up
  policies = {
    three = backoff.constant { delay = 0, max_attempts = 3 },
    deadline = backoff.constant { delay = 0, max_attempts = 3,
                                  max_actual_duration = 0.3 },
  }
  latency = hedge.latency { shared = ngx.shared.hedge, key = "adaptive",
    percentile = 90, min_delay = 0.001, max_delay = 2, min_samples = 20 }
end

------------------------------------------------------------------------
-- the upstream

local function list(s)
  local t = {}
  for x in (s or ""):gmatch("[^,]+") do t[#t + 1] = tonumber(x) end
  return t
end

-- /up?key=K&a=N&ms=M&st=S (ms and st: one value, or one per attempt)
function app.up()
  local q = ngx.req.get_uri_args()
  local a = tonumber(q.a) or 1
  local ms, st = list(q.ms), list(q.st)
  local wait = ms[a] or ms[#ms] or 0
  if wait > 0 then ngx.sleep(wait / 1000) end
  ngx.status = st[a] or st[#st] or 200
  if q.pb then ngx.header["Hedge-Pushback-Ms"] = q.pb end
  local body = "copy " .. a .. " of " .. tostring(q.key) .. "\n"
  ngx.header["Content-Length"] = #body
  ngx.print(body)
end

-- counts every request the upstream saw, and those the caller closed
function app.up_log()
  local calls = ngx.shared.calls
  local key = ngx.var.arg_key or "?"
  calls:incr("hits:" .. key, 1, 0)
  calls:set("method:" .. key, ngx.req.get_method())
  if ngx.status == 499 then
    calls:incr("closed:" .. key, 1, 0)
    calls:set("closed_after:" .. key .. ":" .. (ngx.var.arg_a or "?"),
              tonumber(ngx.var.request_time))
  end
end

------------------------------------------------------------------------
-- clients

-- What the copies of one request did, in order: "start N", "read N"
-- (a status line was read), "cancel N" (a registered function ran)
local events

local function note(s) events[#events + 1] = s end

local function path_of(key, a, q)
  return ("/up?key=%s&a=%d&%s"):format(key, a, q)
end

-- one HTTP/1.1 request over a cosocket from the keepalive pool; the
-- whole response is read before the socket goes back to the pool
local function cosocket(method, path, headers, t, cancel, a)
  local sock = ngx.socket.tcp()
  cancel:on_cancel(sock)
  if t then sock:settimeouts(t.connect, t.send, t.read) end
  local ok, err = sock:connect("127.0.0.1", UP, { pool = "up" })
  if not ok then return nil, err, "connect" end
  local req = { method, " ", path, " HTTP/1.1\r\nHost: up\r\n" }
  for k, v in pairs(headers or {}) do
    req[#req + 1] = k .. ": " .. v .. "\r\n"
  end
  req[#req + 1] = "Content-Length: 0\r\n\r\n"
  ok, err = sock:send(table.concat(req))
  if not ok then sock:close() return nil, err, "send" end
  local line
  line, err = sock:receive("*l")
  if not line then sock:close() return nil, err, "read" end
  note("read " .. a)
  local res = { status = tonumber(line:match("^HTTP/%d%.%d (%d+)")),
                headers = {} }
  while true do
    line, err = sock:receive("*l")
    if not line then sock:close() return nil, err, "read" end
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then res.headers[k] = v end
  end
  local n = tonumber(res.headers["Content-Length"]) or 0
  res.body, err = sock:receive(n)
  if not res.body then sock:close() return nil, err, "read" end
  sock:setkeepalive(10000, 50)
  return res
end

-- a client shaped like lua-resty-http's: new(), set_timeouts, connect,
-- request (the body read later, through res:read_body()), close
local Httpc = {}
Httpc.__index = Httpc

local function httpc_new() return setmetatable({}, Httpc) end
function Httpc:set_timeouts(c, s, r) self.t = { c, s, r } end
function Httpc:connect(host, port)
  self.sock = ngx.socket.tcp()
  if self.t then self.sock:settimeouts(self.t[1], self.t[2], self.t[3]) end
  return self.sock:connect(host, port)
end
function Httpc:close()
  self.closed = true
  return self.sock and self.sock:close()
end
function Httpc:request(p)
  local sock = self.sock
  local ok, err = sock:send(p.method .. " " .. p.path
    .. " HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n")
  if not ok then return nil, err end
  local line
  line, err = sock:receive("*l")
  if not line then return nil, err end
  note("read " .. p.a)
  local res = { status = tonumber(line:match("^HTTP/%d%.%d (%d+)")),
                headers = {} }
  while true do
    line, err = sock:receive("*l")
    if not line then return nil, err end
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then res.headers[k] = v end
  end
  -- the body stays on the socket until the caller reads it
  function res.read_body()
    local n = tonumber(res.headers["Content-Length"]) or 0
    local body, e = sock:receive(n)
    sock:close()
    return body, e
  end
  return res
end

------------------------------------------------------------------------
-- the cases: each returns its options and do_request

local cases = {}

local function cosocket_case(q, o)
  return function(key)
    o = o or {}
    return o, function(a, t, cancel)
      return cosocket(o.method or "GET", path_of(key, a, q), o.headers, t,
                      cancel, a)
    end
  end
end

-- a slow first copy: the hedge answers, copy 1 is cancelled
cases.get_hedged = cosocket_case("ms=1000,20")
-- the first copy fails fast with a 503: another starts at once
cases.retry_503 = cosocket_case("ms=10,20&st=503,200",
                                { delay = 1 })
-- a hedge answers 404: an answer, not a failure
cases.fatal_404 = cosocket_case("ms=1000,20&st=200,404")
-- a POST is never hedged; one with an Idempotency-Key is
cases.post = cosocket_case("ms=300,20", { method = "POST" })
cases.post_key = cosocket_case("ms=1000,20", { method = "POST",
  headers = { ["Idempotency-Key"] = "k1" } })
-- every copy hangs: each one's timeouts end at the deadline
cases.deadline = cosocket_case("ms=2000", { policy = "deadline",
  delay = 0.1 })
-- every copy hangs and ignores its timeouts: the deadline cancels them
cases.deadline_plain = function()
  return { policy = "deadline", delay = 0.1 }, function(a, _, cancel)
    cancel:on_cancel(function() note("cancel " .. a) end)
    ngx.sleep(2)
    note("read " .. a)
    return 200
  end
end

-- peers: a slow first copy's hedge goes to another peer (each copy
-- notes its peer)
cases.peers = function(key)
  local o = { peers = { "p1", "p2", "p3" } }
  return o, function(a, t, cancel, peer)
    note("peer " .. a .. "=" .. tostring(peer) .. "/" .. tostring(
      cancel.peer))
    return cosocket("GET", path_of(key, a, "ms=1000,20&peer=" .. peer),
                    nil, t, cancel, a)
  end
end

-- pushback: the first request's answer says "hedge-pushback-ms: 5000";
-- the second's slow first copy is then not hedged (the pace is shared)
local pb_pace
cases.pushback = function(key)
  pb_pace = pb_pace or hedge.pace { shared = ngx.shared.hedge,
                                    key = "pushback" }
  local k = 0
  return { pace = pb_pace, repeat_n = 2 }, function(a, t, cancel)
    if a == 1 then k = k + 1 end
    local q = k == 1 and "ms=10&pb=5000" or "ms=300,20"
    return cosocket("GET", path_of(key, a, q), nil, t, cancel, a)
  end
end

-- lua-resty-http-shaped: the winner's body read after hedge returns
cases.resty_shaped = function(key)
  return { read_body = true }, function(a, t, cancel)
    local httpc = cancel:on_cancel(httpc_new())
    if t then httpc:set_timeouts(t.connect, t.send, t.read) end
    local ok, err = httpc:connect("127.0.0.1", UP)
    if not ok then return nil, err, "connect" end
    return httpc:request { method = "GET", a = a,
                           path = path_of(key, a, "ms=1000,20") }
  end
end

-- a plain function with a cancel token: it polls cancel.cancelled and
-- registers a function to run when cancelled
cases.plain = function()
  return {}, function(a, _, cancel)
    cancel:on_cancel(function() note("cancel " .. a) end)
    if a == 1 then
      for _ = 1, 100 do
        if cancel.cancelled then return nil, "cancelled" end
        ngx.sleep(0.01)
      end
      note("read 1")
      return 200
    end
    ngx.sleep(0.02)
    note("read " .. a)
    return 201, { ["X-Copy"] = "2" }
  end
end

-- a budget that pays one hedge (a reserve of 1 per 10 s, no share of
-- the requests): the first request hedges, the others run with their
-- first copy only
cases.budget = function(key)
  return { budget = budget.ratio { percent = 0, min_per_second = 0.1,
    window = 10, shared = ngx.shared.budget, key = "b:" .. key },
    repeat_n = 5 }, function(a, t, cancel)
      return cosocket("GET", path_of(key, a, "ms=300,20"), nil, t, cancel,
                      a)
    end
end

-- the adaptive delay: 30 copies of 40 ms teach it, then a slow one
cases.adaptive = function(key)
  return { delay = latency, teach = 30 }, function(a, t, cancel)
    return cosocket("GET", path_of(key, a, "ms=40"), nil, t, cancel, a)
  end, function(a, t, cancel)
    return cosocket("GET", path_of(key, a, "ms=1000,20"), nil, t,
                    cancel, a)
  end
end

-- one request of a case; returns what to print
local function one(a, o, do_request, log)
  local hedged = {}
  ngx.update_time()
  local t0 = ngx.now()
  local opts = {
    method = o.method or "GET", headers = o.headers,
    delay = o.delay or 0.05,
    budget = o.budget or false,
    -- these cases check the copies' mechanics: paced only where a
    -- case asks for it
    pace = o.pace or false, peers = o.peers,
    metrics = metrics.new(a.case, { shared = ngx.shared.metrics }),
    on_hedge = function(err, attempt)
      hedged[#hedged + 1] = attempt .. ":" .. tostring(err)
    end,
  }
  local res, err, reason = hedge.request(policies[o.policy or "three"],
                                         do_request, opts)
  ngx.update_time()
  local r = { status = type(res) == "table" and res.status or res,
    err = err, reason = reason, elapsed = ngx.now() - t0,
    hedged = table.concat(hedged, ","),
    header = type(err) == "table" and err["X-Copy"] or nil }
  if type(res) == "table" then
    r.body = res.body
    if o.read_body and res.read_body then r.body = res.read_body() end
    r.body = r.body and r.body:gsub("\n", "")
  end
  log[#log + 1] = r
  return r
end

-- /run?case=NAME&key=K
function app.run()
  local a = ngx.req.get_uri_args()
  events = {}
  local o, do_request, then_request = cases[a.case](a.key)
  local log = {}
  for _ = 1, o.teach or 0 do one(a, o, do_request, log) end
  if o.teach then
    ngx.say("delay=", latency:delay())
    ngx.say("samples=", latency:samples())
    events = {}
    do_request = then_request
  end
  for _ = 1, o.repeat_n or 1 do one(a, o, do_request, log) end
  -- long enough for every loser to have answered, had it lived on
  ngx.sleep(1.2)
  local calls = ngx.shared.calls
  local many = o.repeat_n or 1
  for i = 1, many do
    local r = log[#log - many + i]
    for _, k in ipairs { "status", "err", "reason", "elapsed", "hedged",
                         "body" } do
      ngx.say(k, many > 1 and i or "", "=", tostring(r[k]))
    end
  end
  ngx.say("events=", table.concat(events, ","))
  ngx.say("hits=", calls:get("hits:" .. a.key) or 0)
  ngx.say("closed=", calls:get("closed:" .. a.key) or 0)
  for n = 1, 3 do
    local c = calls:get("closed_after:" .. a.key .. ":" .. n)
    if c then ngx.say("closed_after", n, "=", c) end
  end
  ngx.say("method=", calls:get("method:" .. a.key) or "")
end

-- /timer?key=K: the get_hedged case run from a timer
function app.timer()
  local a = ngx.req.get_uri_args()
  local calls = ngx.shared.calls
  local ok, err = ngx.timer.at(0, function(premature)
    if premature then return end
    events = {}
    local o, do_request = cases.get_hedged(a.key)
    local r = one({ case = "timer" }, o, do_request, {})
    calls:set("timer:" .. a.key, ("status=%s body=%s events=%s"):format(
      tostring(r.status), tostring(r.body), table.concat(events, ",")))
  end)
  if not ok then ngx.say("timer error ", err) return end
  for _ = 1, 100 do
    local v = calls:get("timer:" .. a.key)
    if v then ngx.say(v) return end
    ngx.sleep(0.02)
  end
  ngx.say("timer never ended")
end

------------------------------------------------------------------------
-- hedging asked for in header_filter and log

function app.late(phase)
  local ok, err = pcall(hedge.request, policies.three,
    function() return 200 end,
    { method = "GET", delay = 0.01, budget = false })
  local calls = ngx.shared.calls
  calls:set(phase .. ":ok", tostring(ok))
  calls:set(phase .. ":err", tostring(err))
end

function app.late_result()
  local calls = ngx.shared.calls
  for _, phase in ipairs { "filter", "log" } do
    for _, k in ipairs { "ok", "err" } do
      ngx.say(phase, k, "=", tostring(calls:get(phase .. ":" .. k)))
    end
  end
end

return app
