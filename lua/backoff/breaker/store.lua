-- backoff.breaker.store: where a breaker keeps its state (internal; the
-- bottom of lua/backoff/breaker*.lua, it requires only backoff.util).
--
-- One dict holds everything, with the calls an ngx.shared dict has
-- (get, set, add, incr with init and init_ttl, delete): a
-- lua_shared_dict shared by the workers of a host, or the in-process
-- dict below.  No lock: every decision is one atomic call (add: the
-- first one wins; incr: each caller sees its own result), see
-- doc/breaker.md, "Races".
--
-- Keys, for a breaker named K (its `key` option):
--   K|s              the state: a number E (closed, epoch E), or the
--                    text "o<E>:<k>:<t>:<d>" (open since t for d
--                    seconds, the k-th opening in a row; half-open once
--                    t + d has passed).  No expiry.
--   K|n              the last epoch given out (incr: each is unique)
--   K|x<E>           the trip of closed epoch E: add, the first wins
--   K|f<E>           closed epoch E's consecutive failures
--   K|w<E>.<b>       closed epoch E's calls in time bucket b, failures
--                    packed in (calls + FAIL x failures); K|l<E>.<b>
--                    its slow calls
--   K|p<E>.<i>       probe slot i of half-open epoch E (add, expires
--                    after probe_timeout)
--   K|h<E>           the first probe of epoch E (add): the one that
--                    announces half-open
--   K|c<E>           half-open epoch E's outcomes: +1 a success,
--                    +BIG a failure; the first incr to reach `probes`
--                    successes or the first failure decides
-- Every transition writes a new epoch, so a closed epoch's counters
-- never mix with another's, and nothing is ever reset by a write that
-- could race with a count (no tumbling window).

local util = require "backoff.util"
local base = require "backoff.store"

local floor, tonumber, type = math.floor, tonumber, type
local format = string.format
local huge = math.huge

local S = {}

S.CLOSED, S.OPEN = "closed", "open"

--- store.mini(clock) -> an in-process dict expiring keys by clock (the
-- store's: outside nginx, or shared = false)
function S.mini(clock) return base.dict(nil, clock) end

------------------------------------------------------------------------
-- the state record

-- an epoch as key text: an integer, the same on every Lua
local etext = util.num
S.etext = etext

-- a number that can be an epoch: an integer within +-2^53
local function is_epoch(v)
  return type(v) == "number" and v == floor(v) and v > -2 ^ 53
    and v < 2 ^ 53
end
S.is_epoch = is_epoch

-- now in milliseconds, within +-2^52 (0 beyond)
local function ms_of(now)
  local ms = floor(now * 1000)
  if ms > -2 ^ 52 and ms < 2 ^ 52 then return ms end
  return 0
end

--- store.next_epoch(dict, key, e, now, name) -> a new epoch, after e
-- (nil: none known).  Epochs come from one counter (incr: no two
-- transitions get the same one), started at the clock's milliseconds
-- when missing: a counter evicted and started again does not reuse an
-- epoch whose keys may still be in the dict (milliseconds pass faster
-- than transitions can be made).  Without the counter (a dict error):
-- max(e + 1, now in milliseconds).
function S.next_epoch(dict, key, e, now, name)
  local ms = ms_of(now)
  local r = S.incr(dict, key, 1, nil, name, ms)
  if r ~= nil and e ~= nil and r <= e then
    r = S.incr(dict, key, e + 1 - r, nil, name, ms)
  end
  if r ~= nil and (e == nil or r > e) and is_epoch(r) then return r end
  if e == nil then return ms end
  if ms > e then return ms end
  return e + 1
end

--- store.open_text(e, k, t, d) -> the record of an open state
function S.open_text(e, k, t, d)
  return format("o%.0f:%.0f:%.17g:%.17g", e, k, t, d)
end

local function finite(v)
  return v ~= nil and v == v and v ~= huge and v ~= -huge
end

--- store.decode(v) -> rec | nil: an open record's fields (epoch, k,
-- t, d, etext, raw, until_), nil when v is not one
function S.decode(v)
  if type(v) ~= "string" then return nil end
  local e, k, t, d = v:match("^o(%-?%d+):(%d+):([^:]+):([^:]+)$")
  if not e then return nil end
  e, k, t, d = tonumber(e), tonumber(k), tonumber(t), tonumber(d)
  if not (is_epoch(e) and is_epoch(k) and k >= 1 and finite(t)
          and finite(d) and d >= 0) then
    return nil
  end
  return { epoch = e, k = k, t = t, d = d, etext = etext(e), raw = v,
           until_ = t + d }
end

------------------------------------------------------------------------
-- the error log, and values this module did not write (the store's rule)

S.log = base.log

--- store.corrupt(dict, key, v, name): a value this module did not
-- write: logged and deleted (the next read finds the key missing)
function S.corrupt(dict, key, v, name)
  base.foreign(dict, key, v, "backoff.breaker " .. util.repr(name),
               "a missing state is closed")
end

--- store.incr(dict, key, n, ttl, name [, init]) -> the value after, or
-- nil: a counter (init: 0, expiring after ttl); a value that is not a
-- number is corrupt (deleted); a dict error (full) is logged
function S.incr(dict, key, n, ttl, name, init)
  local r, err = base.incr(dict, key, n, init or 0, ttl)
  if r == nil then
    if err == "not a number" then
      S.corrupt(dict, key, dict:get(key), name)
    else
      S.log("WARN", "backoff.breaker ", util.repr(name), ": incr ",
            util.repr(key), ": ", err)
    end
    return nil
  end
  return r
end

return S
