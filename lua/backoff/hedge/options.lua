-- backoff.hedge.options: backoff.hedge.request's options, its policy
-- and where it may run, checked before anything is sent (internal: the
-- door's).  The options are backoff.http's (lua/backoff/http/rules.lua)
-- and a few of the runner's, checked by the one checker, whose errors
-- point at the caller's line.

local check = require "backoff.check"
local setup = require "backoff.setup"
local phase = require "backoff.phase"
local util = require "backoff.util"
local rules = require "backoff.http.rules"

local rawget, tostring, type = rawget, tostring, type
local raise, has_method = check.raise, util.has_method

local M = {}

local WHO = "backoff.hedge.request"
local USAGE = "; usage: backoff.hedge.request(policy, do_request, opts)"
M.WHO, M.USAGE = WHO, USAGE

------------------------------------------------------------------------
-- options

-- budget: a budget, or false to hedge without one (said on purpose)
local budget_rule = check.custom("a retry budget (an object with "
  .. "withdraw, and record or deposit methods), or false to hedge "
  .. "without one", function(v)
    return v == false or not util.budget_problem(v)
  end)

-- delay: seconds, or an estimator (hedge.latency)
local delay_rule = check.custom("a number of seconds >= 0 or a "
  .. "hedge.latency estimator (an object with delay and observe methods)",
  function(v)
    if type(v) == "number" then return v >= 0 and v < 2 ^ 31 end
    return has_method(v, "delay") and has_method(v, "observe")
  end)

-- backoff.http's options and those of the runner's that a hedge uses
-- (it does not sleep between copies: no sleep; it bounds its copies by
-- max_attempts: no unlimited)
local own = { delay = delay_rule, budget = budget_rule,
              on_hedge = check.fn{ callable = true } }
for k, r in pairs(rules.OPTIONS) do own[k] = r end
for _, k in ipairs { "breaker", "metrics", "max_hint", "min_attempt_time",
                     "retry_cost", "on_giveup", "on_success" } do
  own[k] = setup.RULES[k]
end
local check_opts = check.validator(WHO, own)

local DEFAULT_MAX_HINT = 60

-- A hedge is a second copy while the first is slow: a delay not below
-- the policy's deadline would never send one (50 for 50 ms turned
-- hedging off, silently), and without a deadline a delay above a
-- minute is no hedge either.  An estimator's min_delay is held to the
-- same bound.
local LONGEST = 60
local function delay_units(f, opts)
  local v, what = opts.delay, "option 'delay'"
  if type(v) ~= "number" then
    v = type(v) == "table" and rawget(v, "min_delay")
    if type(v) ~= "number" then return end
    what = "the estimator's min_delay (option 'delay')"
  end
  local most = f and f.duration
  if most and v >= most then
    raise(("%s: %s is %g s, not below the policy's deadline "
      .. "(max_actual_duration %g s): no copy would ever be sent; times "
      .. "are seconds (%g for %g ms)"):format(WHO, what, v, most,
      v / 1000, v))
  elseif not most and v > LONGEST then
    raise(("%s: %s is %g s: a hedge waits at most %d s; times are "
      .. "seconds (%g for %g ms)"):format(WHO, what, v, LONGEST,
      v / 1000, v))
  end
end

--- options.compile(opts [, f]) -> o: the checked options, with idem (may
-- a copy be sent while another is in flight), statuses, estimator,
-- max_hint; `opts` itself is what the engine reads as ropts; f, the
-- policy's facts, bounds the delay (its deadline)
function M.compile(opts, f)
  if type(opts) ~= "table" then
    raise(("%s: options must be a table (got %s): method, delay and "
           .. "budget are required"):format(WHO, type(opts)))
  end
  opts = check_opts(opts)
  for _, k in ipairs { "delay", "budget" } do
    if rawget(opts, k) == nil then
      check.fail(WHO, k, own[k].text .. " (required)", nil)
    end
  end
  delay_units(f, opts)
  local idem, statuses = rules.settings(WHO, opts)
  local o = { ropts = opts, idem = idem, statuses = statuses,
              timeouts = opts.timeouts, on_hedge = opts.on_hedge,
              max_hint = opts.max_hint or DEFAULT_MAX_HINT }
  if type(opts.delay) == "number" then
    o.delay = opts.delay
  else
    o.estimator = opts.delay
  end
  return o
end

--- options.policy(policy) -> f, b: the facts of the policy (setup's),
-- which must bound the copies with max_attempts
function M.policy(policy)
  local f, b = setup.policy(WHO, policy, USAGE)
  if f.max_attempts <= 0 then
    raise(WHO .. ": the policy needs max_attempts (the most copies of a "
          .. "request, the first included)")
  end
  return f, b
end

------------------------------------------------------------------------
-- where light threads exist

-- lua-nginx-module's NGX_HTTP_LUA_CONTEXT_YIELDABLE (where
-- ngx.thread.spawn runs), and the stream module's preread
local function can_spawn(p)
  return phase.YIELD[p] or p == "precontent"
end

--- options.threads() -> ngx, or raises naming why hedging cannot run
function M.threads()
  local p, ngx = phase.current()
  if p == nil or type(ngx.thread) ~= "table" then
    raise(WHO .. ": needs nginx's light threads (ngx.thread.spawn), and "
          .. "this is not nginx; backoff.http.request retries without "
          .. "them")
  end
  if not can_spawn(p) then
    raise(("%s: cannot hedge in nginx's %s phase: light threads "
      .. "(ngx.thread.spawn) run only in rewrite, access, content, "
      .. "ngx.timer and ssl_* code; hedge there, or from a timer "
      .. "(ngx.timer.at)"):format(WHO, tostring(p)))
  end
  return ngx
end

return M
