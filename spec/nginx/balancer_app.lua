-- The OpenResty side of spec/nginx/balancer.lua: backoff.balancer in
-- front of three peers (hang, 503, close), with a shared budget and
-- metrics per route.
local backoff = require "backoff"
local balancer = require "backoff.balancer"
local metrics = require "backoff.metrics"
local nb = require "ngx.balancer"

local app = {}
local ports, opts = {}, {}

-- a 1 s deadline, half the time left per try, at most 4 tries; /hang10
-- allows 10 tries, so that the deadline is what stops them
local policies = {}

function app.init(p)
  ports = p
  for name, attempts in pairs { four = 4, ten = 10 } do
    policies[name] = backoff.exponential { initial_delay = 0.01,
      max_delay = 0.1, jitter = "full", max_attempts = attempts,
      max_actual_duration = 1, adjust_timeout_factor = 0.5,
      min_adjust_timeout = 0.05 }
  end
  -- the load never runs out of tokens; /abort has a budget to watch
  local big = backoff.budget { shared = ngx.shared.budget, key = "load",
    capacity = 10000000, cost = 1, refund = 1 }
  for _, route in ipairs { "hang", "hang10", "fail", "fail3", "close" } do
    opts[route] = { budget = big, metrics = metrics.new(route,
      { shared = ngx.shared.metrics }) }
  end
  opts.abort = { metrics = metrics.new("abort",
                   { shared = ngx.shared.metrics }),
                 budget = backoff.budget { shared = ngx.shared.budget,
                   key = "abort", capacity = 100, cost = 5, refund = 1 } }
end

local PEER = { hang = "hang", hang10 = "hang", fail = "fail",
               fail3 = "fail", close = "close", abort = "hang" }

local function route() return ngx.var.uri:sub(2) end

function app.balance()
  local r = route()
  local ok = balancer(r == "hang10" and policies.ten or policies.four,
                      opts[r])
  if not ok then return ngx.exit(502) end
  assert(nb.set_current_peer("127.0.0.1", ports[PEER[r]]))
end

function app.done()
  balancer.done(opts[route()])
end

-- the metrics of every route, and the abort budget's tokens
function app.counts()
  for _, r in ipairs { "hang", "hang10", "fail", "fail3", "close",
                       "abort" } do
    local c = opts[r].metrics:counts()
    local g = {}
    for reason, n in pairs(c.giveups) do g[#g + 1] = reason .. ":" .. n end
    table.sort(g)
    ngx.say(r, " attempts=", c.attempts, " successes=", c.successes,
            " giveups=", table.concat(g, ","))
  end
  ngx.say("tokens=", opts.abort.budget:tokens())
end

-- the abort budget at 50 of 100 tokens: a deposit would show
function app.abort_setup()
  ngx.shared.budget:delete("abort")
  assert(opts.abort.budget:withdraw(50))
  ngx.say("tokens=", opts.abort.budget:tokens())
end

return app
