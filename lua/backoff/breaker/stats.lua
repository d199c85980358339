-- backoff.breaker.stats: what a closed breaker counts, and when it trips
-- (internal).  Three rules, each optional:
--
--   failures        consecutive failures across the host: one counter
--                   per closed epoch (K|f<E>), +1 per failure (incr), 0
--                   on a success (set, only when it is not 0 already)
--   failure_ratio   failures / calls over a sliding window of `buckets`
--                   time buckets of window / buckets seconds, with at
--                   least min_calls calls; one incr per call into the
--                   current bucket (K|w<E>.<b>: calls + FAIL x
--                   failures), which expires by itself after the window
--   slow_call_ratio slow calls / calls over the same window (K|l<E>.<b>)
--
-- Nothing is ever reset by a write that could race with a count: a new
-- window is a new bucket key, a new closed epoch new keys altogether.
-- A success's reset of the consecutive count may meet a failure's incr;
-- either order is a possible order of the two calls (both are atomic).

local store = require "backoff.breaker.store"

local floor, type = math.floor, type

local T = {}

-- failures are counted in the bucket's value above FAIL: a bucket holds
-- up to 2^26 calls (67 million in one bucket) and as many failures,
-- within the 2^53 of an exact double
local FAIL = 2 ^ 26
T.FAIL = FAIL

-- a streak of failures is forgotten an hour after its first failure: a
-- closed period's keys must not pile up in the dict when the breaker
-- flaps (and a trip deletes its period's streak)
T.KEEP = 3600

-- the consecutive-failure rule: "failures" when this failure makes the
-- streak reach br.failures
local function consecutive(br, ok)
  local dict, key = br.dict, br.fkey
  if ok then
    local v = dict:get(key)
    if v ~= nil and v ~= 0 then dict:set(key, 0, T.KEEP) end
    return nil
  end
  local r = store.incr(dict, key, 1, T.KEEP, br.name)
  -- a streak is 1 to 2^31 failures (a count below, above or between is
  -- another writer's)
  if r ~= nil and not (r >= 1 and r <= 2 ^ 31 and r % 1 == 0) then
    store.corrupt(dict, key, r, br.name)
    return nil
  end
  -- a streak's first failure: its hour starts now (set: a failure of
  -- another worker counted in between is lost, which can only delay a
  -- trip by one)
  if r == 1 then dict:set(key, 1, T.KEEP) end
  if r ~= nil and r >= br.failures then return "failures" end
  return nil
end

-- the window's sums up to bucket b: calls, failures, slow calls; a
-- value that is not a count is corrupt (deleted, counted 0)
local function sums(br, et, b)
  local dict, calls, fails, slows = br.dict, 0, 0, 0
  local w, l = br.pre .. "w" .. et .. ".", br.pre .. "l" .. et .. "."
  for j = b - br.buckets + 1, b do
    local key = w .. store.etext(j)
    local v = dict:get(key)
    if v ~= nil then
      if type(v) == "number" and v >= 0 and v < FAIL * FAIL
         and v == floor(v) then
        local f = floor(v / FAIL)
        calls, fails = calls + (v - f * FAIL), fails + f
      else
        store.corrupt(dict, key, v, br.name)
      end
    end
    if br.slow_ratio then
      key = l .. store.etext(j)
      v = dict:get(key)
      if type(v) == "number" and v >= 0 and v < FAIL and v == floor(v)
      then slows = slows + v
      elseif v ~= nil then store.corrupt(dict, key, v, br.name) end
    end
  end
  return calls, fails, slows
end

-- the ratio rules over the window ending in bucket b
local function ratios(br, et, b, ok, slow)
  local calls, fails, slows = sums(br, et, b)
  if calls < br.min_calls then return nil end
  if not ok and br.ratio and fails >= br.ratio * calls then
    return "failure_ratio"
  end
  if slow and slows >= br.slow_ratio * calls then
    return "slow_call_ratio"
  end
  return nil
end

--- stats.outcome(br, epoch, ok, slow, now) -> the rule that trips the
-- breaker, or nil: one outcome counted in closed epoch `epoch`.  now:
-- the time (nil: read from br when the window needs it).
function T.outcome(br, epoch, ok, slow, now)
  -- the keys of this epoch and bucket, built once (the happy path then
  -- makes no string)
  if br.et_of ~= epoch then
    local et = store.etext(epoch)
    br.et_of, br.et, br.fkey, br.wb = epoch, et, br.pre .. "f" .. et, nil
  end
  local why
  if br.failures then why = consecutive(br, ok) end
  if br.len then
    local b = floor((now or br:_now()) / br.len)
    if br.wb ~= b then
      local bt = store.etext(b)
      br.wb, br.wkey = b, br.pre .. "w" .. br.et .. "." .. bt
      br.lkey = br.pre .. "l" .. br.et .. "." .. bt
    end
    local dict, ttl = br.dict, br.window + br.len
    store.incr(dict, br.wkey, ok and 1 or 1 + FAIL, ttl, br.name)
    if slow then store.incr(dict, br.lkey, 1, ttl, br.name) end
    if why == nil and (not ok and br.ratio or slow) then
      why = ratios(br, br.et, b, ok, slow)
    end
  end
  return why
end

--- stats.window(br, epoch, now) -> calls, failures, slow calls in the
-- window now (for br:state's info)
function T.window(br, epoch, now)
  if not br.len then return nil end
  return sums(br, store.etext(epoch), floor(now / br.len))
end

return T
