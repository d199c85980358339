-- backoff.setup: what every door checks and knows before a run starts
-- (internal).  The options every door takes (ropts) as one table of
-- rules for backoff.check; what a run needs to know of its policy, and
-- the refusal of a policy that never stops; calling the operation,
-- protected when the caller asks for it.  lua/backoff/engine.lua then
-- runs the retries.

local util = require "backoff.util"
local check = require "backoff.check"

local pairs, pcall, rawget, setmetatable, type =
      pairs, pcall, rawget, setmetatable, type
local raise = check.raise

local E = {}

------------------------------------------------------------------------
-- the options every door takes (ropts), checked by one rule table

-- a budget: the rule, and a message that says what was wrong with it
local function budget_rule()
  local r = check.custom("a budget", function(v)
    return not util.budget_problem(v) end)
  r.fail = function(ctor, _, v)
    raise(ctor .. ": option 'budget' must be a budget (an object with "
          .. "withdraw, and record or deposit methods; got "
          .. (type(v) == "function" and check.got(v)
              or util.budget_problem(v)) .. ")")
  end
  return r
end

-- server_hint(err, attempt): a function, and not backoff.retry_after,
-- whose (value, now) would take the attempt number for the time now
local retry_after = require "backoff.retry_after"
local function hint_rule()
  local r = check.fn{}
  local test = r.test
  r.test = function(v) return test(v) and v ~= retry_after end
  r.fail = function(ctor, k, v)
    if v == retry_after then
      raise(("%s: option '%s' must be a function(err, attempt) returning "
        .. "the seconds the server asked for; backoff.retry_after takes "
        .. "(value, now) and would read the attempt number as the time: "
        .. "call it from your own, e.g. function(err) return "
        .. "backoff.retry_after(err.retry_after) end"):format(ctor, k))
    end
  end
  return r
end

-- the runner's options; a door adds its own (check.options merges).
-- retry_after is server_hint's first name, and API.md's (section 9):
-- both stay

E.RULES = {
  sleep = check.fn{}, retry_on = check.fn{},
  server_hint = hint_rule(), retry_after = hint_rule(),
  on_retry = check.fn{}, on_success = check.fn{}, on_giveup = check.fn{},
  retry_cost = check.fn{},
  budget = budget_rule(),
  breaker = check.custom("a backoff.breaker (an object with allows, "
    .. "allow, record and release methods)", function(v)
      return util.has_method(v, "allow") and util.has_method(v, "allows")
        and util.has_method(v, "record") and util.has_method(v, "release")
    end),
  metrics = check.custom("a backoff.metrics recorder (an object with a run "
    .. "method)", function(v) return util.has_method(v, "run") end),
  min_attempt_time = check.number{ min = 0 },
  max_hint = check.number{ min = 0 },
  reference_delays = check.boolean(),
  unlimited = check.boolean(),
  retry_raised = check.boolean(),
}

-- `timeouts`: per-side factors (util.sides), for the doors that hand
-- timeouts to a client (backoff.http, backoff.balancer)
function E.timeouts_rule()
  local r = check.custom("a table of factors", function(v)
    return not util.factors_problem(v) end)
  r.fail = function(ctor, k, v)
    raise(("%s: option '%s' %s"):format(ctor, k, util.factors_problem(v)))
  end
  return r
end

-- the rules of a door: E.RULES and its own
function E.rules(own)
  local t = {}
  for k, r in pairs(E.RULES) do t[k] = r end
  for k, r in pairs(own or {}) do t[k] = r end
  return t
end

------------------------------------------------------------------------
-- what a run needs to know of its policy

-- The options that stop an object by itself (the systems' included):
-- a policy with none of them retries for ever.
local function bounded(c)
  return (c.max_attempts or 0) > 0 or (c.max_actual_duration or 0) > 0
    or (c.max_elapsed_time or 0) > 0
    or (c.max_tries or -1) >= 0 or c.max_retry_attempts ~= nil
end

-- From a template's config: bounded, and false when no time matters
-- (no max_actual_duration), else the deadline's numbers (never the
-- clock: a value that refers to its weak key keeps it alive on 5.1 and
-- LuaJIT).  Cached per template: config() builds a table.
local facts_cache = setmetatable({}, { __mode = "k" })

local function facts_of(b)
  local c = b:config()
  local f = { bounded = bounded(c), max_attempts = c.max_attempts or 0 }
  local duration = c.max_actual_duration or 0
  if duration > 0 then
    f.duration, f.start = duration, c.start
    f.timeouts = b:timeout() ~= nil
    f.min_adjust_timeout = c.min_adjust_timeout
    -- the initial timeout is a draw of its random function: taken once,
    -- from the run's own object, built at the start
    f.eager = c.random ~= nil
  end
  return f
end

--- E.facts(policy) -> the facts of a template (cached)
function E.facts(policy)
  local f = facts_cache[policy]
  if f == nil then
    f = facts_of(policy)
    facts_cache[policy] = f
  end
  return f
end
E.facts_of = facts_of

