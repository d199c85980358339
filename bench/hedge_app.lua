-- The OpenResty side of bench/hedge.lua (make bench-hedge): the
-- upstream (its own nginx), the front's three routes, and the load
-- generator.  The mixes are bench/hedge_mixes.lua's.
-- luacheck: globals ngx
local backoff = require "backoff"
local budget = require "backoff.budget"
local hedge = require "backoff.hedge"
local metrics = require "backoff.metrics"
local MIXES = require "hedge_mixes"

local app = {}

local floor, log = math.floor, math.log
local SEED = "backoff-hedge-bench-2"

------------------------------------------------------------------------
-- the upstream

-- a draw in [0, 1) from (seed, request, copy, what): the same requests
-- are slow on every run and every route, and a request's copies draw
-- apart
local function draw(seq, a, what)
  return ngx.crc32_long(SEED .. ":" .. seq .. ":" .. a .. ":" .. what)
         / 4294967296
end

local queues = {}                 -- semaphores, per mix and peer

-- wait for a slot of queue q (one per mix and peer), serve, free it
local function queued(name, q, seq, a)
  local sem = queues[name]
  if not sem then
    sem = require("ngx.semaphore").new(q.slots)
    queues[name] = sem
  end
  local ok = sem:wait(30)
  if not ok then return end
  ngx.sleep(-q.mean * log(1 - draw(seq, a, "service")))
  sem:post(1)
end

function app.up()
  local seq, a = ngx.var.arg_seq, ngx.var.arg_a
  local mix = MIXES[ngx.var.arg_mix]
  local phase = ngx.var.arg_phase
  local peer = tonumber(ngx.var.arg_peer)
  local q = mix.queue or peer and mix.peer_queue and mix.peer_queue[peer]
  if q then
    queued(mix.name .. ":" .. (peer or 0), q, seq, a)
  else
    local fast = phase == "calm" and mix.calm.fast or mix.fast
    local wait = fast
    if phase ~= "calm" and draw(seq, a, "slow") < mix.share then
      wait = mix.slow
    end
    ngx.sleep(wait)
  end
  ngx.header["Content-Length"] = 3
  ngx.print("ok\n")
end

------------------------------------------------------------------------
-- the front

local S                     -- the settings: delay, percentile, ...
local policy
local estimators, budgets, paces, recorders = {}, {}, {}, {}

function app.init(settings)
  S = settings
  policy = backoff.constant { delay = 0, max_attempts = 3 }
end

-- per run key (the mix's runs share theirs when it has a calm run
-- first): an estimator, and per route a budget and a pace, as
-- doc/hedge.md recommends them
local function estimator(k)
  local e = estimators[k]
  if not e then
    e = hedge.latency { shared = ngx.shared.hedge, key = "lat:" .. k,
      percentile = S.percentile, min_delay = S.min_delay,
      max_delay = S.max_delay }
    estimators[k] = e
  end
  return e
end

local function budget_of(k, route)
  k = k .. ":" .. route
  local b = budgets[k]
  if not b then
    b = budget.ratio { shared = ngx.shared.hedge_budget, key = k,
      percent = S.percent, min_per_second = S.min_per_second, window = 10 }
    budgets[k] = b
    paces[k] = hedge.pace { shared = ngx.shared.hedge_budget,
      key = "pace:" .. k, percent = S.percent }
  end
  return b, paces[k]
end

local function recorder(route)
  local m = recorders[route]
  if not m then
    m = metrics.new(route, { shared = ngx.shared.metrics })
    recorders[route] = m
  end
  return m
end

-- one copy: GET /up over a pooled cosocket, the whole answer read;
-- with `down` (a tag), to a port where nothing listens, each connect
-- counted under the tag
local function fetch(path, t, cancel, down)
  local sock = cancel:on_cancel(ngx.socket.tcp())
  if t then
    sock:settimeouts(t.connect, t.send, t.read)
  else
    sock:settimeouts(5000, 5000, 5000)
  end
  local port = S.up
  if down then
    port = S.down
    ngx.shared.metrics:incr("connects:" .. down, 1, 0)
  end
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return nil, err, "connect" end
  ok, err = sock:send("GET " .. path .. " HTTP/1.1\r\nHost: up\r\n\r\n")
  if not ok then sock:close() return nil, err, "send" end
  local line
  line, err = sock:receive("*l")
  if not line then sock:close() return nil, err, "read" end
  local status = tonumber(line:match("^HTTP/%d%.%d (%d+)"))
  local length = 0
  while true do
    line, err = sock:receive("*l")
    if not line then sock:close() return nil, err, "read" end
    if line == "" then break end
    local n = line:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
    if n then length = tonumber(n) end
  end
  local body
  body, err = sock:receive(length)
  if not body then sock:close() return nil, err, "read" end
  sock:setkeepalive(30000, 1024)
  return status
