-- The OpenResty side of spec/nginx/balancer.lua: backoff.balancer in
-- front of three peers (hang, 503, close), with a shared budget and
-- metrics per route; the budget routes' budgets count what they paid
-- and gave back.
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
  opts.natural = { budget = big, metrics = metrics.new("natural",
                     { shared = ngx.shared.metrics }) }
  for _, r in ipairs { "tb_hang", "tb_fail", "tb_mixed", "rec_hang",
                       "rec_fail" } do
    local bud = r:sub(1, 2) == "tb"
      and backoff.budget { shared = ngx.shared.budget, key = r,
                           capacity = 100, cost = 1, refund = 1 }
      or backoff.budget.recommended { shared = ngx.shared.budget, key = r }
    opts[r] = { budget = app.counted(r, bud), metrics = metrics.new(r,
                  { shared = ngx.shared.metrics }) }
  end
end

-- bud, counting in the dict its withdrawals that paid ("<name>|paid")
-- and its deposits ("<name>|back"): the balancer gives back only with
-- deposit, and the budget routes see no success (a 500 is a failure),
-- whose record would deposit inside the budget
function app.counted(name, bud)
  local d = ngx.shared.budget
  local w = { raw = bud }
  function w.withdraw(_, c)
    local ok = bud:withdraw(c)
    if ok then d:incr(name .. "|paid", 1, 0) end
    return ok
  end
  function w.deposit(_, n)
    d:incr(name .. "|back", 1, 0)
    return bud:deposit(n)
  end
  function w.record(_, ...) return bud:record(...) end
  function w.tokens() return bud:tokens() end
  function w.cost() return bud:cost() end
  return w
end

local PEER = { hang = "hang", hang10 = "hang", fail = "fail",
               fail3 = "fail", close = "close", abort = "hang",
               tb_hang = "hang", tb_fail = "fail", tb_mixed = "mixed",
               rec_hang = "hang", rec_fail = "fail" }

local function route() return ngx.var.uri:sub(2) end

function app.balance()
  local r = route()
  local ok, attempt = balancer(r == "hang10" and policies.ten
                               or policies.four, opts[r])
  if not ok then return end         -- refused: nginx answers 502
  local peer = PEER[r]
  if r == "natural" then            -- the fail and close peers in turn
    peer = attempt % 2 == 1 and "fail" or "close"
  end
  assert(nb.set_current_peer("127.0.0.1", ports[peer]))
end

function app.done()
  balancer.done(opts[route()])
end

-- the metrics of every route, and the abort budget's tokens
function app.counts()
  for _, r in ipairs { "hang", "hang10", "fail", "fail3", "close",
                       "abort", "natural" } do
    local c = opts[r].metrics:counts()
    local g = {}
    for reason, n in pairs(c.giveups) do g[#g + 1] = reason .. ":" .. n end
    table.sort(g)
    ngx.say(r, " attempts=", c.attempts, " successes=", c.successes,
            " giveups=", table.concat(g, ","))
  end
  ngx.say("tokens=", opts.abort.budget:tokens())
end

-- each budget route: its budget's counter as stored (the token bucket's
-- tokens; the earned kind's counter in thousandths, a missing key being
-- full), the withdrawals that paid, the deposits
function app.budgets()
  local d = ngx.shared.budget
  for _, r in ipairs { "tb_hang", "tb_fail", "tb_mixed", "rec_hang",
                       "rec_fail" } do
    local raw = opts[r].budget.raw
    local counter, unit
    if r:sub(1, 2) == "tb" then
      counter, unit = raw:tokens(), 1
    else
      -- (a missing key is full: capacity and the credit's room, raw.cap)
      counter, unit = d:get(raw:dict_key()) or raw.cap, 1000
    end
    ngx.say(r, " counter=", counter, " unit=", unit, " cost=", raw:cost(),
            " capacity=", raw:capacity(), " paid=", d:get(r .. "|paid") or 0,
            " back=", d:get(r .. "|back") or 0)
  end
end

-- the abort budget at 50 of 100 tokens: a deposit would show
function app.abort_setup()
  ngx.shared.budget:delete("abort")
  assert(opts.abort.budget:withdraw(50))
  ngx.say("tokens=", opts.abort.budget:tokens())
end

return app
