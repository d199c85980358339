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
-- streak reach br.failures.  bucket: what the window's incr returned for
-- this outcome (nil without a window): a success that finds its bucket
-- with no failure and another call before it needs no read, since every
-- failure before the bucket came before that call, which was a success
-- and reset the streak (or found it 0): the happy path reads the
-- streak once per bucket, not once per call
local function consecutive(br, ok, bucket)
  local dict, key = br.dict, br.fkey
  if ok then
    if bucket ~= nil and bucket >= 2 and bucket < FAIL then return nil end
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

-- n of calls reach ratio r: n / calls >= r, the quotient correctly
-- rounded (IEEE division), never r * calls, whose rounding moves the
-- threshold (0.55 * 100 is 55.000000000000007).  The double nearest
-- p/q and the quotient nearest n/calls are equal when n/calls = p/q,
-- and apart when they differ (by >= 1/(q calls), far above an ulp):
-- a ratio written as a decimal or a small fraction is met exactly at
-- the count its rational value says.
local function reached(n, calls, r)
  return n / calls >= r
end
T.reached = reached

-- the ratio rules over the window ending in bucket b, after any
-- outcome (a success too: it can bring the window to min_calls)
--
-- A success cannot raise a ratio: after a check that found the ratios
-- below their thresholds, or met with fewer than min_calls calls
-- (br.armed), only a success while armed, or the first outcome in a
-- new bucket (the window slid), can find them met.  So an object
-- checks on each failure and slow call, and on a success only then:
-- exact for one process; on a host, an outcome of the worker that saw
-- the ratio met decides (doc/breaker.md, "A success and the ratios").
local function ratios(br, et, b)
  local calls, fails, slows = sums(br, et, b)
  local r, sr = br.ratio, br.slow_ratio
  local why = r and fails > 0 and reached(fails, calls, r)
              and "failure_ratio"
    or sr and slows > 0 and reached(slows, calls, sr) and "slow_call_ratio"
    or nil
  br.checked = b
  if calls < br.min_calls then
    br.armed = why ~= nil
    return nil
  end
  br.armed = false
  return why
end

-- the keys of closed epoch `epoch` and of bucket b, built once (the
-- happy path then makes no string)
local function epoch_keys(br, epoch)
  if br.et_of ~= epoch then
    local et = store.etext(epoch)
    br.et_of, br.et, br.fkey, br.wb = epoch, et, br.pre .. "f" .. et, nil
    br.seen, br.armed, br.checked = nil, false, nil
  end
end

local function bucket_keys(br, b)
  if br.wb ~= b then
    local bt = store.etext(b)
    br.wb, br.wkey = b, br.pre .. "w" .. br.et .. "." .. bt
    br.lkey = br.pre .. "l" .. br.et .. "." .. bt
  end
end

-- the outcome counted in bucket b of the window: the ratio rule it
-- meets, if any, and the bucket's value after it.  A success is judged
-- too, where the window can hold a failure or a slow call: its bucket
-- holds a failure, or this object counted one within the window (see
-- ratios)
local function windowed(br, b, ok, slow)
  bucket_keys(br, b)
  local dict, ttl = br.dict, br.window + br.len
  local v = store.incr(dict, br.wkey, ok and 1 or 1 + FAIL, ttl, br.name)
  if slow then store.incr(dict, br.lkey, 1, ttl, br.name) end
  if not ok or slow or v ~= nil and v >= FAIL then br.seen = b end
  if br.seen and b - br.seen < br.buckets
     and (not ok or slow or br.armed or br.checked ~= b) then
    return ratios(br, br.et, b), v
  end
  return nil, v
end

--- stats.outcome(br, epoch, ok, slow, now) -> the rule that trips the
-- breaker, or nil: one outcome counted in closed epoch `epoch`.  now:
-- the time (nil: read from br when the window needs it).
function T.outcome(br, epoch, ok, slow, now)
  epoch_keys(br, epoch)
  local w, v
  if br.len then
    w, v = windowed(br, floor((now or br:_now()) / br.len), ok, slow)
  end
  local why
  if br.failures then why = consecutive(br, ok, v) end
  return why or w
end

--- stats.window(br, epoch, now) -> calls, failures, slow calls in the
-- window now (for br:state's info)
-- (integers on every Lua: 5.3+ floor gives an integer)
function T.window(br, epoch, now)
  if not br.len then return nil end
  if epoch == nil then return 0, 0, 0 end
  local c, f, s = sums(br, store.etext(epoch), floor(now / br.len))
  return floor(c), floor(f), floor(s)
end

return T
