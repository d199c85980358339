-- backoff.hedge.options: backoff.hedge.request's options, its policy
-- and where it may run, checked before anything is sent (internal: the
-- door's; errors are raised at level 0, and again by the door at its
-- caller's line).

local backoff = require "backoff"
local http = require "backoff.http"
local util = require "backoff.util"
local gate = require "backoff.hedge.gate"

local core = require "backoff.core"
local repr, backoff_mt = core._repr, core._metatable

local error, floor, getmetatable, ipairs, next, pcall, rawget, tostring,
      type = error, math.floor, getmetatable, ipairs, next, pcall, rawget,
      tostring, type
local huge = math.huge
local callable, has_method = util.callable, util.has_method

local M = {}

local WHO = "backoff.hedge.request"

------------------------------------------------------------------------
-- options

local DEFAULTS = http.defaults()
local DEFAULT_STATUSES = {}
for _, s in ipairs(DEFAULTS.statuses) do DEFAULT_STATUSES[s] = true end

-- option errors are raised at level 0 inside a pcall, and raised again
-- by request at its caller
local function bad(name, want, v)
  error(("%s: option '%s' must be %s (got %s)"):format(WHO, name, want,
        repr(v)), 0)
end

-- statuses: a list of codes, or a set { [503] = true }
local function status_set(v)
  if type(v) ~= "table" then bad("statuses", "a list of status codes", v) end
  local set = {}
  for k, x in next, v do
    local code = x
    if x == true then code = k
    elseif not (type(k) == "number" and k == floor(k) and k >= 1) then
      bad("statuses", "a list of status codes or a set { [code] = true }",
          x)
    end
    if type(code) ~= "number" or code ~= floor(code) or code < 100
       or code > 599 then
      bad("statuses", "status codes from 100 to 599", code)
    end
    set[code] = true
  end
  return set
end

local CHECKS = {
  method = function(v)
    local ok = pcall(http.idempotent, v)
    if v == nil or not ok then
      bad("method", "the request's method: a name (an HTTP token) or an "
          .. "ngx.HTTP_* constant; only idempotent requests are hedged", v)
    end
  end,
  headers = function(v)
    if type(v) ~= "table" then bad("headers", "a table", v) end
  end,
  idempotent = function(v)
    if type(v) ~= "boolean" then bad("idempotent", "a boolean", v) end
  end,
  statuses = function(v, o) o.statuses = status_set(v) end,
  max_hint = function(v)
    if type(v) ~= "number" or not (v >= 0 and v < huge) then
      bad("max_hint", "a finite number >= 0 (seconds)", v)
    end
  end,
  timeouts = function(v)
    local ok, err = pcall(http.timeouts, 1, v)
    if not ok then
      bad("timeouts", "a table of factors: "
          .. (tostring(err):match("%((.*)%)$") or tostring(err)), v)
    end
  end,
  delay = function(v, o)
    if type(v) == "number" then
      if not (v >= 0 and v < 2 ^ 31) then
        bad("delay", "a number of seconds >= 0 or a hedge.latency "
            .. "estimator", v)
      end
    elseif has_method(v, "delay") and has_method(v, "observe") then
      o.estimator = v
    else
      bad("delay", "a number of seconds >= 0 or a hedge.latency "
          .. "estimator (an object with delay and observe methods)", v)
    end
  end,
  budget = function(v)
    if v ~= false then
      local why = util.budget_problem(v)
      if why then
        bad("budget", "a retry budget (an object with withdraw, and record "
            .. "or deposit methods), or false to hedge without one", v)
      end
    end
  end,
  breaker = function(v)
    if not (has_method(v, "allow") and has_method(v, "record")
            and has_method(v, "release")) then
      bad("breaker", "a breaker (an object with allow, record and release "
          .. "methods)", v)
    end
  end,
  metrics = function(v)
    if not has_method(v, "run") then
      bad("metrics", "a backoff.metrics recorder", v)
    end
  end,
  on_hedge = function(v)
    if not callable(v) then bad("on_hedge", "a function", v) end
  end,
  on_giveup = function(v)
    if not callable(v) then bad("on_giveup", "a function", v) end
  end,
}
local REQUIRED = { "method", "delay", "budget" }

function M.compile(opts)
  if type(opts) ~= "table" then
    error(WHO .. ": options must be a table (got " .. type(opts)
          .. "): method, delay and budget are required", 0)
  end
  local o = { statuses = DEFAULT_STATUSES, max_hint = DEFAULTS.max_hint }
  for k, v in next, opts do       -- read raw: no metamethod runs
    local check = CHECKS[k]
    if not check then error(WHO .. ": unknown option " .. repr(k), 0) end
    if k ~= "statuses" then o[k] = v end
    check(v, o)
  end
  for _, k in ipairs(REQUIRED) do
    if rawget(opts, k) == nil then CHECKS[k](nil, o) end
  end
  local idem = o.idempotent
  if idem == nil then idem = http.idempotent(o.method, o.headers) end
  o.idem = idem
  if o.budget == false then o.budget = nil end
  return o
end

-- the policy: a backoff object, or an options table built into one
function M.policy_of(policy)
  if type(policy) == "userdata" and getmetatable(policy) == backoff_mt then
    return policy
  end
  if type(policy) ~= "table" then
    error("bad argument #1 to 'request' (a backoff object or an options "
          .. "table expected for 'policy', got " .. type(policy) .. ")", 0)
  end
  if type(rawget(policy, "strategy")) ~= "string" then
    error(WHO .. ": policy table needs a 'strategy' field", 0)
  end
  local ok, b = pcall(backoff.new, policy.strategy, policy)
  if not ok then error(b, 0) end
  return b
end

function M.limits_of(policy)
  local l = gate.limits_of(policy)
  if l.attempts <= 0 then
    error(WHO .. ": the policy needs max_attempts (the most copies of a "
          .. "request, the first included)", 0)
  end
  return l
end

------------------------------------------------------------------------
-- where light threads exist

-- lua-nginx-module's NGX_HTTP_LUA_CONTEXT_YIELDABLE (where
-- ngx.thread.spawn runs), and the stream module's preread
local SPAWN_PHASES = {
  rewrite = true, server_rewrite = true, access = true, content = true,
  timer = true, ssl_cert = true, ssl_session_fetch = true,
  ssl_client_hello = true, preread = true, precontent = true,
}

-- ngx, or raises naming why hedging cannot run here
function M.threads()
  local ngx = rawget(_G, "ngx")
  if type(ngx) ~= "table" or type(ngx.get_phase) ~= "function"
     or type(ngx.thread) ~= "table" then
    error(WHO .. ": needs nginx's light threads (ngx.thread.spawn), and "
          .. "this is not nginx; backoff.http.request retries without "
          .. "them", 0)
  end
  local phase = ngx.get_phase()
  if not SPAWN_PHASES[phase] then
    error(("%s: cannot hedge in nginx's %s phase: light threads "
      .. "(ngx.thread.spawn) run only in rewrite, access, content, "
      .. "ngx.timer and ssl_* code; hedge there, or from a timer "
      .. "(ngx.timer.at)"):format(WHO, tostring(phase)), 0)
  end
  return ngx
end

return M
