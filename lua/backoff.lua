-- backoff: retry backoff strategies (C core) and a retry runner.
--
-- The objects and constructors come from the C module backoff.core.
-- This file adds what must be Lua so that it can yield: backoff.retry
-- calls fn and sleep from Lua, never through a C function, so both may
-- yield (ngx.sleep, cosockets, a coroutine scheduler) on every Lua,
-- LuaJIT included.

local core = require "backoff.core"

local coroutine, error, pcall, select, tostring, type =
      coroutine, error, pcall, select, tostring, type
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local M = {
  _VERSION = core._VERSION,
  new = core.new,
  now = core.now,
  sleep = core.sleep,
  strategies = {},
}
for i, name in ipairs(core.strategies) do
  M.strategies[i] = name
  M[name] = core[name]
end

local methods = core.methods
local backoff_mt = getmetatable(core.constant { delay = 0 })

local function is_backoff(v)
  return type(v) == "userdata" and getmetatable(v) == backoff_mt
end

local function pack(...)
  return { n = select("#", ...), ... }
end

-- Under LuaJIT, b:failure() and b:success() go through the FFI to
-- lbackoff_ffi_step (see csrc/lbackoff.c): the JIT compiles that into a
-- direct call, where calling a Lua C function ends the trace.  Only
-- objects in the module's own weak set are passed; anything the step
-- does not handle (a bad argument, a Lua clock) runs the C method
-- itself, so results and errors are the same either way.  Set
-- BACKOFF_NO_FFI=1 to turn it off.
local function ffi_fast_path()
  if not rawget(_G, "jit") or os.getenv("BACKOFF_NO_FFI") then return end
  local has_ffi, ffi = pcall(require, "ffi")
  local path = has_ffi and package.searchpath
               and package.searchpath("backoff.core", package.cpath)
  if not path then return end
  pcall(ffi.cdef, [[
    int lbackoff_ffi_step(void *ud, int op, double ts, double *out);
    const void *lbackoff_ffi_token(void);
  ]])                           -- fails harmlessly when already declared
  local ok, step = pcall(function()
    local lib = ffi.load(path)
    -- the library loaded must be the one require loaded, not a namesake
    if lib.lbackoff_ffi_token() ~= ffi.cast("const void *", core._ffi_token)
    then return nil end
    return lib.lbackoff_ffi_step
  end)
  if not ok or not step then return end

  local objects, reasons = core._ffi_objects()
  local trust = core._ffi_trust
  if not objects then return end    -- handed out already (a second load)
  local out = ffi.new("double[2]")
  local FAILURE, SUCCESS, NOW = 0, 1, 2

  -- the method op (FAILURE or SUCCESS), falling back to c_method
  local function method(op, c_method)
    return function(self, ts, hint)
      local r = -1
      if hint ~= nil then return c_method(self, ts, hint) end
      -- an object joins the set on its first fast call
      if objects[self] or (objects[self] == nil and trust(self)) then
        if ts == nil then r = step(self, op + NOW, 0, out)
        elseif type(ts) == "number" then r = step(self, op, ts, out) end
      end
      if r == 0 then return out[0] end
      if r == 1 then return out[0], out[1] end
      if r > 1 then return nil, reasons[r] end
      return c_method(self, ts)
    end
  end
  methods.failure = method(FAILURE, methods.failure)
  methods.success = method(SUCCESS, methods.success)
end
ffi_fast_path()

-- pcall that lets fn yield on PUC Lua 5.1 too, where pcall is a C
-- function that cannot be yielded across: fn runs in a coroutine of
-- its own and its yields are passed on to our caller.
local yieldable_pcall = pcall
if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
  yieldable_pcall = function(f, ...)
    local co = coroutine.create(f)
    local r = pack(coroutine.resume(co, ...))
    while true do
      if not r[1] then return false, r[2] end
      if coroutine.status(co) == "dead" then return unpack(r, 1, r.n) end
      r = pack(coroutine.resume(co, coroutine.yield(unpack(r, 2, r.n))))
    end
  end
end

-- ngx.sleep yields, but only in the phases that can yield
local ngx_sleep_phases = {
  rewrite = true, access = true, content = true, timer = true,
  ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true,
  balancer = false,
}

local function default_sleep()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and ngx.sleep and ngx.get_phase
     and ngx_sleep_phases[ngx.get_phase()] then
    return ngx.sleep
  end
  return core.sleep
end

local retry_options = { sleep = true, retry_on = true, on_retry = true }

local function check_ropts(ropts)
  if ropts == nil then return {} end
  if type(ropts) ~= "table" then
    error("backoff.retry: argument 'ropts' must be a table (got "
          .. type(ropts) .. ")", 3)
  end
  for k, v in pairs(ropts) do
    if not retry_options[k] then
      error("backoff.retry: unknown option '" .. tostring(k) .. "'", 3)
    end
    if type(v) ~= "function" then
      error("backoff.retry: option '" .. k .. "' must be a function (got "
            .. type(v) .. ")", 3)
    end
  end
  return ropts
end

-- A fresh backoff object for one run: a clone of a template object, or
-- one built from an options table with a strategy field.
local function policy_object(policy)
  if is_backoff(policy) then return policy:clone() end
  if type(policy) == "table" then
    if type(policy.strategy) ~= "string" then
      error("backoff.retry: policy table needs a 'strategy' field", 3)
    end
    return core.new(policy.strategy, policy)
  end
  error("backoff.retry: argument 'policy' must be a backoff object or "
        .. "an options table (got " .. type(policy) .. ")", 3)
end

--- Run fn(attempt, timeout) until it succeeds or the policy gives up.
-- Success: a truthy first result; all results are returned.
-- Failure: nil/false (error as the second value) or a raised error.
-- Giving up: nil, last_error, reason ("max_attempts",
-- "max_actual_duration" or "retry_on").
function M.retry(policy, fn, ropts)
  local b = policy_object(policy)
  if type(fn) ~= "function" then
    error("backoff.retry: argument 'fn' must be a function (got "
          .. type(fn) .. ")", 2)
  end
  ropts = check_ropts(ropts)
  local sleep = ropts.sleep or default_sleep()
  local retry_on, on_retry = ropts.retry_on, ropts.on_retry
  local timeout = b:timeout()
  local attempt = 0
  while true do
    attempt = attempt + 1
    local r = pack(yieldable_pcall(fn, attempt, timeout))
    if r[1] and r[2] then
      b:success()
      return unpack(r, 2, r.n)
    end
    -- raised: r[2] is the error; returned nil/false: r[3] is
    local err
    if r[1] then err = r[3] else err = r[2] end
    if retry_on and not retry_on(err, attempt) then
      return nil, err, "retry_on"
    end
    local delay, t = b:failure()
    if delay == nil then return nil, err, t end
    if t ~= nil then timeout = t end
    if on_retry then on_retry(err, delay, attempt) end
    sleep(delay)
  end
end

function methods.retry(self, fn, ropts)
  if not is_backoff(self) then
    error("bad argument #1 to 'retry' (backoff.Backoff expected, got "
          .. type(self) .. ")", 2)
  end
  return M.retry(self, fn, ropts)
end

return M
