-- The OpenResty side of spec/nginx/fleet_redis.lua: one host of the
-- fleet.  Its own breaker (3 failures in a row open it for 1 s, no
-- jitter) guarded by backoff.fleet, synced through Redis every 0.5 s;
-- and the recommended budget with the fleet's grant on top (fl:budget).
local backoff = require "backoff"
local fleet = require "backoff.fleet"
local fredis = require "backoff.fleet.redis"

local app = {}
local fl, guarded, bud

local INTERVAL = 0.5

-- the client, counting any call outside a timer (there must be none)
local function client(o, ngx_)
  if ngx_.get_phase() ~= "timer" then
    ngx.shared.stats:incr("request_phase_calls", 1, 0)
  end
  return fredis.connect(o, ngx_)
end

function app.init(host, redis_port, user, password)
  fl = fleet.new { shared = ngx.shared.fleet, host = host,
    prefix = "t:", interval = INTERVAL, tenure = 1.5, suspect_window = 1,
    probe_every = 1,
    redis = { port = redis_port, timeout = 0.1, username = user,
              password = password }, client = client }
  guarded = fl:breaker(backoff.breaker.new { shared = ngx.shared.breakers,
    key = "up", failures = 3,
    policy = backoff.constant { delay = 1, jitter = "none" } })
  bud = fl:budget(backoff.budget.recommended {
    shared = ngx.shared.breakers, key = "api" })
end

function app.init_worker() fl:start() end

-- one call through the guarded breaker: "refused", or the upstream's
-- status (probe=1 on the upstream's log for a probe)
function app.call()
  local _, info = guarded:state()
  local ok, ticket = guarded:allow()
  if not ok then
    ngx.say("refused")
    return
  end
  -- a probe: its own breaker's, or the one its guard lets through for
  -- the fleet
  local probe = (type(ticket) == "table" or info.fleet == "probe")
                and "1" or "0"
  local loc = ngx.shared.stats:get("broken") and "/bad" or "/up"
  local res = ngx.location.capture(loc, { args = { host = fl.host,
                                                   probe = probe } })
  guarded:record(res.status == 200, ticket)
  ngx.say(res.status)
end

function app.state()
  local own, info = guarded:state()
  local st = fl:status()
  ngx.say("own=", own, " fleet=", info.fleet or "none", " hosts=",
          st.hosts or "none", " rpc=",
          ngx.shared.stats:get("request_phase_calls") or 0)
end

-- ?n=N: N requests that failed once and were saved by their retry, as
-- the budget hears of them (no upstream: the fleet's counts only)
function app.saved()
  for _ = 1, tonumber(ngx.var.arg_n) or 1 do
    bud:record(false, 1)
    bud:withdraw(nil, 2)
    bud:record(true, 2)
  end
  ngx.say("ok")
end

-- the fleet's grant on this host now, and what the budget heard
function app.budget()
  ngx.say("grant=", bud:grant(), " tokens=", bud:budget():tokens())
end

-- retries until the host's own budget refuses (own), then on the
-- fleet's grant until it refuses too (lent)
function app.spend()
  local own, lent = 0, 0
  while own < 100 and bud:budget():withdraw(nil, 3) do own = own + 1 end
  while lent < 100 and bud:withdraw(nil, 3) do lent = lent + 1 end
  ngx.say("own=", own, " lent=", lent)
end

-- ?broken=1: this host's own path to the upstream is broken
function app.path()
  ngx.shared.stats:set("broken", ngx.var.arg_broken == "1")
  ngx.say("ok")
end

return app
