-- backoff.store: where every object shared by workers keeps its state
-- (internal; budgets, the breaker, the hedge's latency estimator and
-- metrics sit on it).  CONTRIBUTING.md, "The store", is the contract a
-- backend meets.  Here:
--
-- * store.dict(shared, clock): the object's dict: `shared` itself (an
--   ngx.shared dict, or anything with its calls), or a dict of this Lua
--   state with the same calls and answers, expiring keys by `clock`;
-- * store.incr: the one dict:incr, which says once per dict and minute
--   that a full dict evicted other keys;
-- * store.foreign: the one rule for a value the object cannot have
--   written (a string, NaN, a count out of range, a time in the future):
--   logged once, deleted, read as missing;
-- * store.now: the one checked clock, with the C binding's wording;
-- * store.log: the error log inside nginx, nothing outside it.
--
-- The sliding window over this store is backoff.store.window.

local util = require "backoff.util"
local check = require "backoff.check"

local next, pairs, pcall, rawget, setmetatable, type =
      next, pairs, pcall, rawget, setmetatable, type
local huge = math.huge
local repr, printable = util.repr, util.printable

local S = {}

-- that a dict is full is said at most once per dict in this many seconds
S.WARN_INTERVAL = 60

------------------------------------------------------------------------
-- the error log

local function ngx_log()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.log) == "function" then
    return ngx
  end
  return nil
end

--- store.log(level, ...): ngx.log at ngx[level] inside nginx
function S.log(level, ...)
  local ngx = ngx_log()
  if ngx then ngx.log(ngx[level] or ngx.WARN, ...) end
end

-- the time for rate limits of the log: nginx's clock (one per host)
local function log_now(ngx)
  return type(ngx.now) == "function" and ngx.now() or 0
end

------------------------------------------------------------------------
-- the clock

--- store.now(who, clock) -> clock(), checked: a finite number, else
-- "<who>: option 'clock' must return a finite number (got X)" raised at
-- the caller's line (the C binding's wording)
function S.now(who, clock)
  local now = clock()
  if type(now) ~= "number" or now ~= now or now == huge or now == -huge then
    check.raise(who .. ": option 'clock' must return a finite number (got "
                .. repr(now) .. ")")
  end
  return now
end

