-- backoff: retry backoff strategies (C core) and a retry runner.
--
-- The objects and constructors come from the C module backoff.core.
-- This file adds what must be Lua so that it can yield: backoff.retry
-- calls fn and sleep from Lua, never through a C function, so both may
-- yield (ngx.sleep, cosockets, a coroutine scheduler) on every Lua,
-- LuaJIT included.

local core = require "backoff.core"

local coroutine, error, getmetatable, pairs, pcall, setmetatable, type =
      coroutine, error, getmetatable, pairs, pcall, setmetatable, type
local huge = math.huge

local M = {
  _VERSION = core._VERSION,
  new = core.new,
  now = core.now,
  strategies = {},
}
for i, name in ipairs(core.strategies) do
  M.strategies[i] = name
  M[name] = core[name]
end

local methods = core.methods
local backoff_mt = core._metatable

local function is_backoff(v)
  return type(v) == "userdata" and getmetatable(v) == backoff_mt
end

-- LuaJIT: b:failure() and b:success() through the FFI (lua/backoff/ffi.lua)
require("backoff.ffi")(core, methods)

local core_now, first_timeout, core_failure, repr =
      core._now, core._first_timeout, core._failure, core._repr

-- pcall that lets fn yield on PUC Lua 5.1 too, where pcall is a C
-- function that cannot be yielded across: fn runs in a coroutine of
-- its own and its yields are passed on to our caller.  Outside any
-- coroutine there is no one to pass them to: the yield is then an
-- error, as it is on the other Luas, and so a failure of fn.
local yieldable_pcall = pcall
if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
  local create, resume, running, status, yield =
        coroutine.create, coroutine.resume, coroutine.running,
        coroutine.status, coroutine.yield
  local function step(co, ok, ...)
    if not ok then return false, (...) end
    if status(co) == "dead" then return true, ... end
    if running() == nil then
      return false, "attempt to yield from outside a coroutine"
    end
    return step(co, resume(co, yield(...)))
  end
  yieldable_pcall = function(f, ...)
    local made, co = pcall(create, f)      -- a Lua function
    if not made then                        -- a C function, a callable
      co = create(function(...) return f(...) end)
    end
    return step(co, resume(co, ...))
  end
end

