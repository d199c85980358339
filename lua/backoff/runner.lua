-- backoff.runner: the door of backoff.retry, b:retry and backoff.wrap
-- (internal: the face, lua/backoff.lua, exports them).
--
-- The door makes the attempts and waits; lua/backoff/engine.lua
-- decides.  It is Lua, not C, and calls fn and the sleep directly,
-- never through a C function, so both may yield (ngx.sleep, cosockets,
-- a coroutine scheduler) on every Lua, LuaJIT included.
--
-- fn is called unprotected: an error it raises is a bug, not an
-- outage, and reaches the caller as it was raised, its traceback whole.
-- With ropts.retry_raised it is a failure like nil, err, and its err
-- carries the traceback (a string error gets it appended).

local engine = require "backoff.engine"
local setup = require "backoff.setup"
local util = require "backoff.util"
local check = require "backoff.check"

local rawget, select, setmetatable, type, unpack =
      rawget, select, setmetatable, type, table.unpack or unpack
local is_backoff, callable, raise = util.is_backoff, util.callable, check.raise

local WHO = "backoff.retry"
local USAGE = "; usage: backoff.retry(policy, fn [, ropts])"
local DOOR = { who = WHO, waits = true }
local check_ropts = check.validator(WHO, setup.RULES)

local call, protect = setup.call, setup.protect
local first_success = engine.first_success

------------------------------------------------------------------------
-- after the first failure: the engine decides, the door waits

local after

-- the current attempt failed with err: the next one, or give up
local function failed(run, fn, err)
  local attempt, timeout = run:retry(err)
  if attempt == nil then return nil, err, timeout end
  return after(run, fn, call(run, fn, attempt, timeout))
end

-- the results of an attempt: passed on, or the next attempt
after = function(run, fn, r1, ...)
  if r1 then
    run:succeeded(r1)
    return r1, ...
  end
  return failed(run, fn, (...))
end

local resume = engine.resume

------------------------------------------------------------------------
-- the first attempt: nothing is built until it fails

-- the fast path's results: a bounded template without a deadline, and
-- no ropts
local function after_plain(policy, fn, r1, ...)
  if r1 then return r1, ... end
  return failed(resume(DOOR, policy, setup.facts(policy)), fn, (...))
end

-- Everything about the arguments that the fast path does not settle:
-- the policy first (backoff.retry(fn) forgot it), then fn and ropts.
-- `as`: the function the caller called, for the messages (RETRY, or
-- WRAP: backoff.wrap checks its arguments as backoff.retry would, in
-- its own name)
local RETRY = { who = WHO, usage = USAGE, ropts = check_ropts }
local WRAP = { who = "backoff.wrap",
  usage = "; usage: backoff.wrap(policy, fn [, ropts])",
  ropts = check.validator("backoff.wrap", setup.RULES) }

local function arguments(method, policy, fn, ropts, as)
  as = as or RETRY
  if method and not is_backoff(policy) then    -- a bad self, as in C
    raise("bad argument #1 to 'retry' (backoff.Backoff expected, got "
          .. type(policy) .. ")")
  end
  local f, b = setup.policy(as.who, policy, as.usage)
  if not callable(fn) then
    raise(as.who .. ": argument 'fn' must be a function (got "
          .. type(fn) .. ")" .. as.usage)
  end
  ropts = as.ropts(ropts)
  setup.need_stop(as.who, f, ropts)
  return f, b, ropts
end

-- hot[1]: the last template seen bounded and without a deadline (one
-- array slot is cheaper to compare than a hash lookup, and LuaJIT keeps
-- it out of its loops); weak: it keeps nothing alive
local hot = setmetatable({}, { __mode = "v" })

-- the results of the first attempt with ropts that need nothing
-- before it (no deadline, breaker or on_success): nothing is built
-- unless it failed
local function after_light(policy, f, ropts, fn, r1, ...)
  if r1 then
    first_success(ropts, nil, nil, nil, policy, r1)
    return r1, ...
  end
  return failed(resume(DOOR, policy, f, nil, ropts), fn, (...))
