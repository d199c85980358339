-- backoff.util: what the Lua modules share (internal: not part of the
-- API).  The bottom of the Lua half: it requires only backoff.core, and
-- it is the one Lua module that reads backoff.core's private entries
-- (core._*): every other module takes them from here.

local core = require "backoff.core"

local floor = math.floor
local getmetatable, ipairs, next, pcall, rawget, setmetatable,
      tostring, type =
      getmetatable, ipairs, next, pcall, rawget, setmetatable,
      tostring, type

local M = {}

------------------------------------------------------------------------
-- backoff.core's private entries

M.repr = core._repr                 -- a value, short and escaped
M.now = core._now                   -- b's clock, read once
M.failure = core._failure           -- b:failure(ts, hint) + the strategy's own
M.first_timeout = core._first_timeout
M.backoff_mt = core._metatable      -- the metatable of every object
M.new = core.new                    -- backoff.new
M.core_sleep = core.sleep           -- the blocking sleep, unchecked
M.ffi = { token = core._ffi_token, reasons = core._ffi_reasons,
          failure = core._ffi_failure, success = core._ffi_success }

local backoff_mt = M.backoff_mt

-- v is a backoff object
function M.is_backoff(v)
  return type(v) == "userdata" and getmetatable(v) == backoff_mt
end

------------------------------------------------------------------------
-- nginx

-- the longest timeout nginx takes, in milliseconds: a cosocket's
-- settimeout(s) answers "bad timeout value" above it, and the balancer's
-- set_timeouts hands nginx a C long (2^31 - 1 ms: 24.8 days)
M.MAX_TIMEOUT_MS = 2 ^ 31 - 1

-- the current nginx phase (ngx.get_phase()) and ngx; nil outside nginx
function M.ngx_phase()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.get_phase) == "function" then
    return ngx.get_phase(), ngx
  end
  return nil
end

-- Per-try timeouts per side, for clients that take connect, send and
-- read apart (lua-resty-http's set_timeouts, cosockets' settimeouts,
-- ngx.balancer.set_timeouts): each is timeout x its factor (nil or true:
-- 1; false: nil, keep the client's own).  Seconds, not yet bounded: each
-- door bounds them in its client's units.
M.SIDES = { connect = true, send = true, read = true }

local function side(timeout, f, name)
  local x = rawget(f, name)
  if x == false then return nil end
  if x == nil or x == true then return timeout end
  return timeout * x
end

function M.sides(timeout, factors)
  local f = factors or M.SIDES
  return side(timeout, f, "connect"), side(timeout, f, "send"),
         side(timeout, f, "read")
end

-- nil when f is nil or a good table of factors, else what is wrong
-- ("must be a table of factors (got 1)", "takes connect, ...")
function M.factors_problem(f)
  if f == nil then return nil end
  if type(f) ~= "table" then
    return "must be a table of factors (got " .. M.repr(f) .. ")"
  end
  for k, v in next, f do          -- read raw: no metamethod runs
    if not M.SIDES[k] or v ~= false and (type(v) ~= "number"
                                         or not (v > 0 and v < 1 / 0)) then
      return "takes connect, send and read: a factor > 0 or false (got "
             .. M.repr(k) .. " = " .. M.repr(v) .. ")"
    end
  end
  return nil
end

-- The clock of an object shared by the workers: ngx.now inside nginx
-- (every worker reads the same one, cached per event loop), backoff.now
-- (monotonic) outside
function M.shared_clock()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.now) == "function" then
    return ngx.now
  end
  return core.now
end

------------------------------------------------------------------------
-- values

-- v may be called: a function, or a value whose metatable has __call
function M.callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

local callable = M.callable

-- v[name] (indexing a userdata may raise)
local function index(v, name) return v[name] end

-- v is a table or userdata whose v[name] may be called
function M.has_method(v, name)
  local t = type(v)
  if t ~= "table" and t ~= "userdata" then return false end
  local ok, m = pcall(index, v, name)
  return ok and callable(m)
end

local has_method = M.has_method

-- v is an ngx.shared dict (or a stand-in with the same methods)
function M.is_dict(v)
  return has_method(v, "incr") and has_method(v, "get")
end

-- Is err a timeout?  The string "timeout" (cosockets, lua-resty-http),
-- a string ending in "timeout" or "timed out", or a table whose field
-- `timeout` is true or whose field `err` is such a string.
function M.is_timeout(err)
  if type(err) == "table" then
    if err.timeout == true then return true end
    err = err.err
  end
  if type(err) ~= "string" then return false end
  return err:sub(-7) == "timeout" or err:sub(-9) == "timed out"
end

------------------------------------------------------------------------
-- duck-typed collaborators: what the engine calls, checked once

-- Why v cannot serve as a budget, nil when it can: it needs withdraw,
-- and record (told of every attempt) or deposit (told of successes);
-- record, deposit, allows, throttle_cost and timeout_cost, the methods the
-- doors call when v has them, must be methods, or the call would fail
-- with a raw "attempt to call" after fn ran (cost and tokens may be
-- data: a number cost is the cost, and tokens() is called only when it
-- is a method).  A budget found good is remembered (weakly): the doors
-- check their options at every call, and a budget is a long-lived
-- object, so the good day pays one lookup.
local OPTIONAL_METHODS = { "record", "deposit", "allows", "throttle_cost",
                           "timeout_cost" }
local good_budgets = setmetatable({}, { __mode = "k" })
local function budget_problem(v)
  local t = type(v)
  if t ~= "table" and t ~= "userdata" then return t end
  if t == "userdata" and getmetatable(v) == nil then
    return "a userdata without methods"
  end
  if not has_method(v, "withdraw") then
    return t .. " without a withdraw method"
  end
  if not has_method(v, "record") and not has_method(v, "deposit") then
    return t .. " without a record or deposit method"
  end
  for _, name in ipairs(OPTIONAL_METHODS) do
    local ok, m = pcall(index, v, name)
    if not ok then return t .. " whose " .. name .. " cannot be read" end
    if m ~= nil and not callable(m) then
      return t .. " whose " .. name .. " is a " .. type(m) .. ", not a method"
    end
  end
  good_budgets[v] = true
  return nil
end

function M.budget_problem(v)
  if good_budgets[v] then return nil end
  return budget_problem(v)
end

-- a budget's cost per retry: its cost() method or cost field, if any
-- (nil: withdraw's own default)
function M.budget_cost(bud)
  local c = bud.cost
  if type(c) == "function" then return c(bud) end
  if type(c) == "number" then return c end
  return nil
end

------------------------------------------------------------------------
-- text

--- util.num(v) -> a number as the same text on every Lua: a whole
-- number within +-2^63 as an integer ("5", not "5.0"; the epochs of the
-- breaker's keys, counts, bounds), anything else as tostring gives it
function M.num(v)
  if type(v) == "number" and v == floor(v) and v > -2 ^ 63 and v < 2 ^ 63
  then
    return ("%d"):format(v)
  end
  return tostring(v)
end

------------------------------------------------------------------------
-- log lines

-- a key as a log line shows it: control bytes escaped, at most 80 bytes
function M.printable(key)
  local s = tostring(key)
  local cut = #s > 80
  s = s:sub(1, 80):gsub("[%c\\]", function(c)
    if c == "\t" then return "\\t" end
    if c == "\\" then return "\\\\" end
    return ("\\%03d"):format(c:byte())
  end)
  return s .. (cut and "..." or "")
end

return M