-- OpenResty's phases (ngx.get_phase()): those where ngx.sleep yields
-- (lua-nginx-module's NGX_HTTP_LUA_CONTEXT_YIELDABLE, and the stream
-- module's preread), and the two where a blocking sleep stalls no
-- request (Kong's rule: nothing is served yet).  In every other phase
-- (set, header_filter, body_filter, log, balancer, exit_worker, ...)
-- there is no way to wait: a positive delay is an error.
local ngx_yield_phases = {
  rewrite = true, server_rewrite = true, access = true, content = true,
  timer = true, ssl_cert = true, ssl_session_fetch = true,
  ssl_client_hello = true, preread = true,
}
local ngx_block_phases = { init = true, init_worker = true }

-- the current nginx phase and ngx, or nil outside nginx
local function ngx_phase()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.get_phase) == "function" then
    return ngx.get_phase(), ngx
  end
  return nil
end

-- the error for a wait in a phase that cannot wait (level 0: it comes
-- from deep in the runner, whose frames would only mislead)
local function phase_error(who, phase, d, advice, level)
  error(("%s: cannot wait %s s in nginx's %s phase: %s"):format(who,
    repr(d), tostring(phase), advice), level == 0 and 0 or level + 1)
end

local function nop() end

local NO_YIELD = "ngx.sleep cannot yield there and a blocking sleep "
  .. "would stall every request of this worker; "

-- backoff.sleep: the blocking sleep, refused in nginx's request phases
-- (it would stall every request of the worker); allowed outside nginx
-- and in init / init_worker
local core_sleep = core.sleep
function M.sleep(seconds)
  if type(seconds) == "number" and seconds > 0 then
    local phase = ngx_phase()
    if phase ~= nil and not ngx_block_phases[phase] then
      phase_error("backoff.sleep", phase, seconds, ngx_yield_phases[phase]
        and "it would block this worker and every request it serves; "
          .. "use ngx.sleep, which yields"
        or NO_YIELD .. "wait in a timer (ngx.timer.at)", 2)
    end
  end
  return core_sleep(seconds)
end

-- The default sleep: ngx.sleep where it can yield, the blocking sleep
-- outside nginx and in init / init_worker.  Elsewhere in nginx there is
-- none: returns one for zero delays only, and the phase (the runner
-- raises for a positive delay before it would call it).
-- ngx.sleep counts in milliseconds and ngx.sleep(0) only yields (and
-- logs a warning without the delayed-events patch): a positive delay
-- under 1 ms sleeps 1 ms, a zero delay sleeps not at all.
local function default_sleep()
  local phase, ngx = ngx_phase()
  if phase == nil or ngx_block_phases[phase] then return core_sleep end
  if ngx_yield_phases[phase] and type(ngx.sleep) == "function" then
    local ngx_sleep = ngx.sleep
    return function(d)
      if d > 0 then return ngx_sleep(d < 0.001 and 0.001 or d) end
    end
  end
  return nop, phase
end

-- fn may be a function or a callable object; v[name] callable
local util = require "backoff.util"
local callable, has_method = util.callable, util.has_method
local budget_cost, budget_problem = util.budget_cost, util.budget_problem

-- ropts keys and the type each must have
local retry_options = {
  sleep = "function", retry_on = "function", on_retry = "function",
  retry_after = "function", budget = "budget", min_attempt_time = "number",
  reference_delays = "boolean", retry_cost = "function",
  on_success = "function", on_giveup = "function", metrics = "metrics",
}

-- A budget needs withdraw, and record (told of every attempt) or the
-- legacy deposit (told of successes); raises at level 4, the caller of
-- the runner.  Checked before fn runs.
local function check_budget(v)
  local why = budget_problem(v)
  if not why then return end
  error("backoff.retry: option 'budget' must be a budget (an object with "
        .. "withdraw, and record or deposit methods; got " .. why .. ")", 4)
end

-- raises at level 3: the caller of backoff.retry (or of b:retry)
local function check_ropts(ropts)
  if type(ropts) ~= "table" then
    error("backoff.retry: argument 'ropts' must be a table (got "
          .. type(ropts) .. ")", 3)
  end
  for k, v in pairs(ropts) do
    local want, got = retry_options[k], type(v)
    if not want then
      error("backoff.retry: unknown option " .. repr(k), 3)
    end
    if want == "budget" then
      check_budget(v)
    elseif want == "metrics" then
      if not has_method(v, "run") then
        error("backoff.retry: option 'metrics' must be a backoff.metrics "
              .. "recorder (an object with a run method, got "
              .. repr(v) .. ")", 3)
      end
    elseif got ~= want then
      error("backoff.retry: option '" .. k .. "' must be a " .. want
            .. " (got " .. got .. ")", 3)
    elseif want == "number" and not (v >= 0 and v < huge) then
      error("backoff.retry: option '" .. k .. "' must be a finite number "
            .. ">= 0 (got " .. repr(v) .. ")", 3)
    end
  end
end

-- What the runner needs to know of a policy object, from its config:
-- false when no time matters (no max_actual_duration), else a table of
-- numbers and booleans (never the clock: a value that refers to its
-- weak key keeps it alive on 5.1 and LuaJIT).  Cached per template.
local facts = setmetatable({}, { __mode = "k" })

-- The last template seen with facts false: one array slot is cheaper to
-- compare than a hash lookup (LuaJIT keeps it out of its loops).  Weak:
-- it keeps nothing alive.
local hot = setmetatable({}, { __mode = "v" })

local function facts_of(b)
  local c = b:config()
  local f = false
  -- (google and cenkalti have max_elapsed_time instead, under their own
  -- rules: their objects stop by themselves, as their references do)
  local duration = c.max_actual_duration or 0
  if duration > 0 then
    f = { duration = duration, start = c.start,
          timeouts = b:timeout() ~= nil,
          min_adjust_timeout = c.min_adjust_timeout,
          -- the initial timeout is a draw of its random function: taken
          -- once, from the run's own object, built at the start
          eager = c.random ~= nil }
  end
  return f
end

-- The end of a run, for ropts.metrics, on_success and on_giveup
-- (metrics first: a hook that raises must not lose the count).
-- attempts: attempts made; hints: the retries that waited for a hint.
local function succeeded(ropts, attempts, hints, t0, b)
  local m = ropts.metrics
  if m then m:run(true, attempts, nil, hints) end
  local f = ropts.on_success
  if f then
    -- a clock that went back: no time passed (as b:elapsed counts it)
    local elapsed = core_now(b) - t0
    if elapsed < 0 then elapsed = 0 end
    f(attempts, elapsed)
  end
end

local function gave_up(ropts, err, reason, attempts, hints)
  local m = ropts.metrics
  if m then m:run(false, attempts, reason, hints) end
  local f = ropts.on_giveup
  if f then f(err, reason, attempts) end
end

-- the results of a run with hooks (st.finish): a success (r1 truthy) or
-- a give-up (nil, err, reason), passed on
local function finish(st, r1, ...)
  if r1 then
    succeeded(st.ropts, st.attempt, st.hints, st.t0, st.b)
  else
    local err, reason = ...
    gave_up(st.ropts, err, reason, st.attempt, st.hints)
  end
  return r1, ...
end

-- retry_on's second result, when it said no: the reason to give up with
local function stop_reason(why)
  if why == nil or why == false then return "retry_on" end
  if type(why) ~= "string" or #why > 64 or not why:match("^[%a_][%w_]*$")
  then
    error("backoff.retry: ropts.retry_on's second result must be nil or "
          .. "a reason (a name of letters, digits and _, at most 64 "
          .. "bytes; got " .. repr(why) .. ")", 0)
  end
  return why
end

-- After the first failure, one run's state lives in a table st:
--   b: the run's object; fn, ropts; attempt: the attempt just made;
--   timeout: the one it was given; deadline (or nil), min_attempt;
--   sleep, bud, cost: the sleep and the budget (or nil) and its cost;
--   record: the budget is told of every attempt (bud:record), else of
--   successes (the legacy bud:deposit); retry_cost: ropts.retry_cost;
--   paid: what the last withdrawal was asked (nil: the budget's cost);
--   throttle: bud:throttle_cost(), the cost of a retry after a hint.
--   no_sleep: the nginx phase where no sleep is possible (or nil);
--   finish: hooks or metrics to call at the end; t0, hints for them.
local after_retry

-- Record st's failure err and make the next attempt, or give up.
local function next_attempt(st, err)
  local ropts, attempt, b, bud = st.ropts, st.attempt, st.b, st.bud
  if ropts ~= nil then
    local retry_on = ropts.retry_on
    if retry_on then
      local yes, why = retry_on(err, attempt)
      if not yes then                  -- not the upstream's failure
        return nil, err, stop_reason(why)
      end
    end
  end
  -- the budget learns of the failure before it is asked for a retry
  if st.record then bud:record(false, attempt, st.paid) end
  local hint = st.retry_after and st.retry_after(err, attempt) or nil
  if hint ~= nil and not (type(hint) == "number" and hint >= 0
                          and hint < huge) then
    error("backoff.retry: ropts.retry_after must return nil or a finite "
          .. "number >= 0 (got " .. repr(hint) .. ")", 0)
  end
  local now = core_now(b)
  local delay, t, own = core_failure(b, now, hint)
  if delay == nil then return nil, err, t end
  if own > delay and not st.reference then delay = own end
  if st.no_sleep and delay > 0 then     -- before anything is paid for
    phase_error("backoff.retry", st.no_sleep, delay, NO_YIELD
      .. "pass ropts.sleep, or retry from a timer (ngx.timer.at)", 0)
  end
  local deadline, min_attempt = st.deadline, st.min_attempt
  if deadline then
    local left = deadline - now - delay
    if left <= 0 or left < min_attempt then
      return nil, err, "max_actual_duration"
    end
  end
  -- st.cost nil: the budget's own cost (nil counts as no argument)
  local cost = st.cost
  if st.retry_cost then
    cost = st.retry_cost(err, attempt)
    if cost ~= nil and not (type(cost) == "number" and cost >= 0
                            and cost <= 2 ^ 53 and cost % 1 == 0) then
      error("backoff.retry: ropts.retry_cost must return nil or an integer "
            .. ">= 0 and <= 2^53 (got " .. repr(cost) .. ")", 0)
    end
  elseif hint ~= nil and st.throttle then
    cost = st.throttle    -- the server said when to come back: overloaded
  end
  if bud and not bud:withdraw(cost) then return nil, err, "budget" end
  st.paid = cost
  if st.on_retry then st.on_retry(err, delay, attempt) end
  if hint and st.finish then st.hints = st.hints + 1 end
  st.sleep(delay)
  local timeout = st.timeout
  if t ~= nil then timeout = t end
  if deadline then                  -- sleeps overshoot: look again
    local left = deadline - core_now(b)
    if left <= 0 or left < min_attempt then
      -- the retry paid for is not made: give back what withdraw took
      if bud and bud.deposit then bud:deposit(cost or st.cost) end
      return nil, err, "max_actual_duration"
    end
    if timeout ~= nil and timeout > left then timeout = left end
  end
  attempt = attempt + 1
  st.attempt, st.timeout = attempt, timeout
  return after_retry(st, yieldable_pcall(st.fn, attempt, timeout))
end

-- the results of a retry: passed on, or the next attempt
after_retry = function(st, ok, r1, ...)
  if ok and r1 then
    local bud = st.bud
    if st.record then bud:record(true, st.attempt, st.paid)
    elseif bud then bud:deposit(st.paid or st.cost) end
    return r1, ...
  end
  local err = r1
  if ok then err = ... end
  return next_attempt(st, err)
end

-- The first attempt failed with err: set up the run's state.  b is the
-- run's own object, or nil: then the template policy is cloned here,
-- started at t0 (the time of the first attempt).  f: facts_of(policy).
local function first_failure(policy, b, f, t0, fn, ropts, timeout, err)
  if b == nil then b = policy:clone(t0) end
  local st = { b = b, fn = fn, ropts = ropts, attempt = 1,
               timeout = timeout, min_attempt = 0 }
  local mat
  if ropts ~= nil then
    st.on_retry, st.retry_after = ropts.on_retry, ropts.retry_after
    st.reference, mat = ropts.reference_delays, ropts.min_attempt_time
    local bud = ropts.budget
    if bud ~= nil then
      st.bud, st.cost, st.retry_cost = bud, budget_cost(bud), ropts.retry_cost
      st.record = bud.record ~= nil
      if bud.throttle_cost then st.throttle = bud:throttle_cost() end
    end
    st.sleep = ropts.sleep
  end
  if not st.sleep then st.sleep, st.no_sleep = default_sleep() end
  if f then
    st.deadline = (f.start or t0) + f.duration
    if mat == nil and f.timeouts then mat = f.min_adjust_timeout end
    st.min_attempt = mat or 0
  end
  if ropts ~= nil and (ropts.metrics or ropts.on_success
                       or ropts.on_giveup) then
    st.finish, st.t0, st.hints = true, t0, 0
    return finish(st, next_attempt(st, err))
  end
  return next_attempt(st, err)
end

-- the results of the first attempt: passed on, or the retries
local function after_first(policy, b, f, t0, fn, ropts, timeout, ok, r1, ...)
  if ok and r1 then
    if ropts ~= nil then
      local bud = ropts.budget
      if bud ~= nil then
        if bud.record then bud:record(true, 1) else bud:deposit() end
      end
      if ropts.metrics or ropts.on_success then
        succeeded(ropts, 1, 0, t0, b or policy)
      end
    end
    return r1, ...
  end
  local err = r1
  if ok then err = ... end
  return first_failure(policy, b, f, t0, fn, ropts, timeout, err)
end

local function fn_error(fn, level)
  error("backoff.retry: argument 'fn' must be a function (got "
        .. type(fn) .. ")", level + 1)
end

-- levels the runner's frames lost to tail calls add on PUC 5.1
local TAIL = (_VERSION == "Lua 5.1" and not rawget(_G, "jit")) and 1 or 0

-- The fast path's results: a policy object without a deadline and no
-- ropts.  fn is checked only here, when the attempt failed (a value
-- that cannot be called fails); after_plain replaced the runner's frame
-- by a tail call, so level 2 is the runner's caller.
local function after_plain(policy, fn, ok, r1, ...)
  if ok and r1 then return r1, ... end
  if not ok and not callable(fn) then fn_error(fn, 2 + TAIL) end
  local err = r1
  if ok then err = ... end
  return first_failure(policy, nil, false, nil, fn, nil, nil, err)
end

-- Everything about the arguments that the fast path does not settle:
-- raises at level 3 (the caller of the runner), else returns the facts
-- of the policy and, for an options table, the run's object built now.
local function setup(method, policy, fn)
  local obj = is_backoff(policy)
  if method and not obj then
    error("bad argument #1 to 'retry' (backoff.Backoff expected, got "
          .. type(policy) .. ")", 3)
  end
  if not callable(fn) then fn_error(fn, 3) end
  if obj then
    local f = facts_of(policy)
    facts[policy] = f
    return f
  end
  if type(policy) ~= "table" then
    error("backoff.retry: argument 'policy' must be a backoff object or "
          .. "an options table (got " .. type(policy) .. ")", 3)
  end
  if type(policy.strategy) ~= "string" then
    error("backoff.retry: policy table needs a 'strategy' field", 3)
  end
  local ok, b = pcall(core.new, policy.strategy, policy)
  if not ok then error(b, 3) end
  return facts_of(b), b
end

-- backoff.retry (method = false) and b:retry (method = true).  The
-- first attempt is made at once: nothing is built for a policy object
-- until it fails (see after_first), and its results are passed on.
local function runner(method)
  local function door(policy, fn, ropts)
    if hot[1] == policy and ropts == nil then     -- the common case
      return after_plain(policy, fn, yieldable_pcall(fn, 1))
    end
    local f = facts[policy]
    if f == false then
      hot[1] = policy
      if ropts == nil then
        return after_plain(policy, fn, yieldable_pcall(fn, 1))
      end
    end
    local b
    if f == nil or type(fn) ~= "function" then
      f, b = setup(method, policy, fn)
    end
    if ropts ~= nil then check_ropts(ropts) end
    if not f then       -- no deadline: no clock read, unless on_success
      local t0                          -- needs the time taken
      if ropts ~= nil and ropts.on_success then t0 = core_now(b or policy) end
      return after_first(policy, b, f, t0, fn, ropts, nil,
                         yieldable_pcall(fn, 1))
    end
    local timeout
    local now = core_now(b or policy)
    local t0 = now                    -- the run's start
    if not b and f.eager and f.timeouts then b = policy:clone(now) end
    if b then
      t0 = now - b:elapsed(now)
      timeout = b:timeout()
    elseif f.timeouts then
      timeout = first_timeout(policy)
    end
    local left = (f.start or t0) + f.duration - now
    if left <= 0 then
      if ropts ~= nil then gave_up(ropts, nil, "max_actual_duration", 0, 0) end
      return nil, nil, "max_actual_duration"
    end
    if timeout ~= nil and timeout > left then timeout = left end
    return after_first(policy, b, f, t0, fn, ropts, timeout,
                       yieldable_pcall(fn, 1, timeout))
  end
  if not rawget(_G, "jit") then return door end
  -- LuaJIT: what user code calls is vararg (`...`, unused), so that no
  -- trace starts at its entry (CONTRIBUTING.md, "The JIT and the
  -- doors"); it takes the common case, door the rest
  return function(policy, fn, ropts, ...) -- luacheck: ignore 212
    if hot[1] == policy and ropts == nil then
      return after_plain(policy, fn, yieldable_pcall(fn, 1))
    end
    return door(policy, fn, ropts)
  end
end

--- Run fn(attempt, timeout) until it succeeds or gives up.
-- Success: a truthy first result; all results are returned.
-- Failure: nil/false (error as the second value) or a raised error.
-- Giving up: nil, last_error, reason ("max_attempts",
-- "max_actual_duration", "retry_after", "retry_on" or "budget").
M.retry = runner(false)
methods.retry = runner(true)

-- ropts checked as backoff.retry checks them (for backoff.http, which
-- passes its caller's runner options on)
function M._check_ropts(ropts) check_ropts(ropts) end

-- fleet safety (API.md section 9): retry budgets, in-process or shared
-- by nginx workers, and the balancer_by_lua helper
M.budget = require "backoff.budget"
M.balancer = require "backoff.balancer"
-- the server's hint: HTTP Retry-After -> seconds (RFC 9110 10.2.3)
M.retry_after = require "backoff.retry_after"

return M