------------------------------------------------------------------------
-- the dict of this Lua state: ngx.shared's calls and answers (get, set,
-- add, incr with init and init_ttl, delete, ttl, get_keys), keys
-- expiring by the object's clock.  The values live in a table of their
-- own, so that no key meets a method's name.  A dict starts plain: no
-- key has an expiry and every value is a number, so every call is one
-- table access (an in-process budget's calls cost what a table costs);
-- the first write with a ttl or of another value makes it timed for
-- good (its metatable changes), and from then on every read checks the
-- expiry and incr the type.  Expired keys are swept every SWEEP
-- writes with an expiry, so old slices' keys do not pile up.

local SWEEP = 256

local Timed = {}
Timed.__index = Timed
local Plain = {}
Plain.__index = Plain

local function live(self, key)
  local e = self.exp[key]
  if e ~= nil and self.clock() >= e then
    self.data[key], self.exp[key] = nil, nil
  end
  return self.data[key]
end

local function expire_at(self, key, ttl)
  if ttl and ttl > 0 then
    local now = self.clock()
    self.exp[key] = now + ttl
    self.writes = self.writes + 1
    if self.writes >= SWEEP then
      self.writes = 0
      for k, e in pairs(self.exp) do
        if now >= e then self.data[k], self.exp[k] = nil, nil end
      end
    end
  elseif self.exp[key] ~= nil then
    self.exp[key] = nil
  end
end

function Timed:get(key) return live(self, key) end

function Timed:set(key, value, ttl)
  self.data[key] = value
  expire_at(self, key, ttl)
  return true
end

function Timed:add(key, value, ttl)
  if live(self, key) ~= nil then return false, "exists" end
  return self:set(key, value, ttl)
end

function Timed:incr(key, n, init, ttl)
  local v = live(self, key)
  if v == nil then
    if init == nil then return nil, "not found" end
    v = init
    expire_at(self, key, ttl)
  elseif type(v) ~= "number" then
    return nil, "not a number"
  end
  v = v + n
  self.data[key] = v
  return v
end

function Timed:delete(key)
  self.data[key], self.exp[key] = nil, nil
  return true
end

function Timed:ttl(key)
  if live(self, key) == nil then return nil, "not found" end
  local e = self.exp[key]
  if e == nil then return 0 end
  return e - self.clock()
end

function Timed:get_keys(max)
  local keys, n = {}, 0
  for k in next, self.data do
    if live(self, k) ~= nil then
      n = n + 1
      keys[n] = k
      if max and max > 0 and n >= max then break end
    end
  end
  return keys
end

-- plain: the same answers while no key expires and every value is a
-- number (so incr needs no type check)
function Plain:get(key) return self.data[key] end

function Plain:set(key, value, ttl)
  if ttl and ttl > 0 or type(value) ~= "number" then
    setmetatable(self, Timed)
    return Timed.set(self, key, value, ttl)
  end
  self.data[key] = value
  return true
end

function Plain:add(key, value, ttl)
  if self.data[key] ~= nil then return false, "exists" end
  return self:set(key, value, ttl)
end

function Plain:incr(key, n, init, ttl)
  local data = self.data
  local v = data[key]
  if v == nil then
    if init == nil then return nil, "not found" end
    if ttl and ttl > 0 then
      setmetatable(self, Timed)
      return Timed.incr(self, key, n, init, ttl)
    end
    v = init
  end
  v = v + n
  data[key] = v
  return v
end

Plain.delete, Plain.ttl, Plain.get_keys = Timed.delete, Timed.ttl,
  Timed.get_keys

local function zero() return 0 end

--- store.dict(shared, clock) -> shared when given (an ngx.shared dict),
-- else a new dict of this Lua state expiring keys by clock (default:
-- never)
function S.dict(shared, clock)
  if shared then return shared end
  return setmetatable({ data = {}, exp = {}, writes = 0,
                        clock = clock or zero }, Plain)
end

------------------------------------------------------------------------
-- incr, and a word when it evicted other keys

-- dict -> its name in ngx.shared (false: not found), looked up once
local dict_names = setmetatable({}, { __mode = "k" })

local function dict_name(ngx, dict)
  local name = dict_names[dict]
  if name == nil then
    name = false
    local shared = rawget(ngx, "shared")
    if type(shared) == "table" then
      local ok = pcall(function()
        for k, v in pairs(shared) do
          if v == dict then name = k break end
        end
      end)
      if not ok then name = false end
    end
    dict_names[dict] = name
  end
  return name
end

local function dict_text(ngx, dict)
  local name = dict_name(ngx, dict)
  return name and ("'" .. name .. "'") or "(name unknown)"
end

-- dict -> when its eviction was last logged
local evictions = setmetatable({}, { __mode = "k" })

local function evicted(dict, key)
  local ngx = ngx_log()
  if not ngx then return end
  local now, last = log_now(ngx), evictions[dict]
  if last and now >= last and now - last < S.WARN_INTERVAL then return end
  evictions[dict] = now
  ngx.log(ngx.WARN, "backoff: the lua_shared_dict ", dict_text(ngx, dict),
    " is full: adding to key '", printable(key), "' evicted other keys ",
    "to make room, and what they held is lost (a budget's tokens, ",
    "metric counts, another user's data); give each user (each budget, ",
    "backoff.metrics, other code) a lua_shared_dict of its own, larger ",
    "(logged once per dict every ", S.WARN_INTERVAL, " s)")
end

--- store.incr(dict, key, n [, init [, ttl]]) -> what dict:incr returns
-- (newval, err, forcible), after logging a forced eviction at warn,
-- once per dict every WARN_INTERVAL seconds.  init and ttl are passed
-- only when given (ttl needs init).
function S.incr(dict, key, n, init, ttl)
  local v, err, forcible
  if ttl ~= nil then
    v, err, forcible = dict:incr(key, n, init, ttl)
  elseif init ~= nil then
    v, err, forcible = dict:incr(key, n, init)
  else
    v, err, forcible = dict:incr(key, n)
  end
  if forcible then evicted(dict, key) end
  return v, err, forcible
end

------------------------------------------------------------------------
-- values the object cannot have written

--- store.foreign(dict, key, v, who [, why]) -> the message: v, read
-- under key, is not a value `who` can have written (why: what it
-- expected).  It is deleted (the next read finds the key missing) and
-- logged at warn: once per value written, as the deletion means the
-- next reader finds nothing (no rate limit is needed: a line per value
-- another writer put there).
function S.foreign(dict, key, v, who, why)
  dict:delete(key)
  local msg = who .. ": corrupt value under key '" .. printable(key) .. "' ("
    .. repr(v) .. "; not one it writes" .. (why and (": " .. why
    .. " expected") or "") .. "): deleted, read as missing"
  S.log("WARN", msg)
  return msg
end

------------------------------------------------------------------------
-- what a value may be

local floor = math.floor

--- store.count(v, lo, hi) -> v is an integer within [lo, hi]
function S.count(v, lo, hi)
  return type(v) == "number" and v == floor(v) and v >= lo and v <= hi
end

--- store.time(t, now, slack) -> t is a finite time not after now +
-- slack (a time an object wrote from this clock cannot be in the future)
function S.time(t, now, slack)
  return type(t) == "number" and t == t and t > -huge
    and t <= now + (slack or 1)
end

return S
