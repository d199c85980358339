-- backoff: retry backoff strategies (C core) and a retry runner.
--
-- The public face, at the top of the Lua half (CONTRIBUTING.md draws the
-- floors): the objects and constructors of the C module backoff.core,
-- the runner's door (lua/backoff/runner.lua), the budgets and the
-- breaker.  backoff.balancer, which needs nginx, is loaded on first use.

local core = require "backoff.core"
local phase = require "backoff.phase"
local check = require "backoff.check"
local runner = require "backoff.runner"

local ipairs, pairs, pcall, rawset, require, setmetatable, type =
      ipairs, pairs, pcall, rawset, require, setmetatable, type

local M = {
  _VERSION = core._VERSION,
  new = core.new,
  now = core.now,
  strategies = {},
  retry = runner.retry,
  wrap = runner.wrap,
}
for i, name in ipairs(core.strategies) do
  M.strategies[i] = name
  M[name] = core[name]
end

local methods = core.methods
methods.retry = runner.method

-- LuaJIT: b:failure() and b:success() through the FFI (lua/backoff/ffi.lua)
require("backoff.ffi")(methods)

-- backoff.sleep: the blocking sleep, refused in nginx's request phases
-- (it would stall every request of the worker); allowed outside nginx
-- and in init / init_worker
local core_sleep = core.sleep
function M.sleep(seconds)
  if not check.finite(seconds) or seconds < 0 then
    -- the C function's words, at the caller's line (not this file's)
    check.raise("bad argument #1 to 'sleep' (seconds must be a finite "
      .. "number >= 0 (got " .. check.got(seconds) .. "))")
  end
  if seconds > 0 then
    local now = phase.current()
    if now ~= nil and not phase.BLOCK[now] then
      phase.wait_error("backoff.sleep", now, seconds, phase.YIELD[now]
        and "it would block this worker and every request it serves; "
          .. "use ngx.sleep, which yields"
        or phase.NO_YIELD .. "wait in a timer (ngx.timer.at)")
    end
  end
  return core_sleep(seconds)
end

-- The recommended policy (README, "Which strategy when"): exponential
-- growth from 0.1 s, full jitter (the least work in the herd benchmark,
-- bench/README.md), at most 5 s between attempts, 4 attempts, all
-- within 10 s; each try's timeout half the time left, at least 1 s (5 s
-- for the first), so that every door takes it, the balancer included.
-- Any option of backoff.exponential overrides one of these.
local RECOMMENDED = { initial_delay = 0.1, max_delay = 5, jitter = "full",
                      max_attempts = 4, max_actual_duration = 10,
                      adjust_timeout_factor = 0.5, min_adjust_timeout = 1 }

-- What the recommended policy is for, a caller waiting for the answer,
-- says that no wait between attempts is above a minute, nor the whole
-- run above ten: a larger value is milliseconds given for seconds
-- (doc/backoff.md, "Times are seconds")
local REC = "backoff.recommended"
local BETWEEN, TRY = "s between attempts", "s per try"
local LONGEST = {
  { "initial_delay", 60, BETWEEN }, { "min_delay", 60, BETWEEN },
  { "max_delay", 60, BETWEEN }, { "min_adjust_timeout", 60, TRY },
  { "max_actual_duration", 600, "s in all" } }

local function not_seconds(o)
  for _, kv in ipairs(LONGEST) do
    local k, most, what = kv[1], kv[2], kv[3]
    local v = o[k]
    if type(v) == "number" and v > most then
      check.raise(("%s: option '%s' is %g seconds: times are seconds "
        .. "(%g for %g ms), and the recommended policy waits at most %d "
        .. "%s; for longer, build it with backoff.exponential"):format(
        REC, k, v, v / 1000, v, most, what))
    end
  end
end

--- backoff.recommended([opts]) -> the recommended policy object
function M.recommended(opts)
  if opts ~= nil and type(opts) ~= "table" then
    check.raise(REC .. ": options must be a table (got " .. type(opts)
                .. ")")
  end
  local o = {}
  for k, v in pairs(RECOMMENDED) do o[k] = v end
  for k, v in pairs(opts or {}) do o[k] = v end
  -- milliseconds first: 100 for 0.1 s is said as such, not as a
  -- delay above max_delay
  not_seconds(o)
  local ok, b = pcall(core.exponential, o)
  if not ok then
    check.raise((b:gsub("^[^\n]-backoff%.exponential:", REC .. ":")))
  end
  return b
end

-- fleet safety: retry budgets, in-process or shared by nginx workers;
-- the server's hint (HTTP Retry-After -> seconds, RFC 9110 10.2.3)
M.budget = require "backoff.budget"
M.breaker = require "backoff.breaker"      -- doc/breaker.md
M.retry_after = require "backoff.retry_after"

-- loaded on first use: backoff.balancer needs nginx's ngx.balancer
local LAZY = { balancer = "backoff.balancer" }
return setmetatable(M, { __index = function(t, k)
  local name = LAZY[k]
  if name == nil then return nil end
  local v = require(name)
  rawset(t, k, v)
  return v
end })