--- E.known(policy) -> the facts of a template seen before, or nil (no
-- work: for a door's path of the calls after the first)
function E.known(policy)
  return facts_cache[policy]
end

--- E.bad_policy(who, v [, tables [, usage]]): raises the one message for
-- a policy that is none, naming the function the caller called (who):
-- "<who>: argument 'policy' must be a backoff object[ or an options
-- table] (got <type>)<usage>"
function E.bad_policy(who, v, tables, usage)
  raise(("%s: argument 'policy' must be a backoff object%s (got %s)%s")
    :format(who, tables and " or an options table" or "",
            check.got(v, true), usage or ""))
end

--- E.policy(who, policy [, usage]) -> f [, b]: the facts of a backoff
-- object, or of an options table with a `strategy` field and the object
-- built from it now; raises at the caller for anything else (with the
-- door's usage line)
function E.policy(who, policy, usage)
  if util.is_backoff(policy) then return E.facts(policy) end
  if type(policy) ~= "table" then E.bad_policy(who, policy, true, usage) end
  if type(rawget(policy, "strategy")) ~= "string" then
    raise(who .. ": policy table needs a 'strategy' field")
  end
  local ok, b = pcall(util.new, policy.strategy, policy)
  if not ok then raise(b) end
  return facts_of(b), b
end

--- E.need_stop(who, f, ropts): a policy that never gives up is refused
-- unless ropts.unlimited says so
function E.need_stop(who, f, ropts)
  if f.bounded or (ropts and ropts.unlimited) then return end
  raise(who .. ": the policy has no stop condition (max_attempts, "
    .. "max_actual_duration, or its system's own limit), so it would retry "
    .. "for ever; give it one, or pass unlimited = true")
end

------------------------------------------------------------------------
-- Calling the operation protected, yields allowed:
--   E.tpcall(fn, ...) -> true, ... | false, err: err carries the
--     traceback (a string error gets it appended; another value is
--     passed on as it is);
--   E.ypcall(fn, ...): the same, err as it was raised (for a door that
--     only cleans up and raises it again).

local traceback = debug.traceback

local function traced(e)
  if type(e) == "string" then return traceback(e, 2) end
  return e
end

if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
  -- PUC 5.1's pcall cannot be yielded across: fn runs in a coroutine of
  -- its own and its yields are passed on to our caller.  Outside any
  -- coroutine there is no one to pass them to: the yield is then an
  -- error, as it is on the other Luas.
  local create, resume, running, status, yield =
        coroutine.create, coroutine.resume, coroutine.running,
        coroutine.status, coroutine.yield
  local function step(co, trace, ok, ...)
    if not ok then
      local e = ...
      if trace and type(e) == "string" then e = traceback(co, e) end
      return false, e
    end
    if status(co) == "dead" then return true, ... end
    if running() == nil then
      return false, "attempt to yield from outside a coroutine"
    end
    return step(co, trace, resume(co, yield(...)))
  end
  function E.tpcall(fn, ...)
    local co = create(function(...) return fn(...) end)
    return step(co, true, resume(co, ...))
  end
  function E.ypcall(fn, ...)
    local co = create(function(...) return fn(...) end)
    return step(co, false, resume(co, ...))
  end
else
  local xpcall = xpcall
  function E.tpcall(fn, ...) return xpcall(fn, traced, ...) end
  E.ypcall = pcall
end

-- a raised error as a failure: nil, err
local function results(ok, ...)
  if ok then return ... end
  return nil, (...)
end

--- E.protect(fn, ...): fn's results, or nil, err (with the traceback)
-- when it raised
function E.protect(fn, ...)
  return results(E.tpcall(fn, ...))
end

-- What every door does when the operation raises (and retry_raised
-- is not set): the run ends there, nothing is counted (it is no answer
-- of the upstream's: no failure for the breaker or the budget, no
-- give-up in the metrics), a half-open breaker's probe ticket is given
-- back (or its slot would stay taken until probe_timeout), and the
-- error goes on to the caller as it came.  Only a probe is protected:
-- the common attempt runs as a plain call.
local function given_back(br, ticket, ok, ...)
  if ok then return ... end
  br:release(ticket)
  error((...), 0)
end

--- E.guarded(br, ticket, fn, ...): fn's results; if fn raises while
-- ticket is a half-open probe's (a table), the ticket is given back
-- first
function E.guarded(br, ticket, fn, ...)
  if type(ticket) ~= "table" then return fn(...) end
  return given_back(br, ticket, E.ypcall(fn, ...))
end

--- E.call(run, fn, ...): the attempt of a run (lua/backoff/engine.lua),
-- protected with retry_raised, or guarded while it holds a probe
function E.call(run, fn, ...)
  local ropts = run.ropts
  if ropts ~= nil and ropts.retry_raised then return E.protect(fn, ...) end
  local ticket = run.ticket
  if type(ticket) == "table" then
    return given_back(ropts.breaker, ticket, E.ypcall(fn, ...))
  end
  return fn(...)
end

return E