end

-- /connects?tag=T: the connects a down mix's run made
function app.connects()
  ngx.say(ngx.shared.metrics:get("connects:" .. ngx.var.arg_tag) or 0)
end

-- a cancel token that is never cancelled, for the unhedged route
local never = { cancelled = false }
function never.on_cancel(_, x) return x end

local turn = 0

-- the mix's peers: 1 .. n
local function peers_of(mix)
  if not mix.peers then return nil end
  local list = mix.peer_list
  if not list then
    list = {}
    for i = 1, mix.peers do list[i] = i end
    mix.peer_list = list
  end
  return list
end

function app.route(route)
  local v = ngx.var
  local mix = MIXES[v.arg_mix]
  local base = ("/up?seq=%s&mix=%s&phase=%s&tag=%s&route=%s&a=")
    :format(v.arg_seq, mix.name, v.arg_phase, v.arg_tag, route)
  local peers = peers_of(mix)
  local down = mix.down and v.arg_tag or nil
  local function do_request(a, t, cancel, peer)
    if peer then
      return fetch(base .. a .. "&peer=" .. peer, t, cancel, down)
    end
    return fetch(base .. a, t, cancel, down)
  end
  local status, err
  if route == "none" then
    local peer
    if peers then                     -- round robin, unhedged
      turn = turn % #peers + 1
      peer = peers[turn]
    end
    status, err = do_request(1, nil, never, peer)
  else
    local k = v.arg_bk
    local bud, pace = budget_of(k, route)
    status, err = hedge.request(policy, do_request, { method = "GET",
      delay = route == "fixed" and S.delay or estimator(k),
      budget = bud, pace = pace, peers = peers,
      metrics = recorder(route) })
  end
  if status ~= 200 then
    ngx.status = 502
    ngx.say(tostring(err))
    return
  end
  ngx.header["Content-Length"] = 3
  ngx.print("ok\n")
end

------------------------------------------------------------------------
-- the load generator

local FRONT
function app.init_load(front) FRONT = front end

local now = backoff.now

-- one request to the front over a pooled connection: true if a 200
local function call(path)
  local sock = ngx.socket.tcp()
  sock:settimeouts(5000, 5000, 5000)
  local ok = sock:connect("127.0.0.1", FRONT)
  if not ok then return false end
  ok = sock:send("GET " .. path .. " HTTP/1.1\r\nHost: front\r\n\r\n")
  if not ok then sock:close() return false end
  local line = sock:receive("*l")
  if not line then sock:close() return false end
  local status = tonumber(line:match("^HTTP/%d%.%d (%d+)"))
  local length = 0
  while true do
    local h = sock:receive("*l")
    if not h then sock:close() return false end
    if h == "" then break end
    local n = h:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
    if n then length = tonumber(n) end
  end
  if not sock:receive(length) then sock:close() return false end
  sock:setkeepalive(30000, 2048)
  return status == 200
end

local function percentile(sorted, p)
  local i = math.ceil(#sorted * p / 100)
  if i < 1 then i = 1 end
  return sorted[i]
end

-- /load?route=R&mix=M&phase=P&tag=T&bk=K&rate=N&seconds=S&seq0=K:
-- rate x seconds requests, the i-th due at start + (i - 1) / rate, each
-- measured from when it was due to when its answer was read
function app.load()
  local q = ngx.req.get_uri_args()
  local rate, seconds = tonumber(q.rate), tonumber(q.seconds)
  local n, seq0 = floor(rate * seconds), tonumber(q.seq0) or 0
  local path = ("/r/%s?mix=%s&phase=%s&tag=%s&bk=%s&seq="):format(q.route,
    q.mix, q.phase, q.tag, q.bk)
  local lat, threads, errors = {}, {}, 0
  local t0 = now()
  local function one(i, due)
    if not call(path .. (seq0 + i)) then errors = errors + 1 end
    lat[i] = now() - due
  end
  for i = 1, n do
    local due = t0 + (i - 1) / rate
    local d = due - now()
    if d >= 0.001 then ngx.sleep(d) end
    threads[i] = ngx.thread.spawn(one, i, due)
  end
  for i = 1, n do ngx.thread.wait(threads[i]) end
  local took = now() - t0
  table.sort(lat)
  local sum = 0
  for i = 1, n do sum = sum + lat[i] end
  ngx.say(("n=%d errors=%d seconds=%.3f p50=%.6f p99=%.6f p999=%.6f "
    .. "max=%.6f mean=%.6f"):format(n, errors, took, percentile(lat, 50),
    percentile(lat, 99), percentile(lat, 99.9), lat[n], sum / n))
end

return app
