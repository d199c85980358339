-- backoff.budget.common: what every budget kind shares (the bottom
-- layer of lua/backoff/budget/*.lua; it requires only backoff.util and
-- backoff.check).  Options are checked by backoff.check (one wording for
-- the whole library); here:
--
-- * method arguments checked in lauxlib's style:
--     bad argument #1 to 'withdraw' (cost must be an integer >= 0 and
--     <= 2^53 (got -1))
-- * self checks (check.bad_self): calling 'withdraw' on bad self
--   (backoff.budget.grpc expected, got table)
-- * the shared counter: an integer in an ngx.shared dict changed by
--   dict:incr only, through store.incr, which warns when a full dict
--   evicted other keys (see the interleaving notes in doc/budget.md),
--   with the checks that treat a foreign value as corrupt;
-- * the mini dict: the same calls on a table of this Lua state, for the
--   in-process budgets (one code path for both).
--
-- Everything raises before it changes anything: a bad argument leaves
-- the budget as it was.

local util = require "backoff.util"
local check = require "backoff.check"
local store = require "backoff.store"
local window = require "backoff.store.window"

local error, floor, getmetatable, ipairs, type =
      error, math.floor, getmetatable, ipairs, type
local repr = util.repr
local incr = store.incr

local C = {}

C.repr = repr
-- dict:incr(key, n, init, ttl) with a warning when it evicted other keys
-- (a full lua_shared_dict): every incr of the budgets goes through it
C.incr = incr
C.WHO = "backoff.budget"
C.MAX = 9007199254740992             -- 2^53: every count is at most this
-- 2^40: the token bucket's capacity, in-process and shared alike (a
-- shared counter may reach (SPAN + 1) capacities: below 2^53, exact)
C.CAPACITY_MAX = 1099511627776
-- a shared counter never legitimately leaves [-SPAN*cap, (SPAN+1)*cap]:
-- every amount is clamped to cap and each of at most SPAN workers has
-- at most one incr not yet taken back (see counter_ok)
C.SPAN = 64
C.DEFAULT_KEY = "backoff:budget"

-- an integer from 0 to 2^53 (NaN, infinities, fractions refused)
local function is_count(v)
  return type(v) == "number" and v >= 0 and v <= C.MAX and v == floor(v)
end
C.is_count = is_count

-- a whole number as the same text on every Lua ("5", not "5.0")
local num = util.num
C.num = num

-- thousandths as text: 3200 -> "3.2", 4000 -> "4"
function C.milli_text(v)
  if v % 1000 == 0 then return num(v / 1000) end
  return (("%.3f"):format(v / 1000):gsub("0+$", ""))
end

------------------------------------------------------------------------
-- methods

-- Raise like luaL_argerror for argument n (counted after self) of the
-- method two levels up (the caller of the function calling this): as
-- lauxlib numbers them, self counts when the method was not called
-- with a colon (pcall(b.withdraw, b, x) says #2, as the C methods do).
local getinfo = debug.getinfo
local function argerror(n, method, msg)
  local info = getinfo(3, "n")
  if not (info and info.namewhat == "method") then n = n + 1 end
  error(("bad argument #%d to '%s' (%s)"):format(n, method, msg), 4)
end

-- an optional count argument (nil: dflt)
function C.count_arg(v, method, name, dflt)
  if v == nil then return dflt end
  if not is_count(v) then
    argerror(1, method, ("%s must be an integer >= 0 and <= 2^53 (got %s)")
             :format(name, repr(v)))
  end
  return v
end

-- record(ok [, attempt [, cost]]): checked, then the attempt (default 1)
-- and cost (nil when not given) are returned
function C.record_args(ok, attempt, cost)
  if type(ok) ~= "boolean" then
    argerror(1, "record", "ok must be a boolean (got " .. repr(ok) .. ")")
  end
  if attempt == nil then
    attempt = 1
  elseif not (is_count(attempt) and attempt >= 1) then
    argerror(2, "record", "attempt must be an integer >= 1 and <= 2^53 "
             .. "(got " .. repr(attempt) .. ")")
  end
  if cost ~= nil and not is_count(cost) then
    argerror(3, "record", "cost must be an integer >= 0 and <= 2^53 (got "
             .. repr(cost) .. ")")
  end
  return attempt, cost
end

-- self must have metatable mt, else raise for method (check.bad_self:
-- at the caller's line)
function C.self_check(self, mt, method)
  if getmetatable(self) ~= mt then check.bad_self(method, mt.__name, self) end
end

-- thousandths -> the number (an integer when whole, on every Lua)
function C.from_milli(v)
  local x = v / 1000
  if x == floor(x) then return floor(x) end
  return x
end

-- methods that only return fields, checked: getter(mt, "capacity", f)
function C.getter(mt, name, field)
  mt[name] = function(self)
    if getmetatable(self) ~= mt then check.bad_self(name, mt.__name, self) end
    return self[field]
  end
end

------------------------------------------------------------------------
-- the shared dict

-- shared (an ngx.shared dict) and key (default backoff:budget) from the
-- options, checked; the dict key of this configuration: key, "|", the
-- kind's letter and every option that shapes the shared state (short:
-- C.short, "." between), so that two budgets share a counter only when
-- they agree on all of them.  Raises at the constructor's caller.
function C.shared_key(ctor, o, kind, parts)
  if not util.is_dict(o.shared) then
    -- key without a dict (nil, or false: per worker): the key names a
    -- counter in a dict, so say which is missing rather than only that
    -- nil is no dict
    check.raise(ctor .. ": option 'shared' must be an ngx.shared dict "
      .. "(got " .. repr(o.shared) .. "; option 'key' names a key in it, "
      .. "so it needs shared)")
  end
  local key = o.key
  if key == nil then key = C.DEFAULT_KEY end
  if type(key) ~= "string" or key == "" then
    check.fail(ctor, "key", "a non-empty string", key)
  end
  local p = {}
  for i, v in ipairs(parts) do p[i] = C.short(v) end
  return key, key .. "|" .. kind .. table.concat(p, ".")
end

-- a number as short exact text (base 36 for an integer): the window's
C.short = window.short

-- Is v a value this module can have written under a counter of size
-- cap?  An integer, at most SPAN capacities above it, and at most SPAN
-- of the largest takes below 0 (`low`: -SPAN x the largest take;
-- default -SPAN x cap): each of at most SPAN workers has at most one
-- incr not yet taken back.  Anything else (a string, NaN, an infinity,
-- a fraction, a huge or hugely negative number) is another writer's.
local SPAN = C.SPAN
local function counter_ok(v, cap, low)
  -- v % 1: whole numbers without a call (NaN and infinities give NaN)
  return type(v) == "number" and v % 1 == 0
    and v >= (low or -SPAN * cap) and v <= (SPAN + 1) * cap
end
C.counter_ok = counter_ok

-- A value the counter cannot hold (store.foreign: logged once, deleted;
-- the next call finds the key missing, a full budget, as after an
-- eviction).  Returns the message.
function C.corrupt(dict, dkey, v)
  return store.foreign(dict, dkey, v, C.WHO, "a token count")
end

-- An incr of n met a value the counter cannot hold (r: what it
-- answered, nil with err "not a number"), or failed: the value is
-- deleted (read as missing) and the incr made once more.  The counter
-- after, or nil, err.
local function again(dict, dkey, n, cap, init, low, r, err)
  if r ~= nil then
    C.corrupt(dict, dkey, r - n)
  elseif err == "not a number" then
    C.corrupt(dict, dkey, dict:get(dkey))
  else
    return nil, err
  end
  r, err = incr(dict, dkey, n, init)
  if r ~= nil and not counter_ok(r, cap, low) then
    return nil, C.corrupt(dict, dkey, r)
  end
  return r, err
end

-- Add n (0 <= n <= cap) to the counter at dkey (missing: init), then
-- take back at once what went above cap.  Returns the counter after,
-- or nil, err (a dict error).
function C.add(dict, dkey, n, cap, init, low)
  local r, err = incr(dict, dkey, n, init)
  if not (r and counter_ok(r, cap, low)) then
    r, err = again(dict, dkey, n, cap, init, low, r, err)
    if not r then return nil, err end
  end
  if r > cap then
    local e = r - cap
    if e > n then e = n end
    r, err = incr(dict, dkey, -e, init)
    if not (r and counter_ok(r, cap, low)) then
      return again(dict, dkey, -e, cap, init, low, r, err)
    end
  end
  return r
end

-- Take c (0 < c <= cap) if it leaves the counter >= floor_; else give
-- it back (through add) and refuse.  Returns true, or false [, err].
function C.take(dict, dkey, c, cap, init, floor_, low)
  local r, err = incr(dict, dkey, -c, init)
  if not (r and counter_ok(r, cap, low)) then
    r, err = again(dict, dkey, -c, cap, init, low, r, err)
    if not r then return false, err end
  end
  if r >= floor_ then return true end
  r, err = C.add(dict, dkey, c, cap, init, low)     -- undo
  if not r then return false, err end
  return false
end

-- the counter now (missing: init; a foreign value is deleted and read
-- as missing)
function C.read(dict, dkey, cap, init, low)
  local v = dict:get(dkey)
  if v == nil then return init end
  if not counter_ok(v, cap, low) then
    C.corrupt(dict, dkey, v)
    return init
  end
  return v
end

-- Give back the part below 0 after taking n (0 < n <= cap): r =
-- incr(-n); if r < 0 then incr(min(n, -r)).  The counter after, or
-- nil, err.
function C.sub_floor(dict, dkey, n, cap, init, low)
  local r, err = incr(dict, dkey, -n, init)
  if not (r and counter_ok(r, cap, low)) then
    r, err = again(dict, dkey, -n, cap, init, low, r, err)
    if not r then return nil, err end
  end
  if r < 0 then
    local e = -r
    if e > n then e = n end
    r, err = incr(dict, dkey, e, init)
    if not (r and counter_ok(r, cap, low)) then
      return again(dict, dkey, e, cap, init, low, r, err)
    end
  end
  return r
end

return C
