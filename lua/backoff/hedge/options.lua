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
local pace_mod = require "backoff.hedge.pace"

local getmetatable, rawget, setmetatable, tostring, type =
      getmetatable, rawget, setmetatable, tostring, type
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

-- peers: a list of peers (any values) or a function(attempt, tried)
local peers_rule = check.custom("a non-empty list of peers, or a "
  .. "function(attempt, tried) returning the peer of copy 'attempt'",
  function(v)
    if util.callable(v) then return true end
    if type(v) ~= "table" or v[1] == nil then return false end
    for k in pairs(v) do
      if type(k) ~= "number" or k ~= math.floor(k) or k < 1 or k > #v then
        return false
      end
    end
    return true
  end)

-- pace: a hedge.pace, or false (no pacing, said on purpose)
local pace_rule = check.custom("a hedge.pace object, or false for no "
  .. "pacing", function(v)
    return v == false or getmetatable(v) == pace_mod.metatable
  end)

-- pushback: the name of a response header, or false to read none
local pushback_rule = check.custom("a header name, or false to read none",
  function(v)
    return v == false or type(v) == "string"
      and v:match("^[%w!#$%%&'*+.^_`|~-]+$") ~= nil
  end)

-- backoff.http's options and those of the runner's that a hedge uses
-- (it does not sleep between copies: no sleep; it bounds its copies by
-- max_attempts: no unlimited)
local own = { delay = delay_rule, budget = budget_rule,
              on_hedge = check.fn{ callable = true }, peers = peers_rule,
              pace = pace_rule, pushback = pushback_rule }
for k, r in pairs(rules.OPTIONS) do own[k] = r end
for _, k in ipairs { "breaker", "metrics", "max_hint", "min_attempt_time",
                     "retry_cost", "on_giveup", "on_success" } do
  own[k] = setup.RULES[k]
end
local check_opts = check.validator(WHO, own)

local DEFAULT_MAX_HINT = 60
local DEFAULT_PUSHBACK = "hedge-pushback-ms"
M.MAX_COPIES = 5                  -- gRFC A6's cap on max_attempts

-- the default pace: one per worker and budget (the policy when budget =
-- false), at the budget's percent when it has one
local paces = setmetatable({}, { __mode = "k" })

local function default_pace(opts, policy)
  local owner = opts.budget or policy
  local p = paces[owner]
  if p then return p end
  local percent = 10
  local bud = opts.budget
  if bud and util.has_method(bud, "percent") then
    local ok, v = pcall(bud.percent, bud)
    if ok and type(v) == "number" and v >= 0 and v <= 100 then
      percent = v
    end
  end
  p = pace_mod.new { percent = percent, shared = false }
  if type(owner) == "table" or type(owner) == "userdata" then
    paces[owner] = p
  end
  return p
end

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

--- options.compile(opts, f, policy) -> o: the checked options, with idem
-- (may a copy be sent while another is in flight), statuses, estimator,
-- max_hint, peers, pushback, pace; `opts` itself is what the engine
-- reads as ropts; f, the policy's facts, bounds the delay (its
-- deadline); the policy owns the default pace when there is no budget
function M.compile(opts, f, policy)
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
              max_hint = opts.max_hint or DEFAULT_MAX_HINT,
              peers = opts.peers }
  local pb = opts.pushback
  if pb == nil then pb = DEFAULT_PUSHBACK end
  o.pushback = pb or nil
  if idem then
    local pace = opts.pace
    if pace == nil then pace = default_pace(opts, policy) end
    o.pace = pace or nil
  end
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
  if f.max_attempts > M.MAX_COPIES then
    raise(("%s: the policy's max_attempts must be <= %d for hedging (got "
      .. "%d): gRFC A6 caps a hedged request at %d copies, more only "
      .. "adds load"):format(WHO, M.MAX_COPIES, f.max_attempts,
      M.MAX_COPIES, M.MAX_COPIES))
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

--- options.threads() -> ngx, phase; or raises naming why hedging
-- cannot run
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
  return ngx, p
end

return M