end

-- the results of a first attempt that needed its start (a deadline,
-- on_success, a breaker): the run is built only if it failed
local function after_lean(policy, f, b, ropts, t0, timeout, now, ticket,
                          fn, r1, ...)
  if r1 then
    first_success(ropts, ticket, now, t0, b or policy, r1)
    return r1, ...
  end
  return failed(resume(DOOR, policy, f, b, ropts, t0, timeout, now, ticket),
                fn, (...))
end

-- the policy, fn and ropts, checked: the full checks on a first call,
-- the ones that depend on the call alone for a template seen before
local function checked(method, policy, fn, ropts)
  local f = setup.known(policy)
  if f == nil or type(fn) ~= "function" then
    return arguments(method, policy, fn, ropts)
  end
  if ropts ~= nil then ropts = check_ropts(ropts) end
  if not f.bounded then setup.need_stop(WHO, f, ropts) end
  return f, nil, ropts
end

-- the first attempt with its start (a deadline, on_success, a breaker):
-- the breaker's word, the start, and nothing built unless it failed
local function lean(policy, f, b, ropts, fn)
  local t0, timeout, obj, now, ticket = engine.start(DOOR, policy, f, b,
                                                     ropts)
  if not t0 then return nil, obj, timeout end
  return after_lean(policy, f, obj, ropts, t0, timeout, now, ticket, fn,
                    setup.guarded(ropts and ropts.breaker, ticket, fn, 1,
                                  timeout))
end

local function first(method, policy, fn, ropts)
  local f, b
  f, b, ropts = checked(method, policy, fn, ropts)
  if ropts == nil or not ropts.retry_raised then
    if not f.duration and b == nil and
       (ropts == nil or not (ropts.on_success or ropts.breaker)) then
      if ropts == nil then
        if type(fn) == "function" then hot[1] = policy end
        return after_plain(policy, fn, fn(1))
      end
      return after_light(policy, f, ropts, fn, fn(1))
    end
    return lean(policy, f, b, ropts, fn)
  end
  local run, reason, err = engine.run(DOOR, policy, f, b, ropts)
  if not run then return nil, err, reason end
  return after(run, fn, protect(fn, 1, run.timeout))
end

-- backoff.retry (method = false) and b:retry (method = true): the
-- common case, else first().  Under LuaJIT the function user code calls
-- is vararg (`...`, unused), so that no trace ever starts at its entry
-- (CONTRIBUTING.md, "The JIT and the doors"): a trace started there
-- either aborted until the door was blacklisted for the process, or,
-- recorded on a first call, took the caller's loop into its side trace;
-- which of the two a process drew depended on where its bytecode landed
-- in memory.  Lua 5.2-5.4 keep a fixed-arity function (a vararg frame
-- costs about 6% of the call there).
local function runner(method)
  if rawget(_G, "jit") then
    return function(policy, fn, ropts, ...) -- luacheck: ignore 212
      if hot[1] == policy and ropts == nil and type(fn) == "function" then
        return after_plain(policy, fn, fn(1))     -- the common case
      end
      return first(method, policy, fn, ropts)
    end
  end
  return function(policy, fn, ropts)
    if hot[1] == policy and ropts == nil and type(fn) == "function" then
      return after_plain(policy, fn, fn(1))       -- the common case
    end
    return first(method, policy, fn, ropts)
  end
end

local M = { retry = runner(false), method = runner(true) }
local retry = M.retry

--- backoff.wrap(policy, fn [, ropts]) -> a function that runs fn with
-- its own arguments under backoff.retry: the results of fn, or nil,
-- err, reason.  Checked now, as backoff.retry would check them.
function M.wrap(policy, fn, ropts)
  arguments(false, policy, fn, ropts, WRAP)
  return function(...)
    local n, args = select("#", ...), { ... }
    return retry(policy, function() return fn(unpack(args, 1, n)) end,
                 ropts)
  end
end

return M
