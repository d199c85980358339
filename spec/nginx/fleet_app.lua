-- The OpenResty side of the fleet-safety test (spec/nginx/fleet.lua):
-- a retry budget shared by two workers, Retry-After hints obeyed by the
-- runner, and the balancer helper under proxy_next_upstream.
local backoff = require "backoff"
local budget = require "backoff.budget"
local balancer = require "backoff.balancer"

local app = {}
local policies = {}
local budgets = {}

-- init_by_lua, in the master before the fork: the policies (templates,
-- cloned per request) and the budgets (their tokens are in the dict)
function app.init()
  -- alternate peers; 4 tries at most, within 1.6 s
  policies.limits = backoff.retry_timeouts { max_actual_duration = 1.6,
    max_attempts = 4, min_adjust_timeout = 0.05, jitter_factor = 0,
    timeout_jitter_factor = 0 }
  -- a hanging peer only: tries until 1 s is over (max_attempts: the
  -- balancer needs one, as it cannot space tries out)
  policies.deadline = backoff.retry_timeouts { max_actual_duration = 1,
    max_attempts = 19, min_adjust_timeout = 0.05, jitter_factor = 0,
    timeout_jitter_factor = 0 }
  budgets.retry = budget { shared = ngx.shared.budget, key = "retry",
    capacity = 20, cost = 5, refund = 1 }
  budgets.proxy = budget { shared = ngx.shared.budget, key = "proxy",
    capacity = 10, cost = 5, refund = 1 }
  budgets.race = budget { shared = ngx.shared.budget, key = "race",
    capacity = 300, cost = 1, refund = 1 }
end

function app.reset()
  ngx.shared.budget:flush_all()
  ngx.shared.stats:flush_all()
  ngx.say("ok")
end

-- ?want=W: only worker W acts; another answers "skipped" (the test
-- repeats the request until W gets it)
local function not_me()
  local want = tonumber(ngx.var.arg_want)
  if want and want ~= ngx.worker.id() then
    ngx.say("worker=", ngx.worker.id(), " skipped=1")
    return true
  end
end

-- withdraw from the retry budget until it refuses
function app.drain()
  if not_me() then return end
  local took = 0
  while budgets.retry:withdraw() do took = took + 1 end
  ngx.say("worker=", ngx.worker.id(), " took=", took)
end

-- a call whose every attempt fails, retried while the budget pays (at
-- most 10 attempts): with tokens it retries, with none it does not
function app.call()
  if not_me() then return end
  local attempts = 1
  while attempts < 10 and budgets.retry:withdraw() do
    attempts = attempts + 1
  end
  ngx.say("worker=", ngx.worker.id(), " attempts=", attempts,
          " tokens=", budgets.retry:tokens())
end

-- n withdrawals of 1 token, a deposit of 1 every third step, yielding
-- between steps so that requests interleave in a worker as well as
-- across the two; the counts go to the stats dict
function app.churn()
  local n = tonumber(ngx.var.arg_n) or 20
  local stats, bud = ngx.shared.stats, budgets.race
  local took, gave = 0, 0
  for i = 1, n do
    if i % 3 == 0 then
      gave = gave + 1
      stats:incr("deposited", 1, 0)   -- before: it may be spent at once
      bud:deposit(1)
    elseif bud:withdraw() then
      took = took + 1
    end
    ngx.sleep(0.001)   -- yield (sleep(0) warns without a patch)
  end
  stats:incr("withdrawn", took, 0)
  stats:incr("worker" .. ngx.worker.id(), 1, 0)
  ngx.say("took=", took, " gave=", gave)
end

function app.stats()
  local s = ngx.shared.stats
  ngx.say("withdrawn=", s:get("withdrawn") or 0)
  ngx.say("deposited=", s:get("deposited") or 0)
  ngx.say("worker0=", s:get("worker0") or 0)
  ngx.say("worker1=", s:get("worker1") or 0)
  ngx.say("tokens=", budgets.race:tokens())
  ngx.say("raw=", ngx.shared.budget:get(budgets.race:dict_key()))
end

------------------------------------------------------------------------
-- Retry-After

-- an upstream that answers 503 with Retry-After (form "seconds" or
-- "date", value s) the first `fails` times per key, then 200
function app.hint()
  local a = ngx.req.get_uri_args()
  local n = ngx.shared.stats:incr("hint:" .. a.key, 1, 0)
  if n > tonumber(a.fails) then return ngx.say("ok after ", n) end
  ngx.status = 503
  local s = tonumber(a.s)
  if a.form == "date" then
    ngx.header["Retry-After"] = ngx.http_time(ngx.time() + s)
  else
    ngx.header["Retry-After"] = tostring(s)
  end
  ngx.say("busy")
end

-- GET path over a cosocket: body, or nil and the Retry-After value
local function fetch(path, timeout)
  local sock = ngx.socket.tcp()
  sock:settimeout((timeout or 5) * 1000)
  local ok, err = sock:connect("127.0.0.1", tonumber(ngx.var.server_port))
  if not ok then return nil, { err = err } end
  sock:send("GET " .. path .. " HTTP/1.0\r\nHost: localhost\r\n\r\n")
  local all = sock:receive("*a") or ""
  sock:close()
  if all:match("^HTTP/%d%.%d 200") then return "ok" end
  return nil, { retry_after = all:match("\r\nRetry%-After: *([^\r]*)") }
end

-- backoff.retry against /hint, hints parsed by backoff.retry_after
function app.obey()
  local a = ngx.req.get_uri_args()
  -- hints need backoff.retry_after and failure(ts, hint) with max_hint
  local has_parse, parse = pcall(require, "backoff.retry_after")
  local has_hints, policy = pcall(backoff.exponential, {
    initial_delay = 0.01, max_delay = 0.02, max_attempts = 5,
    max_hint = tonumber(a.max_hint),
    max_actual_duration = tonumber(a.duration) })
  local runner_ok, runner_err = pcall(backoff.retry, backoff.constant {
    delay = 0 }, function() return true end, { retry_after = print })
  if not (has_parse and has_hints and runner_ok) then
    local why = not has_parse and parse or not has_hints and policy
                or runner_err
    return ngx.say("skip=", (tostring(why):gsub("%s", "_")))
  end
  local path = ("/hint?key=%s&fails=%s&form=%s&s=%s"):format(a.key,
    a.fails, a.form, a.s)
  local delays = {}
  ngx.update_time()
  local t0 = ngx.now()
  local res, err, reason = backoff.retry(policy, function(_, timeout)
    return fetch(path, timeout)
  end, {
    retry_after = function(e)
      return e and e.retry_after and parse(e.retry_after) or nil
    end,
    on_retry = function(_, d) delays[#delays + 1] = d end,
  })
  ngx.update_time()
  ngx.say("result=", tostring(res))
  ngx.say("reason=", tostring(reason), " ", type(err))
  ngx.say("delays=", table.concat(delays, ","))
  ngx.say("elapsed=", ngx.now() - t0)
end

------------------------------------------------------------------------
-- balancer_by_lua: policy p (limits: peers alternate hang, fail, ...;
-- deadline: the hanging peer only); each try is recorded for the header

local function balancer_opts()
  if ngx.var.arg_budget then return { budget = budgets.proxy } end
end

function app.balance(hang, fail)
  local name = ngx.var.arg_p or "limits"
  local ok, attempt, timeout = balancer(policies[name], balancer_opts())
  if not ok then return end         -- refused: nginx answers 502
  local port = hang
  if name == "limits" and attempt % 2 == 0 then port = fail end
  local ctx = ngx.ctx
  ctx.tries = ctx.tries or {}
  ctx.tries[#ctx.tries + 1] = ("%d:%.4f:%s"):format(attempt, timeout or -1,
    port == hang and "hang" or "fail")
  assert(require("ngx.balancer").set_current_peer("127.0.0.1", port))
end

function app.tries_header()
  ngx.header["X-Tries"] = table.concat(ngx.ctx.tries or {}, ",")
end

function app.proxy_log()
  local opts = balancer_opts()
  if opts then balancer.done(opts) end
end

function app.proxy_tokens()
  ngx.say("tokens=", budgets.proxy:tokens())
end

return app
